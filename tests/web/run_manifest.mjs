// run_manifest.mjs — run every model of a test manifest with samples/web/bnc_web.mjs (shared by the
// browser page tests/web/runner.html and the Node runner tests/web/node_check.mjs).
//
// manifest: {models: [{name, file, rows: [[...], ...]}]}; `load(entry)` returns the file's bytes
// (fetch in the browser, fs in Node). Returns {name: result}, where result is
//   {format, engine, inputType, batch, nClasses, labelSource, labels: [...],
//    scores_f32le_b64: <the float32 scores, little-endian, base64: compared bit for bit in Python>,
//    ms, check: {ok, reason}, meta: <the file's bnc_deploy metadata as the page's readers see it>}
// or {error: "message"} for a model that failed (one failure does not hide the others' results).
import {checkSet, float32LE, openModel} from "../../samples/web/bnc_web.mjs";

function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

export async function runManifest(manifest, engines, load, options = {}) {
  const results = {};
  for (const entry of manifest.models) {
    let model = null;
    try {
      model = await openModel(await load(entry), engines, options);
      const out = await model.run(entry.rows);
      const check = await checkSet(model);
      results[entry.name] = {
        format: model.format, engine: model.engine, inputType: model.inputType, batch: model.batch,
        nClasses: out.nClasses, labelSource: out.labelSource, labels: Array.from(out.labels),
        scores_f32le_b64: base64(float32LE(out.scores)), ms: out.ms,
        check: {ok: check.ok, reason: check.reason}, meta: model.meta,
      };
    } catch (err) {
      results[entry.name] = {error: String(err && err.stack ? err.stack : err)};
    } finally {
      if (model) await model.dispose();
    }
  }
  return results;
}
