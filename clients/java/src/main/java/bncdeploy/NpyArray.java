package bncdeploy;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.Charset;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One array read from NumPy's {@code .npy} format (versions 1, 2 and 3), as {@code np.save} writes it.
 *
 * <p>Supported: C-order arrays of booleans, signed and unsigned integers of 1, 2, 4 and 8 bytes and
 * float32/float64, either byte order; anything else (object or structured dtypes, Fortran order) is
 * refused. {@link #dtype} is NumPy's {@code dtype.str} (e.g. {@code "|u1"}, {@code "<i8"},
 * {@code "<f4"}) and {@link #data} the raw element bytes, exactly what the model file's content hash
 * covers ({@code array.dtype.str}, {@code array.tobytes()}).
 */
final class NpyArray {
    private static final byte[] MAGIC = {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y'};
    private static final Pattern DESCR = Pattern.compile("'descr'\\s*:\\s*'([<>|=])([biuf])(\\d+)'");
    private static final Pattern FORTRAN = Pattern.compile("'fortran_order'\\s*:\\s*(True|False)");
    private static final Pattern SHAPE = Pattern.compile("'shape'\\s*:\\s*\\(([^)]*)\\)");

    final String dtype;
    final char kind;
    final int itemSize;
    final long[] shape;
    final byte[] data;
    private final ByteOrder order;

    private NpyArray(String dtype, char kind, int itemSize, ByteOrder order, long[] shape, byte[] data) {
        this.dtype = dtype;
        this.kind = kind;
        this.itemSize = itemSize;
        this.order = order;
        this.shape = shape;
        this.data = data;
    }

    /** Parse a whole {@code .npy} file; IllegalArgumentException says what is wrong. */
    static NpyArray parse(byte[] bytes) {
        for (int i = 0; i < MAGIC.length; i++) {
            if (bytes.length <= i || bytes[i] != MAGIC[i]) {
                throw new IllegalArgumentException("not a .npy array (bad magic)");
            }
        }
        if (bytes.length < 10) {
            throw new IllegalArgumentException("truncated .npy header");
        }
        int major = bytes[6] & 0xFF;
        ByteBuffer buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        long headerLength;
        int headerStart;
        if (major == 1) {
            headerLength = buffer.getShort(8) & 0xFFFF;
            headerStart = 10;
        } else if (major == 2 || major == 3) {
            if (bytes.length < 12) {
                throw new IllegalArgumentException("truncated .npy header");
            }
            headerLength = buffer.getInt(8) & 0xFFFFFFFFL;
            headerStart = 12;
        } else {
            throw new IllegalArgumentException(".npy format version " + major + " is not supported");
        }
        if (headerStart + headerLength > bytes.length) {
            throw new IllegalArgumentException("truncated .npy header");
        }
        // Version 3 allows UTF-8 in the header; the keys we read are ASCII either way.
        String header = new String(bytes, headerStart, (int) headerLength, Charset.forName("UTF-8"));
        Matcher descr = DESCR.matcher(header);
        Matcher fortran = FORTRAN.matcher(header);
        Matcher shapeMatch = SHAPE.matcher(header);
        if (!descr.find() || !fortran.find() || !shapeMatch.find()) {
            throw new IllegalArgumentException("unsupported .npy header " + header.trim()
                + " (plain boolean, integer or float arrays only)");
        }
        if (fortran.group(1).equals("True")) {
            throw new IllegalArgumentException("Fortran-order .npy arrays are not supported");
        }
        char kind = descr.group(2).charAt(0);
        int itemSize = Integer.parseInt(descr.group(3));
        boolean sizeOk = kind == 'f' ? (itemSize == 4 || itemSize == 8)
            : kind == 'b' ? itemSize == 1 : (itemSize == 1 || itemSize == 2 || itemSize == 4 || itemSize == 8);
        if (!sizeOk) {
            throw new IllegalArgumentException("unsupported .npy dtype " + descr.group(0));
        }
        char byteOrder = descr.group(1).charAt(0);
        if (byteOrder == '=') {
            byteOrder = '<'; // np.save never writes '=' (native); .npy files are read as little-endian then
        }
        // NumPy's dtype.str marks one-byte types as '|' (no byte order), whatever the header said.
        String dtypeStr = (itemSize == 1 ? '|' : byteOrder) + String.valueOf(kind) + itemSize;
        ByteOrder order = byteOrder == '>' ? ByteOrder.BIG_ENDIAN : ByteOrder.LITTLE_ENDIAN;
        long[] shape = parseShape(shapeMatch.group(1));
        long size = itemSize;
        for (long n : shape) {
            if (n != 0 && size > Integer.MAX_VALUE / n) {
                throw new IllegalArgumentException("array of shape " + shapeMatch.group(1) + " is too large");
            }
            size *= n;
        }
        long dataStart = headerStart + headerLength;
        if (bytes.length - dataStart != size) {
            throw new IllegalArgumentException("array data has " + (bytes.length - dataStart) + " bytes, its header "
                + "promises " + size + " (truncated or padded)");
        }
        byte[] data = new byte[(int) size];
        System.arraycopy(bytes, (int) dataStart, data, 0, (int) size);
        return new NpyArray(dtypeStr, kind, itemSize, order, shape, data);
    }

    private static long[] parseShape(String text) {
        String[] parts = text.split(",");
        int n = 0;
        long[] dims = new long[parts.length];
        for (String part : parts) {
            String trimmed = part.trim();
            if (trimmed.isEmpty()) {
                continue; // "()" and the trailing comma of "(5,)"
            }
            if (trimmed.endsWith("L")) {
                trimmed = trimmed.substring(0, trimmed.length() - 1); // Python 2 long literals in old files
            }
            long dim = Long.parseLong(trimmed);
            if (dim < 0) {
                throw new IllegalArgumentException("negative dimension in .npy shape (" + text + ")");
            }
            dims[n++] = dim;
        }
        long[] shape = new long[n];
        System.arraycopy(dims, 0, shape, 0, n);
        return shape;
    }

    long size() {
        return data.length / itemSize;
    }

    /** {@code list(array.shape)} as Python prints it: {@code [3, 4]}, {@code [5]}, {@code []}. */
    String shapeString() {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < shape.length; i++) {
            if (i > 0) {
                out.append(", ");
            }
            out.append(shape[i]);
        }
        return out.append(']').toString();
    }

    boolean isInteger() {
        return kind == 'i' || kind == 'u' || kind == 'b';
    }

    /** Element {@code i} of an integer array as a long; uint64 values above 2^63 - 1 are refused. */
    long getLong(int i) {
        ByteBuffer buffer = ByteBuffer.wrap(data).order(order);
        int at = i * itemSize;
        switch (itemSize) {
            case 1:
                return kind == 'i' ? buffer.get(at) : buffer.get(at) & 0xFFL;
            case 2:
                return kind == 'i' ? buffer.getShort(at) : buffer.getShort(at) & 0xFFFFL;
            case 4:
                return kind == 'i' ? buffer.getInt(at) : buffer.getInt(at) & 0xFFFFFFFFL;
            default:
                long value = buffer.getLong(at);
                if (kind == 'u' && value < 0) {
                    throw new IllegalArgumentException("uint64 value above 2^63 - 1");
                }
                return value;
        }
    }

    /** All elements of an integer array as ints (C order); values outside int are refused. */
    int[] toIntArray() {
        if (!isInteger()) {
            throw new IllegalArgumentException("expected an integer array, got dtype " + dtype);
        }
        int n = (int) size();
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            long value = getLong(i);
            if (value < Integer.MIN_VALUE || value > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("value " + value + " does not fit an int");
            }
            out[i] = (int) value;
        }
        return out;
    }

    /** All elements of a float32 array (C order). */
    float[] toFloatArray() {
        if (kind != 'f' || itemSize != 4) {
            throw new IllegalArgumentException("expected a float32 array, got dtype " + dtype);
        }
        ByteBuffer buffer = ByteBuffer.wrap(data).order(order);
        float[] out = new float[(int) size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = buffer.getFloat(i * 4);
        }
        return out;
    }
}
