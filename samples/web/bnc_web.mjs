// bnc_web.mjs — run bnc-deploy exports (.onnx, .ort, .tflite) in JavaScript; no DOM, no build step.
//
// Contract (used by samples/web/app.mjs, the browser test tests/web/runner.html and the Node test
// tests/web/node_check.mjs, so the code a person copies is the code the tests check):
//
//   readModelInfo(bytes) -> {format, props, meta}
//       format: "onnx" | "ort" | "tflite", from the file's identifier (TFLite "TFL3", ORT "ORTM",
//       else an ONNX protobuf); props: the file's string metadata (ONNX/ORT metadata_props, TFLite
//       metadata buffers that hold text); meta: the parsed bnc-deploy JSON (key "bnc_deploy",
//       bnc_deploy/formats/metadata.py) or null for a file bnc-deploy did not write.
//   openModel(bytes, {ort, litert}, options) -> Model
//       ort: the onnxruntime-web (or onnxruntime-node) module; litert: @litertjs/core after
//       loadLiteRt(). Model.run(rows) takes an array of rows (arrays of numbers: integer codes, or
//       raw float values for --raw-inputs exports), validates them against the metadata (a clear
//       Error naming the row and feature), batches them to the file's batch size (static batch
//       files run in chunks, the last one padded with copies of the first row and trimmed), and
//       returns {scores: Float32Array (n x C, C order), labels: Int32Array, nClasses, labelSource,
//       ms}. labelSource is "file" (the file's label output) or "argmax" (a file without one:
//       first maximum, as ONNX ArgMax and the Python reference break ties).
//   checkSet(model) -> {ok, reason, rows}
//       runs the check rows stored in the file's metadata and compares them as
//       bnc_deploy/formats/checkset.py compare_check does: every label, and for files whose
//       metadata says "exact" the SHA-256 of the float32 scores (so "ok" means bit-identical
//       scores to the Python reference on those rows).
//
// The metadata readers are small hand-written walkers of the two standard encodings (protobuf wire
// format for ONNX, FlatBuffers for ORT and TFLite); they read only the few fields named below and
// the runtimes do the real parsing. Field numbers: onnx.proto ModelProto.metadata_props = 14;
// ORT ort.fbs InferenceSession.model = 1, Model.metadata_props = 9, StringStringEntry key/value =
// 0/1; TFLite schema.fbs Model.buffers = 4, Model.metadata = 6, Metadata name/buffer = 0/1,
// Buffer data/offset/size = 0/1/2.

export const METADATA_KEY = "bnc_deploy";
const UTF8 = new TextDecoder("utf-8");

// ---------------------------------------------------------------------------------------------
// Metadata
// ---------------------------------------------------------------------------------------------

export function fileFormat(bytes) {
  const id = bytes.length >= 8 ? UTF8.decode(bytes.subarray(4, 8)) : "";
  if (id === "TFL3") return "tflite";
  if (id === "ORTM") return "ort";
  return "onnx";
}

function readVarint(buf, pos) {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (pos >= buf.length) throw new Error("truncated protobuf varint");
    const b = buf[pos++];
    value += (b & 0x7f) * scale;  // arithmetic, not <<, so values above 2**31 stay exact
    if (!(b & 0x80)) return [value, pos];
    scale *= 128;
  }
}

// Length-delimited fields (wire type 2) of a protobuf message: [{field, start, end}].
function protoLengthFields(buf, start, end) {
  const out = [];
  let pos = start;
  while (pos < end) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key % 8;
    if (wire === 0) {
      [, pos] = readVarint(buf, pos);
    } else if (wire === 1) {
      pos += 8;
    } else if (wire === 5) {
      pos += 4;
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      if (pos + len > end) throw new Error(`protobuf field ${field} runs past the end of the file`);
      out.push({field, start: pos, end: pos + len});
      pos += len;
    } else {
      throw new Error(`unexpected protobuf wire type ${wire} at byte ${pos}`);
    }
  }
  return out;
}

function onnxMetadataProps(bytes) {
  const props = {};
  for (const f of protoLengthFields(bytes, 0, bytes.length)) {
    if (f.field !== 14) continue;  // ModelProto.metadata_props
    let key = "";
    let value = "";
    for (const g of protoLengthFields(bytes, f.start, f.end)) {
      if (g.field === 1) key = UTF8.decode(bytes.subarray(g.start, g.end));
      if (g.field === 2) value = UTF8.decode(bytes.subarray(g.start, g.end));
    }
    props[key] = value;
  }
  return props;
}

