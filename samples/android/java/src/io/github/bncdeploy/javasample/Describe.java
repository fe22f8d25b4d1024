package io.github.bncdeploy.javasample;

import bncdeploy.BncModel;
import java.util.Locale;

/** The texts the screen shows about a model and a prediction. No Android API. */
final class Describe {
    private Describe() {
    }

    /** {@code "model.bnc: TAN, 3-bit (B_F = 1), 64 features, 10 classes, 599 check rows, sha256 0123abcd…"}. */
    static String model(String name, BncModel model) {
        int[][] check = model.checkRows();
        String bits = model.isQuantized() ? model.bits() + "-bit (B_F = " + model.fracBits() + ")" : "float32";
        String sha = model.contentSha256();
        return name + ": " + model.structure().toUpperCase(Locale.ROOT) + ", " + bits + ", " + model.numFeatures()
            + " features, " + model.numClasses() + " classes, " + (check == null ? "no" : String.valueOf(check.length))
            + " check rows, sha256 " + (sha == null ? "?" : sha.substring(0, Math.min(12, sha.length())) + "\u2026");
    }

    /** One line per feature: index, name and code range. */
    static String features(BncModel model) {
        String[] names = model.featureNames();
        int[] cards = model.cardinalities();
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < names.length; i++) {
            out.append(String.format(Locale.ROOT, "%3d %-16s 0..%d%n", i, names[i], cards[i] - 1));
        }
        return out.toString();
    }

    /** One line per class: index, name, log p(c, x) and p(c | x); the predicted class is starred. */
    static String scores(BncModel model, int label, double[] logJoint, double[] proba) {
        String[] names = model.classNames();
        StringBuilder out = new StringBuilder(String.format(Locale.ROOT, "  %3s %-10s %12s %8s%n", "c", "class",
            "log p(c,x)", "p(c|x)"));
        for (int c = 0; c < names.length; c++) {
            out.append(String.format(Locale.ROOT, "%s %3d %-10s %12.4f %8.4f%n", c == label ? " *" : "  ", c,
                names[c], logJoint[c], proba[c]));
        }
        return out.toString();
    }
}
