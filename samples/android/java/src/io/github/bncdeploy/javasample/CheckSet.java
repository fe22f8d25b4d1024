package io.github.bncdeploy.javasample;

import bncdeploy.BncModel;
import java.io.BufferedReader;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.Charset;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * Runs the check rows stored in the model file and compares them with what bnc-deploy's Python reference
 * computed for the same rows (the {@code check.txt} asset the build writes): every label, and the SHA-256 of
 * the scores {@code log p(c, x)} as little-endian float64 (rows x classes, zeros as +0.0), so "passed" means
 * bit-identical scores. No Android API: {@link #main(String[])} runs it on a desktop JVM too.
 */
public final class CheckSet {

    /** The reference's results, read from {@code check.txt} (lines {@code key value}; {@code #} comments). */
    public static final class Expected {
        final String modelSha256;
        final int[] labels;
        final String scoresSha256;

        Expected(String modelSha256, int[] labels, String scoresSha256) {
            this.modelSha256 = modelSha256;
            this.labels = labels;
            this.scoresSha256 = scoresSha256;
        }

        /** Parse {@code check.txt}; the stream is not closed. */
        public static Expected read(InputStream in) throws IOException {
            BufferedReader reader = new BufferedReader(new InputStreamReader(in, Charset.forName("UTF-8")));
            String model = null;
            String labels = null;
            String scores = null;
            for (String line = reader.readLine(); line != null; line = reader.readLine()) {
                line = line.trim();
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                int space = line.indexOf(' ');
                String key = space < 0 ? line : line.substring(0, space);
                String value = space < 0 ? "" : line.substring(space + 1).trim();
                if (key.equals("model_sha256")) {
                    model = value;
                } else if (key.equals("labels")) {
                    labels = value;
                } else if (key.equals("scores_sha256")) {
                    scores = value;
                }
            }
            if (model == null || labels == null || scores == null) {
                throw new IOException("check.txt needs the lines model_sha256, labels and scores_sha256");
            }
            return new Expected(model, RowText.parse(labels), scores);
        }
    }

    /** The outcome, and the line the app shows. */
    public static final class Result {
        public final boolean passed;
        public final String message;

        Result(boolean passed, String message) {
            this.passed = passed;
            this.message = message;
        }
    }

    private CheckSet() {
    }

    /** Predict the model's check rows and compare labels and the scores' hash with {@code expected}. */
    public static Result run(BncModel model, Expected expected) {
        int[][] rows = model.checkRows();
        if (rows == null) {
            return new Result(false, "FAILED: the model file stores no check rows");
        }
        if (!model.contentSha256().equals(expected.modelSha256)) {
            return new Result(false, "FAILED: check.txt was written for another model (content_sha256 "
                + expected.modelSha256 + ", this model " + model.contentSha256() + ")");
        }
        if (rows.length != expected.labels.length) {
            return new Result(false, "FAILED: " + rows.length + " check rows in the model, " + expected.labels.length
                + " labels in check.txt");
        }
        int[] labels = model.predict(rows);
        String hash = scoresSha256(model.logJoint(rows));
        int same = 0;
        int first = -1;
        for (int r = 0; r < rows.length; r++) {
            if (labels[r] == expected.labels[r]) {
                same++;
            } else if (first < 0) {
                first = r;
            }
        }
        boolean scoresOk = hash.equals(expected.scoresSha256);
        String text = same + "/" + rows.length + " labels equal the Python reference's"
            + (first < 0 ? "" : " (first difference: row " + first + ", class " + labels[first] + ", reference "
                + expected.labels[first] + ")")
            + (scoresOk ? "; scores identical (SHA-256 of the " : "; scores DIFFER (SHA-256 of the ") + rows.length
            + " x " + model.numClasses() + " float64 scores " + (scoresOk ? "matches" : "is " + hash) + ")";
        boolean passed = same == rows.length && scoresOk;
        return new Result(passed, (passed ? "passed: " : "FAILED: ") + text);
    }

    /** SHA-256 (lowercase hex) of the scores as little-endian float64, row by row, -0.0 written as +0.0. */
    static String scoresSha256(double[][] scores) {
        MessageDigest digest;
        try {
            digest = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException exc) { // every Java platform and Android has SHA-256
            throw new IllegalStateException(exc);
        }
        for (double[] row : scores) {
            ByteBuffer bytes = ByteBuffer.allocate(8 * row.length).order(ByteOrder.LITTLE_ENDIAN);
            for (double value : row) {
                bytes.putDouble(value + 0.0);
            }
            digest.update(bytes.array());
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : digest.digest()) {
            hex.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
        }
        return hex.toString();
    }

    /**
     * {@code java -cp CLASSES io.github.bncdeploy.javasample.CheckSet MODEL.bnc CHECK.txt}: prints the line the
     * app shows; exit status 0 when the check passed, 1 when it failed, 2 on unreadable files.
     */
    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: CheckSet MODEL.bnc CHECK.txt");
            System.exit(2);
        }
        Result result;
        try {
            BncModel model = BncModel.load(new File(args[0]));
            InputStream in = new FileInputStream(args[1]);
            try {
                result = run(model, Expected.read(in));
            } finally {
                in.close();
            }
        } catch (IOException | IllegalArgumentException exc) {
            System.err.println("CheckSet: error: " + exc.getMessage());
            System.exit(2);
            return;
        }
        System.out.println(result.message);
        System.exit(result.passed ? 0 : 1);
    }
}
