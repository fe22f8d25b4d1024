package bncdeploy;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A small JSON reader for the model file's {@code header.json}, and the canonical form the content hash covers.
 *
 * <p>Values parse to {@link Map} (keys sorted by code point, a repeated key keeps its last value, as
 * Python's {@code json.loads} does), {@link List}, {@link String}, {@link Boolean}, {@code null} and
 * {@link Number}. Numbers keep the exact text of their token, because the canonical form must print them
 * as Python did: the header is written by Python's {@code json} module, whose number tokens are already
 * {@code repr(int)}/{@code repr(float)}, so re-printing the token reproduces Python's canonical JSON
 * byte for byte. (A header rewritten by another tool with, say, {@code 1E-5} instead of {@code 1e-05}
 * would fail the content hash and be refused: never misread.)
 *
 * <p>{@link #canonical(Object)} is Python's {@code json.dumps(obj, sort_keys=True, separators=(",", ":"),
 * ensure_ascii=True)}: no whitespace, keys sorted by code point, every character outside printable
 * ASCII written as a lowercase {@code \\uXXXX} escape of its UTF-16 code units.
 */
final class Json {

    /** A JSON number, kept as its token text; {@link #doubleValue()} parses it correctly rounded. */
    static final class Number extends java.lang.Number {
        private static final long serialVersionUID = 1L;
        final String text;

        Number(String text) {
            this.text = text;
        }

        boolean isInteger() {
            return text.indexOf('.') < 0 && text.indexOf('e') < 0 && text.indexOf('E') < 0;
        }

        @Override public int intValue() {
            long value = longValue();
            if (value < Integer.MIN_VALUE || value > Integer.MAX_VALUE) {
                throw new NumberFormatException("number " + text + " does not fit an int");
            }
            return (int) value;
        }

        @Override public long longValue() {
            if (!isInteger()) {
                throw new NumberFormatException("number " + text + " is not an integer");
            }
            return Long.parseLong(text);
        }

        @Override public float floatValue() {
            return (float) doubleValue();
        }

        @Override public double doubleValue() {
            return Double.parseDouble(text); // correctly rounded, like Python's float()
        }

        @Override public String toString() {
            return text;
        }
    }

    /** Python sorts str keys by code point; String.compareTo compares UTF-16 units (differs above U+FFFF). */
    static final Comparator<String> CODE_POINT_ORDER = new Comparator<String>() {
        @Override public int compare(String a, String b) {
            int i = 0;
            int j = 0;
            while (i < a.length() && j < b.length()) {
                int ca = a.codePointAt(i);
                int cb = b.codePointAt(j);
                if (ca != cb) {
                    return ca < cb ? -1 : 1;
                }
                i += Character.charCount(ca);
                j += Character.charCount(cb);
            }
            return (a.length() - i) - (b.length() - j);
        }
    };

    private final String s;
    private int pos;

    private Json(String s) {
        this.s = s;
    }

    /** Parse one JSON document; IllegalArgumentException names the offset of the first problem. */
    static Object parse(String text) {
        Json parser = new Json(text);
        parser.skipWhitespace();
        Object value = parser.value(0);
        parser.skipWhitespace();
        if (parser.pos != text.length()) {
            throw parser.error("extra data after the JSON value");
        }
        return value;
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("invalid JSON at offset " + pos + ": " + what);
    }

