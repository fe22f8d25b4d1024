package bncdeploy;

import java.io.BufferedInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import java.util.Map;

/**
 * A Bayesian network classifier (naive Bayes or TAN) read from a bnc-deploy model file ({@code .bnc}), with
 * the same predictions as bnc-deploy's NumPy reference ({@code bnc_deploy/reference/bnc.py}). No
 * dependencies beyond the Java 8 standard library; runs on Android.
 *
 * <p><b>Scores.</b> Feature {@code i} with parent {@code pa(i)} ({@code -1}: the class only) reads row
 * {@code offset_i + x_i * |X_pa(i)| + x_pa(i)} of the stacked tables. A quantized model (B = 1..8 bits) sums
 * its integer codes exactly, {@code s_c = code_c + sum_i code_{row_i, c}}, and its score is
 * {@code log p(c, x) = -s_c * 2^-B_F}, exact in a double. A float model widens its float32 tables to
 * double and adds the features' terms in feature order, then adds the class prior:
 * {@code log p(c, x) = class_c + (((0 + t_0) + t_1) + ... + t_{D-1})}, the order NumPy's
 * {@code table[rows].sum(axis=1)} uses for the reference's (rows, features, classes) array, so scores are
 * identical to the reference's float64 scores. The label is the first class with the largest score
 * (for quantized models: the smallest code sum), as {@code np.argmax}.
 *
 * <p><b>Checks.</b> Loading verifies the file ({@link BncFormatException}: format, version, content hash,
 * consistency); every input row is checked ({@link BncInputException} naming row, feature and value).
 * Instances are immutable and safe to share between threads.
 */
public final class BncModel {
    private final String where;
    private final String structure;
    private final String[] classNames;
    private final String[] featureNames;
    private final int[] cardinalities;
    private final int[] parents;
    private final int[] parentCardinalities;
    private final int[] offsets;
    private final int nClasses;
    private final int nFeatures;
    // Quantized models: codes; float models: log-probabilities widened to double. The other pair is null.
    private final int totalBits;
    private final int intBits;
    private final double step;
    private final int[] classCodes;
    private final int[] tableCodes;
    private final double[] classLogp;
    private final double[] tableLogp;
    private final double[][] cutPoints;
    private final int[][] checkX;
    private final String contentSha256;

    private BncModel(String where, ModelContainer container) throws BncFormatException {
        this.where = where;
        Map<String, Object> header = container.header;
        Map<String, NpyArray> arrays = container.arrays;
        Object kind = header.get("kind");
        if (!"bnc".equals(kind)) {
            throw new BncFormatException(where + ": this predictor reads Bayesian network classifiers (kind 'bnc'); "
                + "the file holds kind " + (kind instanceof String ? "'" + kind + "'" : String.valueOf(kind)));
        }
        contentSha256 = (String) header.get("content_sha256");
        classNames = stringList(header, "class_names");
        featureNames = stringList(header, "feature_names");
        nClasses = classNames.length;
        Object quantization = header.get("quantization");
        boolean quantized = quantization != null;
        if (quantized) {
            if (!(quantization instanceof Map)) {
                throw malformed("quantization must be an object or null");
            }
            totalBits = intField((Map<?, ?>) quantization, "total_bits");
            intBits = intField((Map<?, ?>) quantization, "int_bits");
            // The ranges of bnc_deploy.quantizers.FixedPointLogQuantizer (codes fit uint8).
            if (totalBits < 1 || totalBits > 8) {
                throw new BncFormatException(where + ": unsupported bit width B=" + totalBits
                    + ": total bits must be in 1..8 (codes are stored as uint8)");
            }
            if (intBits < 1 || intBits > 6) {
                throw new BncFormatException(where + ": unsupported integer bits B_I=" + intBits + ": must be in 1..6");
            }
            step = Math.scalb(1.0, intBits - totalBits); // 2^-B_F, exact
        } else {
            totalBits = 0;
            intBits = 0;
            step = Double.NaN;
        }
        String[] required = quantized ? new String[] {"parents", "cardinalities", "class_codes", "table_codes"}
            : new String[] {"parents", "cardinalities", "class_logp", "table_logp"};
        for (String name : required) {
            if (!arrays.containsKey(name)) {
                throw new BncFormatException(where + ": missing array '" + name + "'");
            }
        }
        cardinalities = intArray(arrays, "cardinalities");
        parents = intArray(arrays, "parents");
        nFeatures = cardinalities.length;
        checkShape(arrays.get("cardinalities"), "cardinalities", nFeatures);
        checkShape(arrays.get("parents"), "parents", nFeatures);
        if (nClasses < 2) {
            throw new BncFormatException(where + ": a classifier needs at least 2 classes, got " + nClasses);
        }
        if (featureNames.length != nFeatures) {
            throw new BncFormatException(where + ": " + featureNames.length + " feature names for " + nFeatures
                + " features");
        }
        for (int i = 0; i < nFeatures; i++) {
            if (cardinalities[i] < 1) {
                throw new BncFormatException(where + ": feature " + i + " has cardinality " + cardinalities[i]
                    + " (must be >= 1)");
            }
            if (parents[i] < -1 || parents[i] >= nFeatures) {
                throw new BncFormatException(where + ": feature " + i + " has parent " + parents[i] + ", outside -1.."
                    + (nFeatures - 1));
            }
        }
        checkAcyclic();
        parentCardinalities = new int[nFeatures];
        offsets = new int[nFeatures];
        long rows = 0;
        for (int i = 0; i < nFeatures; i++) {
            parentCardinalities[i] = parents[i] >= 0 ? cardinalities[parents[i]] : 1;
            offsets[i] = (int) rows;
            rows += (long) cardinalities[i] * parentCardinalities[i];
            if (rows * nClasses > Integer.MAX_VALUE) {
                throw new BncFormatException(where + ": tables too large for this reader");
            }
        }
        int nRows = (int) rows;
        if (quantized) {
            NpyArray classArray = arrays.get("class_codes");
            NpyArray tableArray = arrays.get("table_codes");
            checkCodes(classArray, "class", nClasses, -1);
            checkCodes(tableArray, "table", nRows, nClasses);
            classCodes = classArray.toIntArray();
            tableCodes = tableArray.toIntArray();
            classLogp = null;
            tableLogp = null;
        } else {
            classLogp = logp(arrays.get("class_logp"), "class", nClasses, -1);
            tableLogp = logp(arrays.get("table_logp"), "table", nRows, nClasses);
            classCodes = null;
            tableCodes = null;
        }
        structure = rowsHaveParents() ? "tan" : "nb";
        cutPoints = readDiscretizer(header.get("discretizer"));
        checkX = readCheckSet(arrays);
    }

