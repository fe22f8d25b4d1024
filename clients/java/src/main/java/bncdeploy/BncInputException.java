package bncdeploy;

/**
 * Inputs that do not match the model's features: a row of the wrong length, or a code outside its feature's
 * range (a raw value that is not finite). The message names the row, the feature (index and name) and the
 * value, as bnc-deploy's Python checks do; {@link #getRow()} and {@link #getFeature()} give them to code
 * ({@code -1} where they do not apply).
 */
public class BncInputException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;
    private final int row;
    private final int feature;

    public BncInputException(String message, int row, int feature) {
        super(message);
        this.row = row;
        this.feature = feature;
    }

    /** Index of the offending row in the batch (0 for a single row), or -1. */
    public int getRow() {
        return row;
    }

    /** Index of the offending feature, or -1 (e.g. a row of the wrong length). */
    public int getFeature() {
        return feature;
    }
}
