package bncdeploy;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.List;

/**
 * Command line: predict the rows of a CSV file with a model file, printing a CSV of labels (and scores).
 *
 * <pre>
 * java -cp CLASSES bncdeploy.Main [--scores none|decimal|hex|integer] [--raw] [--header] MODEL.bnc [INPUT.csv|-]
 * java -cp CLASSES bncdeploy.Main --check-set [--scores ...] MODEL.bnc
 * java -cp CLASSES bncdeploy.Main --info MODEL.bnc
 * </pre>
 *
 * <p>Input: one row per line, comma-separated integer codes (with {@code --raw}: raw numbers for the stored
 * discretizer); blank lines and lines starting with {@code #} are skipped; {@code --header} skips the first
 * line. Output: a header line {@code label,class[,score_0,...]} and one line per row: the class index, its name
 * and, with {@code --scores}, the scores {@code log p(c, x)} as Java's {@code Double.toString} ({@code decimal}),
 * exactly as hexadecimal floats ({@code hex}, e.g. {@code -0x1.8p1}, Python's {@code float.fromhex} reads
 * them), or the integer code sums of a quantized model ({@code integer}).
 *
 * <p>Bad input or a bad model file print {@code bnc-predict: error: MESSAGE} on stderr and exit with status 2
 * (as bnc-deploy's Python commands do); no output rows are printed then.
 */
public final class Main {
    private static final String PROG = "bnc-predict";
    private static final String USAGE = "usage: " + PROG + " [--scores none|decimal|hex|integer] [--raw] [--header] "
        + "MODEL.bnc [INPUT.csv|-]\n       " + PROG + " --check-set [--scores ...] MODEL.bnc\n       " + PROG
        + " --info MODEL.bnc";

    /** A user error: printed in one line, exit status 2. */
    private static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    private Main() {
    }

    public static void main(String[] args) {
        int status;
        try {
            status = run(args);
        } catch (UsageError | BncFormatException | BncInputException exc) {
            System.err.println(PROG + ": error: " + exc.getMessage());
            status = 2;
        } catch (FileNotFoundException exc) { // the message names the file and why (no such file, a directory)
            System.err.println(PROG + ": error: " + exc.getMessage());
            status = 2;
        } catch (IOException exc) {
            System.err.println(PROG + ": error: " + exc);
            status = 2;
        }
        System.exit(status);
    }

    static int run(String[] args) throws UsageError, IOException {
        String scores = "none";
        boolean raw = false;
        boolean header = false;
        boolean checkSet = false;
        boolean info = false;
        List<String> positional = new ArrayList<String>();
        for (int k = 0; k < args.length; k++) {
            String arg = args[k];
            if (arg.equals("--scores")) {
                if (++k >= args.length) {
                    throw new UsageError("--scores needs a value: none, decimal, hex or integer");
                }
                scores = args[k];
                if (!scores.equals("none") && !scores.equals("decimal") && !scores.equals("hex")
                        && !scores.equals("integer")) {
                    throw new UsageError("--scores must be none, decimal, hex or integer, got '" + scores + "'");
                }
            } else if (arg.equals("--raw")) {
                raw = true;
            } else if (arg.equals("--header")) {
                header = true;
            } else if (arg.equals("--check-set")) {
                checkSet = true;
            } else if (arg.equals("--info")) {
                info = true;
            } else if (arg.equals("-h") || arg.equals("--help")) {
                System.out.println(USAGE);
                return 0;
            } else if (arg.startsWith("--")) {
                throw new UsageError("unknown option " + arg + "\n" + USAGE);
            } else {
                positional.add(arg);
            }
        }
        int wanted = checkSet || info ? 1 : 2;
        if (positional.size() < 1 || positional.size() > wanted) {
            throw new UsageError("expected " + (wanted == 1 ? "MODEL.bnc" : "MODEL.bnc [INPUT.csv|-]") + "\n" + USAGE);
        }
        BncModel model = BncModel.load(new File(positional.get(0)));
        Writer out = new BufferedWriter(new OutputStreamWriter(System.out, Charset.forName("UTF-8")));
        if (info) {
            writeInfo(model, out);
            out.flush();
            return 0;
        }
        if (scores.equals("integer") && !model.isQuantized()) {
            throw new UsageError("--scores integer needs a quantized model; this one stores float tables");
        }
        int[][] rows;
        if (checkSet) {
            if (raw) {
                throw new UsageError("--check-set predicts the stored codes; it does not take --raw");
            }
            rows = model.checkRows();
            if (rows == null) {
                throw new UsageError(positional.get(0) + ": the model file stores no check set");
            }
        } else {
            String input = positional.size() > 1 ? positional.get(1) : "-";
            rows = readRows(model, input, raw, header);
        }
        writeResults(model, rows, scores, out);
        out.flush();
        return 0;
    }