// Just enough of the FlatBuffers binary layout: tables, vectors, strings, scalars.
class FlatBuffer {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  root() { return this.view.getUint32(0, true); }
  // Absolute position of field `i` of the table at `table`, or 0 when the field is absent.
  field(table, i) {
    const vtable = table - this.view.getInt32(table, true);
    const vtableSize = this.view.getUint16(vtable, true);
    const at = 4 + 2 * i;
    if (at >= vtableSize) return 0;
    const offset = this.view.getUint16(vtable + at, true);
    return offset ? table + offset : 0;
  }
  indirect(pos) { return pos + this.view.getUint32(pos, true); }
  table(table, i) { const p = this.field(table, i); return p ? this.indirect(p) : 0; }
  vector(table, i) {
    const p = this.field(table, i);
    if (!p) return null;
    const v = this.indirect(p);
    return {length: this.view.getUint32(v, true), start: v + 4};
  }
  tableAt(vector, k) { return this.indirect(vector.start + 4 * k); }
  string(table, i) {
    const v = this.vector(table, i);
    return v ? UTF8.decode(this.bytes.subarray(v.start, v.start + v.length)) : null;
  }
  u32(table, i) { const p = this.field(table, i); return p ? this.view.getUint32(p, true) : 0; }
  u64(table, i) { const p = this.field(table, i); return p ? Number(this.view.getBigUint64(p, true)) : 0; }
}

function ortMetadataProps(bytes) {
  const fb = new FlatBuffer(bytes);
  const model = fb.table(fb.root(), 1);  // InferenceSession.model
  const props = {};
  const entries = model ? fb.vector(model, 9) : null;  // Model.metadata_props
  for (let k = 0; entries && k < entries.length; k++) {
    const entry = fb.tableAt(entries, k);
    props[fb.string(entry, 0)] = fb.string(entry, 1) ?? "";
  }
  return props;
}

function tfliteMetadataProps(bytes) {
  const fb = new FlatBuffer(bytes);
  const model = fb.root();
  const buffers = fb.vector(model, 4);
  const metadata = fb.vector(model, 6);
  const props = {};
  for (let k = 0; metadata && buffers && k < metadata.length; k++) {
    const entry = fb.tableAt(metadata, k);
    const name = fb.string(entry, 0);
    const index = fb.u32(entry, 1);
    if (index >= buffers.length) throw new Error(`TFLite metadata '${name}' names buffer ${index} of ${buffers.length}`);
    const buffer = fb.tableAt(buffers, index);
    const data = fb.vector(buffer, 0);
    let raw;
    if (data && data.length) {
      raw = bytes.subarray(data.start, data.start + data.length);
    } else {
      // Buffers stored after the flatbuffer (files over 2 GB, or converters that always do it).
      const offset = fb.u64(buffer, 1);
      const size = fb.u64(buffer, 2);
      raw = offset > 1 ? bytes.subarray(offset, offset + size) : new Uint8Array(0);
    }
    // Only text buffers are kept: TFLITE_METADATA and min_runtime_version are binary/other.
    if (name === METADATA_KEY) props[name] = UTF8.decode(raw);
  }
  return props;
}

export function readModelInfo(bytes) {
  bytes = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const format = fileFormat(bytes);
  let props;
  try {
    props = format === "tflite" ? tfliteMetadataProps(bytes)
      : format === "ort" ? ortMetadataProps(bytes) : onnxMetadataProps(bytes);
  } catch (err) {
    throw new Error(`not a readable ${format} model file (${err.message})`);
  }
  let meta = null;
  if (props[METADATA_KEY] !== undefined) {
    try {
      meta = JSON.parse(props[METADATA_KEY]);
    } catch (err) {
      throw new Error(`corrupt ${METADATA_KEY} metadata (${err.message})`);
    }
  }
  return {format, props, meta};
}

// Names of the (scores, label) outputs: the metadata's "outputs" (DNN files: logits/label), else
// log_joint/label (formats/metadata.py contract_outputs).
export function contractOutputs(meta) {
  const names = meta && meta.outputs;
  if (Array.isArray(names) && names.length === 2) return names;
  return ["log_joint", "label"];
}

// ---------------------------------------------------------------------------------------------
// Input rows
// ---------------------------------------------------------------------------------------------