    // -- loading ------------------------------------------------------------------------------------

    /** Load and verify a model file. */
    public static BncModel load(File file) throws IOException {
        if (file.isDirectory()) {
            throw new BncFormatException(file + ": is a directory, not a model file");
        }
        if (!file.isFile()) {
            throw new BncFormatException(file + ": no such model file");
        }
        InputStream in = new BufferedInputStream(new FileInputStream(file));
        try {
            return load(in, file.toString());
        } finally {
            in.close();
        }
    }

    /** Load and verify a model file from a stream (e.g. an Android asset); the stream is not closed. */
    public static BncModel load(InputStream in) throws IOException {
        return load(in, "model stream");
    }

    /** {@link #load(InputStream)}, naming the model {@code name} in error messages. */
    public static BncModel load(InputStream in, String name) throws IOException {
        return new BncModel(name, ModelContainer.read(in, name));
    }

    // -- facts --------------------------------------------------------------------------------------

    public String[] classNames() {
        return classNames.clone();
    }

    public String[] featureNames() {
        return featureNames.clone();
    }

    /** Number of codes of each feature: feature {@code i} takes {@code 0 .. cardinalities()[i] - 1}. */
    public int[] cardinalities() {
        return cardinalities.clone();
    }

    /** Parent feature of each feature, {@code -1} for the class only (naive Bayes: all {@code -1}). */
    public int[] parents() {
        return parents.clone();
    }

    public int numFeatures() {
        return nFeatures;
    }

    public int numClasses() {
        return nClasses;
    }

    /** {@code "nb"} or {@code "tan"}. */
    public String structure() {
        return structure;
    }

    public boolean isQuantized() {
        return classCodes != null;
    }

    /** Bits per stored parameter B (1..8), or 32 for a float model. */
    public int bits() {
        return isQuantized() ? totalBits : 32;
    }

    /** Fractional bits B_F = B - B_I of a quantized model (may be negative); scores are multiples of 2^-B_F. */
    public int fracBits() {
        requireQuantized("fracBits");
        return totalBits - intBits;
    }

    /** The file's {@code content_sha256} (identifies the model, e.g. in logs). */
    public String contentSha256() {
        return contentSha256;
    }

    /** Whether the file stores a discretizer, so {@link #predictRaw(double[])} can take raw values. */
    public boolean hasDiscretizer() {
        return cutPoints != null;
    }