    /** Parse (and, for raw values, discretize) every row, then check all; errors name the line. */
    private static int[][] readRows(BncModel model, String input, boolean raw, boolean header)
            throws IOException, UsageError {
        if (raw && !model.hasDiscretizer()) {
            throw new UsageError("--raw: this model was trained on discrete data and stores no discretizer");
        }
        String name = input.equals("-") ? "<stdin>" : input;
        InputStream stream = input.equals("-") ? System.in : new FileInputStream(input);
        List<int[]> rows = new ArrayList<int[]>();
        List<Integer> lines = new ArrayList<Integer>();
        BufferedReader reader = new BufferedReader(new InputStreamReader(stream, Charset.forName("UTF-8")));
        try {
            String line;
            int lineNumber = 0;
            while ((line = reader.readLine()) != null) {
                lineNumber++;
                if ((header && lineNumber == 1) || line.trim().isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] fields = line.split(",", -1);
                int row = rows.size();
                String at = name + " line " + lineNumber + ": ";
                try {
                    int[] codes;
                    if (raw) {
                        double[] values = new double[fields.length];
                        for (int j = 0; j < fields.length; j++) {
                            values[j] = parseNumber(model, fields[j].trim(), row, j);
                        }
                        codes = model.discretizeRow(values, row);
                    } else {
                        codes = new int[fields.length];
                        for (int j = 0; j < fields.length; j++) {
                            codes[j] = parseCode(model, fields[j].trim(), row, j);
                        }
                    }
                    model.checkRow(codes, row);
                    rows.add(codes);
                    lines.add(lineNumber);
                } catch (BncInputException exc) {
                    throw new BncInputException(at + exc.getMessage(), exc.getRow(), exc.getFeature());
                }
            }
        } finally {
            if (stream != System.in) {
                reader.close();
            }
        }
        return rows.toArray(new int[rows.size()][]);
    }

    private static int parseCode(BncModel model, String field, int row, int feature) {
        try {
            return Integer.parseInt(field);
        } catch (NumberFormatException exc) {
            throw new BncInputException(featureText(model, feature) + " has value '" + field + "' in row " + row
                + ", not an integer code", row, feature);
        }
    }

    private static double parseNumber(BncModel model, String field, int row, int feature) {
        try {
            return Double.parseDouble(field);
        } catch (NumberFormatException exc) {
            throw new BncInputException(featureText(model, feature) + " has value '" + field + "' in row " + row
                + ", not a number", row, feature);
        }
    }

    private static String featureText(BncModel model, int feature) {
        return feature < model.numFeatures() ? "feature " + feature + model.featureLabel(feature)
            : "value " + feature;
    }

    private static void writeResults(BncModel model, int[][] rows, String scores, Writer out) throws IOException {
        String[] classes = model.classNames();
        StringBuilder line = new StringBuilder("label,class");
        if (!scores.equals("none")) {
            for (int c = 0; c < classes.length; c++) {
                line.append(",score_").append(c);
            }
        }
        out.write(line.append('\n').toString());
        int[] labels = model.predict(rows);
        double[][] logJoint = scores.equals("decimal") || scores.equals("hex") ? model.logJoint(rows) : null;
        for (int r = 0; r < rows.length; r++) {
            line.setLength(0);
            line.append(labels[r]).append(',').append(csvField(classes[labels[r]]));
            if (scores.equals("integer")) {
                for (int s : model.integerScores(rows[r])) {
                    line.append(',').append(s);
                }
            } else if (logJoint != null) {
                for (double s : logJoint[r]) {
                    line.append(',').append(scores.equals("hex") ? Double.toHexString(s) : Double.toString(s));
                }
            }
            out.write(line.append('\n').toString());
        }
    }

    private static void writeInfo(BncModel model, Writer out) throws IOException {
        out.write("kind: bnc\n");
        out.write("structure: " + model.structure() + "\n");
        out.write("bits: " + model.bits() + (model.isQuantized() ? " (B_F = " + model.fracBits() + ")" : " (float)")
            + "\n");
        out.write("features: " + model.numFeatures() + "\n");
        out.write("classes: " + model.numClasses() + "\n");
        out.write("discretizer: " + (model.hasDiscretizer() ? "yes" : "no") + "\n");
        int[][] check = model.checkRows();
        out.write("check rows: " + (check == null ? 0 : check.length) + "\n");
        out.write("content_sha256: " + model.contentSha256() + "\n");
    }

    /** RFC 4180 quoting for a class name holding a comma, quote or line break. */
    private static String csvField(String value) {
        if (value.indexOf(',') < 0 && value.indexOf('"') < 0 && value.indexOf('\n') < 0 && value.indexOf('\r') < 0) {
            return value;
        }
        return '"' + value.replace("\"", "\"\"") + '"';
    }
}
