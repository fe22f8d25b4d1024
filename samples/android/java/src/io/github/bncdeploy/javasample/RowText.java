package io.github.bncdeploy.javasample;

/** A row of integer codes as the user types it: values separated by commas and/or spaces. No Android API. */
public final class RowText {
    private RowText() {
    }

    /** Parse {@code "3, 0 5,1"}; a value that is not an integer is named in the exception's message. */
    public static int[] parse(String text) {
        String trimmed = text.trim();
        if (trimmed.isEmpty()) {
            return new int[0];
        }
        String[] parts = trimmed.split("[,\\s]+");
        int[] codes = new int[parts.length];
        for (int k = 0; k < parts.length; k++) {
            try {
                codes[k] = Integer.parseInt(parts[k]);
            } catch (NumberFormatException exc) {
                throw new IllegalArgumentException("value " + k + " ('" + parts[k] + "') is not an integer code");
            }
        }
        return codes;
    }

    /** {@code "3, 0, 5, 1"}. */
    public static String format(int[] codes) {
        StringBuilder out = new StringBuilder();
        for (int k = 0; k < codes.length; k++) {
            out.append(k == 0 ? "" : ", ").append(codes[k]);
        }
        return out.toString();
    }
}
