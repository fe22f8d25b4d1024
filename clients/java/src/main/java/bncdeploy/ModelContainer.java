package bncdeploy;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.Charset;
import java.nio.charset.CodingErrorAction;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.ZipEntry;
import java.util.zip.ZipException;
import java.util.zip.ZipInputStream;

/**
 * Reads and verifies bnc-deploy's model container ({@code bnc_deploy/artifacts/container.py}).
 *
 * <p>A model file is a ZIP of {@code header.json} and {@code arrays/<name>.npy}. Reading follows the
 * Python reader: the header must say {@code "format": "bnc-deploy-model"} with a {@code format_version}
 * this reader knows (1), every other entry must be an array, and {@code content_sha256} must equal the
 * SHA-256 of the canonical header (compact JSON, sorted keys, without {@code content_sha256}) followed by,
 * for each array in name order, {@code "\n<name>|<dtype.str>|<list(shape)>\n"} and the array's bytes.
 * Anything else is a {@link BncFormatException} naming the file; nothing is ever half-read.
 */
final class ModelContainer {
    static final String FORMAT_NAME = "bnc-deploy-model";
    static final int FORMAT_VERSION = 1;
    static final String HEADER_ENTRY = "header.json";
    static final String ARRAY_PREFIX = "arrays/";
    /** No array of a Bayesian network classifier comes near this; it stops a ZIP bomb from filling memory. */
    private static final long MAX_ENTRY_BYTES = 1L << 30;

    final Map<String, Object> header;
    final Map<String, NpyArray> arrays;

    private ModelContainer(Map<String, Object> header, Map<String, NpyArray> arrays) {
        this.header = header;
        this.arrays = arrays;
    }

    /** Read, check and hash-verify a model file from {@code in} (not closed); {@code where} names it in errors. */
    @SuppressWarnings("unchecked")
    static ModelContainer read(InputStream in, String where) throws BncFormatException {
        Map<String, byte[]> entries = new TreeMap<String, byte[]>(Json.CODE_POINT_ORDER);
        try {
            // Entry names are decoded as UTF-8 (this constructor's documented charset on the JVM and on Android;
            // the (InputStream, Charset) overload only exists from Android API 24 on).
            ZipInputStream zip = new ZipInputStream(in);
            ZipEntry entry;
            while ((entry = zip.getNextEntry()) != null) {
                if (entries.containsKey(entry.getName())) {
                    throw new BncFormatException(where + ": duplicate entry '" + entry.getName() + "' in model file");
                }
                entries.put(entry.getName(), readEntry(zip, where, entry.getName()));
            }
        } catch (BncFormatException exc) {
            throw exc;
        } catch (ZipException exc) { // bad CRC, unknown compression, damaged headers
            throw new BncFormatException(where + ": corrupt model file (" + exc.getMessage() + ")", exc);
        } catch (EOFException exc) {
            throw new BncFormatException(where + ": truncated model file", exc);
        } catch (IOException exc) {
            throw new BncFormatException(where + ": cannot read model file (" + exc + ")", exc);
        } catch (IllegalArgumentException exc) { // a ZIP entry name that is not valid UTF-8
            throw new BncFormatException(where + ": corrupt model file (" + exc.getMessage() + ")", exc);
        }
        if (entries.isEmpty()) {
            throw new BncFormatException(where + ": not a bnc-deploy model file (not a ZIP archive, or empty)");
        }
        byte[] headerBytes = entries.remove(HEADER_ENTRY);
        if (headerBytes == null) {
            throw new BncFormatException(where + ": not a bnc-deploy model file (no " + HEADER_ENTRY + ")");
        }
        Object parsed;
        try {
            parsed = Json.parse(decodeUtf8(headerBytes));
        } catch (CharacterCodingException exc) {
            throw new BncFormatException(where + ": corrupt model header (not UTF-8)");
        } catch (IllegalArgumentException exc) {
            throw new BncFormatException(where + ": corrupt model header (" + exc.getMessage() + ")");
        }
        if (!(parsed instanceof Map)) {
            throw new BncFormatException(where + ": corrupt model header");
        }
        Map<String, Object> header = (Map<String, Object>) parsed;
        checkFormat(where, header);
        Map<String, NpyArray> arrays = new TreeMap<String, NpyArray>(Json.CODE_POINT_ORDER);
        for (Map.Entry<String, byte[]> item : entries.entrySet()) {
            String name = item.getKey();
            if (!(name.startsWith(ARRAY_PREFIX) && name.endsWith(".npy"))) {
                throw new BncFormatException(where + ": unexpected entry '" + name + "' in model file");
            }
            try {
                arrays.put(name.substring(ARRAY_PREFIX.length(), name.length() - 4), NpyArray.parse(item.getValue()));
            } catch (IllegalArgumentException exc) {
                throw new BncFormatException(where + ": corrupt array '" + name + "' (" + exc.getMessage() + ")");
            }
        }
        Object expected = header.get("content_sha256");
        String actual = contentHash(header, arrays);
        if (!actual.equals(expected)) {
            String said = String.valueOf(expected);
            throw new BncFormatException(where + ": content hash mismatch (header says "
                + said.substring(0, Math.min(12, said.length())) + "..., content is " + actual.substring(0, 12)
                + "...): the file was modified or damaged after it was written");
        }
        return new ModelContainer(header, arrays);
    }