    /** The check rows stored in the model file (copies), or null when it stores none. */
    public int[][] checkRows() {
        if (checkX == null) {
            return null;
        }
        int[][] out = new int[checkX.length][];
        for (int r = 0; r < checkX.length; r++) {
            out[r] = checkX[r].clone();
        }
        return out;
    }

    // -- prediction -----------------------------------------------------------------------------------

    /** Most probable class of one row of codes (first maximum). */
    public int predict(int[] codes) {
        checkRow(codes, 0);
        return predictChecked(codes);
    }

    /** {@link #predict(int[])} of every row; an error names the first bad row. */
    public int[] predict(int[][] rows) {
        checkRows(rows);
        int[] labels = new int[rows.length];
        for (int r = 0; r < rows.length; r++) {
            labels[r] = predictChecked(rows[r]);
        }
        return labels;
    }

    /** Class scores {@code log p(c, x)} of one row, identical to the NumPy reference's {@code log_joint}. */
    public double[] logJoint(int[] codes) {
        checkRow(codes, 0);
        return logJointChecked(codes);
    }

    /** {@link #logJoint(int[])} of every row, shape (rows, classes). */
    public double[][] logJoint(int[][] rows) {
        checkRows(rows);
        double[][] scores = new double[rows.length][];
        for (int r = 0; r < rows.length; r++) {
            scores[r] = logJointChecked(rows[r]);
        }
        return scores;
    }

    /**
     * Quantized models: the integer code sums {@code s_c} (lower is likelier; {@code log p(c, x) = -s_c * 2^-B_F}),
     * as the reference's {@code integer_scores}.
     */
    public int[] integerScores(int[] codes) {
        requireQuantized("integerScores");
        checkRow(codes, 0);
        return codeSums(codes);
    }

    /** Posterior {@code p(c | x)} of one row: the softmax of {@link #logJoint(int[])}. */
    public double[] predictProba(int[] codes) {
        double[] scores = logJoint(codes);
        double max = Double.NEGATIVE_INFINITY;
        for (double s : scores) {
            max = Math.max(max, s);
        }
        double total = 0;
        double[] p = new double[scores.length];
        for (int c = 0; c < scores.length; c++) {
            p[c] = Math.exp(scores[c] - max);
            total += p[c];
        }
        for (int c = 0; c < p.length; c++) {
            p[c] /= total;
        }
        return p;
    }

    private int predictChecked(int[] codes) {
        if (classCodes != null) {
            int[] sums = codeSums(codes);
            int best = 0;
            for (int c = 1; c < nClasses; c++) {
                if (sums[c] < sums[best]) {
                    best = c;
                }
            }
            return best;
        }
        double[] scores = logJointChecked(codes);
        int best = 0;
        for (int c = 1; c < nClasses; c++) {
            if (scores[c] > scores[best]) {
                best = c;
            }
        }
        return best;
    }

    private double[] logJointChecked(int[] codes) {
        double[] scores = new double[nClasses];
        if (classCodes != null) {
            int[] sums = codeSums(codes);
            for (int c = 0; c < nClasses; c++) {
                scores[c] = -(double) sums[c] * step; // exact: |sum| < 2^31 and step is a power of two
            }
            return scores;
        }
        // Features in order, then the class prior: the reference's class + table[rows].sum(axis=1).
        for (int i = 0; i < nFeatures; i++) {
            int base = row(codes, i) * nClasses;
            for (int c = 0; c < nClasses; c++) {
                scores[c] += tableLogp[base + c];
            }
        }
        for (int c = 0; c < nClasses; c++) {
            scores[c] = classLogp[c] + scores[c];
        }
        return scores;
    }

    private int[] codeSums(int[] codes) {
        int[] sums = classCodes.clone();
        for (int i = 0; i < nFeatures; i++) {
            int base = row(codes, i) * nClasses;
            for (int c = 0; c < nClasses; c++) {
                sums[c] += tableCodes[base + c]; // codes <= 255 and D < 2^23 (checked on load): no overflow
            }
        }
        return sums;
    }

    private int row(int[] codes, int i) {
        int parent = parents[i];
        return offsets[i] + codes[i] * parentCardinalities[i] + (parent >= 0 ? codes[parent] : 0);
    }

    // -- raw values ----------------------------------------------------------------------------------

    /**
     * Raw values to codes with the stored discretizer: code = number of cut points strictly less than the value
     * (NumPy's {@code searchsorted(cuts, x, side="left")}).
     */
    public int[] discretize(double[] raw) {
        return discretizeRow(raw, 0);
    }

    /** {@link #discretize(double[])} then {@link #predict(int[])}. */
    public int predictRaw(double[] raw) {
        int[] codes = discretizeRow(raw, 0);
        checkRow(codes, 0);
        return predictChecked(codes);
    }