// Checks rows against the metadata: d values each; codes are integers in 0..cardinality-1; raw
// values are finite numbers. Errors name the row and feature, as the Python runtimes do.
export function checkRows(rows, meta, nFeatures) {
  if (!Array.isArray(rows) || rows.length === 0) throw new Error("no input rows");
  const raw = meta ? meta.input === "raw" : false;
  const cards = meta && Array.isArray(meta.cardinalities) ? meta.cardinalities : null;
  const names = meta && Array.isArray(meta.feature_names) ? meta.feature_names : null;
  const d = cards ? cards.length : nFeatures;
  rows.forEach((row, r) => {
    if (!Array.isArray(row) || row.length !== d) {
      throw new Error(`row ${r}: expected ${d} values, got ${Array.isArray(row) ? row.length : typeof row}`);
    }
    row.forEach((v, j) => {
      const feature = names ? `feature ${j} (${names[j]})` : `feature ${j}`;
      if (typeof v !== "number" || !Number.isFinite(v)) {
        throw new Error(`row ${r}, ${feature}: ${JSON.stringify(v)} is not a finite number`);
      }
      if (!raw && (!Number.isInteger(v) || v < 0 || (cards && v >= cards[j]))) {
        const range = cards ? `0..${cards[j] - 1}` : "a non-negative integer";
        throw new Error(`row ${r}, ${feature}: code ${v} is out of range (${range})`);
      }
    });
  });
  return d;
}

const TYPED = {
  int64: (n) => new BigInt64Array(n),
  int32: (n) => new Int32Array(n),
  uint8: (n) => new Uint8Array(n),
  int8: (n) => new Int8Array(n),
  float32: (n) => new Float32Array(n),
};

function fill(dtype, rows, start, count, batch, d) {
  if (!TYPED[dtype]) throw new Error(`input type ${dtype} is not supported by this page`);
  const out = TYPED[dtype](batch * d);
  for (let i = 0; i < batch; i++) {
    const row = rows[start + (i < count ? i : 0)];  // padding: copies of the chunk's first row
    for (let j = 0; j < d; j++) out[i * d + j] = dtype === "int64" ? BigInt(row[j]) : row[j];
  }
  return out;
}

function argmaxRows(scores, n, c) {
  const labels = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let k = 1; k < c; k++) if (scores[i * c + k] > scores[i * c + best]) best = k;
    labels[i] = best;
  }
  return labels;
}

const now = () => (globalThis.performance ? globalThis.performance.now() : Date.now());

// ---------------------------------------------------------------------------------------------
// Runtimes
// ---------------------------------------------------------------------------------------------

class Model {
  constructor(info, engine) {
    this.format = info.format;
    this.meta = info.meta;
    this.props = info.props;
    this.engine = engine;
  }

  async run(rows) {
    const d = checkRows(rows, this.meta, this.nFeatures);
    if (d !== this.nFeatures) throw new Error(`the metadata has ${d} features, the file's input ${this.nFeatures}`);
    const n = rows.length;
    const batch = this.batch ?? n;
    const chunks = [];
    let nClasses = 0;
    let labelSource = "file";
    const t0 = now();
    for (let start = 0; start < n; start += batch) {
      const count = Math.min(batch, n - start);
      const out = await this._invoke(fill(this.inputType, rows, start, count, batch, d), batch);
      nClasses = out.scores.length / batch;
      chunks.push({count, scores: out.scores.slice(0, count * nClasses), labels: out.labels});
      if (!out.labels) labelSource = "argmax";
    }
    const ms = now() - t0;
    const scores = new Float32Array(n * nClasses);
    const labels = new Int32Array(n);
    let at = 0;
    for (const chunk of chunks) {
      scores.set(chunk.scores, at * nClasses);
      const l = chunk.labels ? chunk.labels : argmaxRows(chunk.scores, chunk.count, nClasses);
      for (let i = 0; i < chunk.count; i++) labels[at + i] = Number(l[i]);
      at += chunk.count;
    }
    return {scores, labels, nClasses, labelSource, ms};
  }
}

class OrtModel extends Model {
  static async open(bytes, info, ort, options) {
    const model = new OrtModel(info, "onnxruntime");
    model.session = await ort.InferenceSession.create(bytes, {intraOpNumThreads: 1, ...(options.sessionOptions || {})});
    model.ort = ort;
    const input = model.session.inputNames[0];
    const meta = (model.session.inputMetadata || [])[0] || {};
    model.inputName = input;
    model.inputType = meta.type || (info.meta && info.meta.input_dtype) ||
      (info.meta && info.meta.input === "raw" ? "float32" : "int64");
    const shape = meta.shape || [];
    model.batch = typeof shape[0] === "number" && shape[0] > 0 ? shape[0] : null;
    model.nFeatures = typeof shape[1] === "number" ? shape[1] : (info.meta ? info.meta.cardinalities.length : NaN);
    const [scoresName, labelName] = contractOutputs(info.meta);
    const outputs = model.session.outputNames;
    model.scoresName = outputs.includes(scoresName) ? scoresName : outputs[0];
    model.labelName = outputs.includes(labelName) ? labelName : null;
    return model;
  }