    private static byte[] readEntry(ZipInputStream zip, String where, String name) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buffer = new byte[65536];
        int n;
        while ((n = zip.read(buffer)) > 0) {
            out.write(buffer, 0, n);
            if (out.size() > MAX_ENTRY_BYTES) {
                throw new BncFormatException(where + ": entry '" + name + "' is larger than "
                    + (MAX_ENTRY_BYTES >> 20) + " MiB; not a model this reader loads");
            }
        }
        return out.toByteArray();
    }

    private static String decodeUtf8(byte[] bytes) throws CharacterCodingException {
        return Charset.forName("UTF-8").newDecoder()
            .onMalformedInput(CodingErrorAction.REPORT)
            .onUnmappableCharacter(CodingErrorAction.REPORT)
            .decode(ByteBuffer.wrap(bytes)).toString();
    }

    private static void checkFormat(String where, Map<String, Object> header) throws BncFormatException {
        Object format = header.get("format");
        if (!FORMAT_NAME.equals(format)) {
            throw new BncFormatException(where + ": not a bnc-deploy model file (format is "
                + (format instanceof String ? "'" + format + "'" : String.valueOf(format)) + ")");
        }
        Object version = header.get("format_version");
        if (!(version instanceof Json.Number) || !((Json.Number) version).isInteger()
                || ((Json.Number) version).text.startsWith("-") || "0".equals(((Json.Number) version).text)) {
            throw new BncFormatException(where + ": invalid format_version " + version);
        }
        String text = ((Json.Number) version).text;
        if (text.length() > 9 || Integer.parseInt(text) > FORMAT_VERSION) {
            throw new BncFormatException(where + ": written by a newer bnc-deploy (model format version " + text
                + "); this reader reads format versions up to " + FORMAT_VERSION + ". Upgrade it to load the file.");
        }
    }

    /** SHA-256 of the canonical header (minus {@code content_sha256}) and every array, in name order (hex). */
    static String contentHash(Map<String, Object> header, Map<String, NpyArray> arrays) {
        MessageDigest digest;
        try {
            digest = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException exc) {
            throw new IllegalStateException("SHA-256 is missing from this Java runtime", exc);
        }
        Map<String, Object> hashed = new TreeMap<String, Object>(Json.CODE_POINT_ORDER);
        hashed.putAll(header);
        hashed.remove("content_sha256");
        Charset utf8 = Charset.forName("UTF-8");
        digest.update(Json.canonical(hashed).getBytes(utf8));
        for (Map.Entry<String, NpyArray> item : arrays.entrySet()) {
            NpyArray array = item.getValue();
            digest.update(("\n" + item.getKey() + "|" + array.dtype + "|" + array.shapeString() + "\n").getBytes(utf8));
            digest.update(array.data);
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : digest.digest()) {
            hex.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        return hex.toString();
    }
}