    /** {@link #discretize(double[])} then {@link #logJoint(int[])}. */
    public double[] logJointRaw(double[] raw) {
        int[] codes = discretizeRow(raw, 0);
        checkRow(codes, 0);
        return logJointChecked(codes);
    }

    int[] discretizeRow(double[] raw, int rowIndex) {
        if (cutPoints == null) {
            throw new IllegalStateException("this model was trained on discrete data and stores no discretizer");
        }
        if (raw.length != cutPoints.length) {
            throw new BncInputException("row " + rowIndex + " has " + raw.length + " raw values, the discretizer "
                + "expects " + cutPoints.length, rowIndex, -1);
        }
        int[] codes = new int[raw.length];
        for (int j = 0; j < raw.length; j++) {
            double x = raw[j];
            if (Double.isNaN(x) || Double.isInfinite(x)) {
                throw new BncInputException("feature " + j + featureLabel(j) + " has non-finite value " + x
                    + " in row " + rowIndex, rowIndex, j);
            }
            double[] cuts = cutPoints[j];
            int lo = 0;
            int hi = cuts.length;
            while (lo < hi) { // first cut >= x
                int mid = (lo + hi) >>> 1;
                if (cuts[mid] < x) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            codes[j] = lo;
        }
        return codes;
    }

    // -- input checks --------------------------------------------------------------------------------

    private void checkRows(int[][] rows) {
        for (int r = 0; r < rows.length; r++) {
            checkRow(rows[r], r);
        }
    }

    /** Row length and every code in range; the message matches bnc_deploy.validation.check_codes. */
    void checkRow(int[] codes, int rowIndex) {
        if (codes == null) {
            throw new BncInputException("row " + rowIndex + " is null", rowIndex, -1);
        }
        if (codes.length != nFeatures) {
            throw new BncInputException("row " + rowIndex + " has " + codes.length + " values, expected "
                + nFeatures + " features", rowIndex, -1);
        }
        for (int i = 0; i < nFeatures; i++) {
            if (codes[i] < 0 || codes[i] >= cardinalities[i]) {
                throw new BncInputException("feature " + i + featureLabel(i) + " has value " + codes[i] + " in row "
                    + rowIndex + ", outside its range 0.." + (cardinalities[i] - 1), rowIndex, i);
            }
        }
    }

    String featureLabel(int i) {
        return " ('" + featureNames[i] + "')";
    }

    // -- load-time helpers -------------------------------------------------------------------------------

    private BncFormatException malformed(String what) {
        return new BncFormatException(where + ": malformed header (" + what + ")");
    }

    private String[] stringList(Map<String, Object> header, String key) throws BncFormatException {
        Object value = header.get(key);
        if (!(value instanceof List)) {
            throw malformed(key + " must be a list");
        }
        List<?> list = (List<?>) value;
        String[] out = new String[list.size()];
        for (int i = 0; i < out.length; i++) {
            Object item = list.get(i);
            out[i] = item instanceof String ? (String) item : String.valueOf(item); // Python: str(name)
        }
        return out;
    }

    private int intField(Map<?, ?> map, String key) throws BncFormatException {
        Object value = map.get(key);
        if (!(value instanceof Json.Number) || !((Json.Number) value).isInteger()) {
            throw malformed("quantization." + key + " must be an integer");
        }
        try {
            return ((Json.Number) value).intValue();
        } catch (NumberFormatException exc) {
            throw malformed("quantization." + key + " is out of range");
        }
    }

    private int[] intArray(Map<String, NpyArray> arrays, String name) throws BncFormatException {
        try {
            return arrays.get(name).toIntArray();
        } catch (IllegalArgumentException exc) {
            throw new BncFormatException(where + ": array '" + name + "': " + exc.getMessage());
        }
    }

    private void checkShape(NpyArray array, String name, long... shape) throws BncFormatException {
        if (!java.util.Arrays.equals(array.shape, shape)) {
            throw new BncFormatException(where + ": " + name + " has shape " + array.shapeString() + ", expected "
                + java.util.Arrays.toString(shape));
        }
    }

    private void checkCodes(NpyArray array, String part, int rows, int columns) throws BncFormatException {
        long[] shape = columns < 0 ? new long[] {rows} : new long[] {rows, columns};
        if (!"|u1".equals(array.dtype) || !java.util.Arrays.equals(array.shape, shape)) {
            throw new BncFormatException(where + ": " + part + " codes must be uint8 of shape "
                + java.util.Arrays.toString(shape) + ", got " + array.dtype + " " + array.shapeString());
        }
        int maxCode = (1 << totalBits) - 1;
        for (byte b : array.data) {
            if ((b & 0xFF) > maxCode) {
                throw new BncFormatException(where + ": " + part + " code " + (b & 0xFF) + " exceeds " + maxCode
                    + " for " + totalBits + "-bit parameters");
            }
        }
        if (nFeatures >= (1 << 23)) {
            throw new BncFormatException(where + ": too many features for int code sums");
        }
    }

    private double[] logp(NpyArray array, String part, int rows, int columns) throws BncFormatException {
        long[] shape = columns < 0 ? new long[] {rows} : new long[] {rows, columns};
        if (!"<f4".equals(array.dtype) || !java.util.Arrays.equals(array.shape, shape)) { // as the reference: float32
            throw new BncFormatException(where + ": " + part + " log-probabilities must be float32 of shape "
                + java.util.Arrays.toString(shape) + ", got " + array.dtype + " " + array.shapeString());
        }
        float[] values = array.toFloatArray();
        double[] out = new double[values.length];
        for (int k = 0; k < values.length; k++) {
            if (Float.isNaN(values[k]) || Float.isInfinite(values[k]) || values[k] > 0) {
                throw new BncFormatException(where + ": " + part + " log-probabilities must be finite and <= 0");
            }
            out[k] = values[k]; // float32 -> float64 is exact, as the reference's astype(np.float64)
        }
        return out;
    }

    private void checkAcyclic() throws BncFormatException {
        int[] state = new int[nFeatures]; // 0 unseen, 1 on the current path, 2 done
        int[] path = new int[nFeatures];
        for (int start = 0; start < nFeatures; start++) {
            int length = 0;
            int node = start;
            while (node >= 0 && state[node] == 0) {
                state[node] = 1;
                path[length++] = node;
                node = parents[node];
            }
            if (node >= 0 && state[node] == 1) {
                throw new BncFormatException(where + ": parents contain a cycle through feature " + node);
            }
            for (int k = 0; k < length; k++) {
                state[path[k]] = 2;
            }
        }
    }

    private boolean rowsHaveParents() {
        for (int parent : parents) {
            if (parent >= 0) {
                return true;
            }
        }
        return false;
    }

    private double[][] readDiscretizer(Object value) throws BncFormatException {
        if (value == null) {
            return null;
        }
        if (!(value instanceof Map) || !(((Map<?, ?>) value).get("cut_points") instanceof List)) {
            throw malformed("discretizer must be null or an object with cut_points");
        }
        Object method = ((Map<?, ?>) value).get("method");
        if (method != null && !"fayyad-irani-mdl".equals(method)) {
            throw malformed("unknown discretizer method " + method);
        }
        List<?> lists = (List<?>) ((Map<?, ?>) value).get("cut_points");
        double[][] cuts = new double[lists.size()][];
        for (int j = 0; j < cuts.length; j++) {
            if (!(lists.get(j) instanceof List)) {
                throw malformed("cut points of feature " + j + " must be a list");
            }
            List<?> list = (List<?>) lists.get(j);
            cuts[j] = new double[list.size()];
            for (int k = 0; k < list.size(); k++) {
                Object cut = list.get(k);
                if (!(cut instanceof Json.Number)) {
                    throw malformed("cut points of feature " + j + " must be numbers");
                }
                double x = ((Json.Number) cut).doubleValue();
                if (Double.isNaN(x) || Double.isInfinite(x) || (k > 0 && x <= cuts[j][k - 1])) {
                    throw malformed("cut points of feature " + j + " must be finite and strictly increasing");
                }
                cuts[j][k] = x;
            }
        }
        return cuts;
    }

    private int[][] readCheckSet(Map<String, NpyArray> arrays) throws BncFormatException {
        NpyArray x = arrays.get("check_x");
        if (x == null) {
            return null;
        }
        if (x.shape.length != 2 || x.shape[1] != nFeatures) {
            throw new BncFormatException(where + ": check_x has shape " + x.shapeString() + ", expected [n, "
                + nFeatures + "]");
        }
        int[] flat = intArray(arrays, "check_x");
        int[][] rows = new int[(int) x.shape[0]][nFeatures];
        for (int r = 0; r < rows.length; r++) {
            System.arraycopy(flat, r * nFeatures, rows[r], 0, nFeatures);
            try {
                checkRow(rows[r], r);
            } catch (BncInputException exc) {
                throw new BncFormatException(where + ": stored check set: " + exc.getMessage());
            }
        }
        return rows;
    }

    private void requireQuantized(String what) {
        if (!isQuantized()) {
            throw new IllegalStateException(what + " is defined for quantized models only");
        }
    }
}