    private void skipWhitespace() {
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private Object value(int depth) {
        if (depth > 512) {
            throw error("nested too deeply");
        }
        if (pos >= s.length()) {
            throw error("unexpected end");
        }
        char c = s.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Object literal(String word, Object value) {
        if (!s.startsWith(word, pos)) {
            throw error("expected " + word);
        }
        pos += word.length();
        return value;
    }

    private Map<String, Object> object(int depth) {
        Map<String, Object> map = new TreeMap<String, Object>(CODE_POINT_ORDER);
        pos++; // '{'
        skipWhitespace();
        if (pos < s.length() && s.charAt(pos) == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            if (pos >= s.length() || s.charAt(pos) != '"') {
                throw error("expected a string key");
            }
            String key = string();
            skipWhitespace();
            if (pos >= s.length() || s.charAt(pos) != ':') {
                throw error("expected ':'");
            }
            pos++;
            skipWhitespace();
            map.put(key, value(depth + 1)); // a repeated key keeps its last value, as in Python
            skipWhitespace();
            if (pos >= s.length()) {
                throw error("unexpected end in an object");
            }
            char c = s.charAt(pos++);
            if (c == '}') {
                return map;
            }
            if (c != ',') {
                throw error("expected ',' or '}'");
            }
        }
    }

    private List<Object> array(int depth) {
        List<Object> list = new ArrayList<Object>();
        pos++; // '['
        skipWhitespace();
        if (pos < s.length() && s.charAt(pos) == ']') {
            pos++;
            return list;
        }
        while (true) {
            skipWhitespace();
            list.add(value(depth + 1));
            skipWhitespace();
            if (pos >= s.length()) {
                throw error("unexpected end in an array");
            }
            char c = s.charAt(pos++);
            if (c == ']') {
                return list;
            }
            if (c != ',') {
                throw error("expected ',' or ']'");
            }
        }
    }

    private String string() {
        StringBuilder out = new StringBuilder();
        pos++; // opening quote
        while (true) {
            if (pos >= s.length()) {
                throw error("unterminated string");
            }
            char c = s.charAt(pos++);
            if (c == '"') {
                return out.toString();
            }
            if (c < 0x20) {
                throw error("control character in a string");
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (pos >= s.length()) {
                throw error("unterminated escape");
            }
            char e = s.charAt(pos++);
            switch (e) {
                case '"': out.append('"'); break;
                case '\\': out.append('\\'); break;
                case '/': out.append('/'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (pos + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        out.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException exc) {
                        throw error("bad \\u escape");
                    }
                    pos += 4;
                    break;
                default:
                    throw error("bad escape \\" + e);
            }
        }
    }

    private Number number() {
        int start = pos;
        if (s.charAt(pos) == '-') {
            pos++;
        }
        if (pos < s.length() && s.charAt(pos) == '0') {
            pos++;
        } else if (!digits()) {
            throw error("bad number");
        }
        if (pos < s.length() && s.charAt(pos) == '.') {
            pos++;
            if (!digits()) {
                throw error("bad number");
            }
        }
        if (pos < s.length() && (s.charAt(pos) == 'e' || s.charAt(pos) == 'E')) {
            pos++;
            if (pos < s.length() && (s.charAt(pos) == '+' || s.charAt(pos) == '-')) {
                pos++;
            }
            if (!digits()) {
                throw error("bad number");
            }
        }
        String text = s.substring(start, pos);
        // Python prints the integer -0 as 0; every other JSON integer token already is its repr.
        return new Number("-0".equals(text) ? "0" : text);
    }

    private boolean digits() {
        int start = pos;
        while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
            pos++;
        }
        return pos > start;
    }

    // -- canonical form ---------------------------------------------------------------------------

    /** Python's {@code json.dumps(value, sort_keys=True, separators=(",", ":"))} of a parsed value. */
    static String canonical(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    @SuppressWarnings("unchecked")
    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean) {
            out.append(((Boolean) value).booleanValue() ? "true" : "false");
        } else if (value instanceof Number) {
            out.append(((Number) value).text);
        } else if (value instanceof String) {
            writeString(out, (String) value);
        } else if (value instanceof List) {
            out.append('[');
            boolean first = true;
            for (Object item : (List<Object>) value) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item);
            }
            out.append(']');
        } else if (value instanceof Map) {
            // Sort here too: a map built in code need not be a TreeMap.
            Map<String, Object> sorted = new TreeMap<String, Object>(CODE_POINT_ORDER);
            sorted.putAll((Map<String, Object>) value);
            out.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> entry : sorted.entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeString(out, entry.getKey());
                out.append(':');
                write(out, entry.getValue());
            }
            out.append('}');
        } else {
            throw new IllegalArgumentException("not a JSON value: " + value.getClass().getName());
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** Python's ensure_ascii string encoder: short escapes, else \\uXXXX for anything outside ' '..'~'. */
    private static void writeString(StringBuilder out, String value) {
        out.append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c >= ' ' && c <= '~') {
                        out.append(c);
                    } else {
                        out.append("\\u").append(HEX[(c >> 12) & 15]).append(HEX[(c >> 8) & 15])
                           .append(HEX[(c >> 4) & 15]).append(HEX[c & 15]);
                    }
            }
        }
        out.append('"');
    }
}