  async _invoke(data, batch) {
    const tensor = new this.ort.Tensor(this.inputType, data, [batch, this.nFeatures]);
    const out = await this.session.run({[this.inputName]: tensor});
    const scores = Float32Array.from(out[this.scoresName].data);
    const labels = this.labelName ? Int32Array.from(out[this.labelName].data, Number) : null;
    for (const t of Object.values(out)) if (t.dispose) t.dispose();
    return {scores, labels};
  }

  async dispose() { await this.session.release(); }
}

class LiteRtModel extends Model {
  static async open(bytes, info, litert, options) {
    const model = new LiteRtModel(info, "litert");
    model.litert = litert;
    try {
      model.compiled = await litert.loadAndCompile(bytes, {accelerator: options.accelerator || "wasm"});
    } catch (err) {
      // LiteRT.js reads float32/int32/uint8 tensors and static shapes only: the default TFLite
      // profile (int64 label, dynamic batch) fails here; say which export works.
      const profile = info.meta && info.meta.profile;
      const hint = profile === "web" || profile === "micro" ? "" :
        " (export it with: bnc-export MODEL.bnc --format tflite --profile web)";
      throw new Error(`LiteRT.js cannot load this TFLite file: ${err.message}${hint}`);
    }
    const input = model.compiled.getInputDetails()[0];
    model.inputName = input.name;
    model.inputType = input.dtype;
    model.batch = input.shape[0] > 0 ? input.shape[0] : null;
    model.nFeatures = input.shape[1];
    const [scoresName, labelName] = contractOutputs(info.meta);
    const outputs = model.compiled.getOutputDetails().map((o) => o.name);
    model.scoresName = outputs.includes(scoresName) ? scoresName : outputs[0];
    model.labelName = outputs.includes(labelName) ? labelName : null;
    return model;
  }

  async _invoke(data, batch) {
    const tensor = new this.litert.Tensor(data, [batch, this.nFeatures]);
    let out;
    try {
      out = await this.compiled.run({[this.inputName]: tensor});
    } finally {
      tensor.delete();
    }
    try {
      const read = async (name) => {
        const t = out[name];
        return (await t.data()).slice();  // copy: the tensor's memory is freed below
      };
      const scores = Float32Array.from(await read(this.scoresName));
      const labels = this.labelName ? Int32Array.from(await read(this.labelName)) : null;
      return {scores, labels};
    } finally {
      for (const t of Object.values(out)) t.delete();
    }
  }

  async dispose() { this.compiled.delete(); }
}

export async function openModel(bytes, engines, options = {}) {
  bytes = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const info = readModelInfo(bytes);
  if (info.format === "tflite") {
    if (!engines.litert) throw new Error("a .tflite file needs LiteRT.js (@litertjs/core), which is not loaded");
    return LiteRtModel.open(bytes, info, engines.litert, options);
  }
  if (!engines.ort) throw new Error(`an .${info.format} file needs onnxruntime-web, which is not loaded`);
  return OrtModel.open(bytes, info, engines.ort, options);
}

// ---------------------------------------------------------------------------------------------
// The file's own check set
// ---------------------------------------------------------------------------------------------

export async function sha256Hex(bytes) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

// Little-endian float32 bytes, whatever the platform's byte order (the digest's definition).
export function float32LE(values) {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => view.setFloat32(i * 4, v, true));
  return out;
}

export async function checkSet(model) {
  const entry = model.meta && model.meta.check;
  if (!entry) return {ok: null, reason: "the file stores no check set", rows: 0};
  const result = await model.run(entry.rows);
  const expected = entry.labels;
  const differ = [];
  for (let i = 0; i < expected.length; i++) if (result.labels[i] !== expected[i]) differ.push(i);
  if (differ.length) {
    const i = differ[0];
    return {ok: false, rows: expected.length, result,
      reason: `row ${i} gave label ${result.labels[i]}, the model file's reference says ${expected[i]} ` +
        `(${differ.length} of ${expected.length} rows differ)`};
  }
  if (model.meta.exact) {
    const digest = await sha256Hex(float32LE(result.scores));
    if (digest !== entry.scores_sha256) {
      return {ok: false, rows: expected.length, result,
        reason: "scores differ from the model file's reference (the file promises exact scores)"};
    }
    return {ok: true, rows: expected.length, result, reason: "labels and float32 scores identical to the reference"};
  }
  if (!Array.from(result.scores).every(Number.isFinite)) {
    return {ok: false, rows: expected.length, result, reason: "non-finite scores on valid rows"};
  }
  return {ok: true, rows: expected.length, result, reason: "labels identical to the reference (the file is not exact by design)"};
}
