// app.mjs — the DOM side of samples/web/index.html: pick a file, show its metadata, classify a row.
// All model work is in bnc_web.mjs; the runtimes come from the page's import map and are loaded
// when first needed (onnxruntime-web at start, LiteRT.js when a .tflite file is picked).
import {checkSet, openModel, readModelInfo} from "./bnc_web.mjs";

const $ = (id) => document.getElementById(id);
const engines = {ort: null, litert: null};
const ENGINE_NAMES = {onnxruntime: "onnxruntime-web", litert: "LiteRT.js"};
let model = null;

function setText(id, text, cls = "") {
  const el = $(id);
  el.textContent = text;
  el.className = cls;
}

function showError(id, err) {
  setText(id, String(err && err.message ? err.message : err), "error");
}

async function loadOrt() {
  if (engines.ort) return engines.ort;
  const ort = await import("onnxruntime-web");
  // Threads need a cross-origin-isolated page (COOP/COEP headers); one thread otherwise.
  ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  engines.ort = ort;
  return ort;
}

async function loadLiteRt() {
  if (engines.litert) return engines.litert;
  const litert = await import("@litertjs/core");
  // The wasm files sit in the package's wasm/ folder, beside dist/ (import-map relative).
  await litert.loadLiteRt(new URL("../wasm/", import.meta.resolve("@litertjs/core")).href);
  engines.litert = litert;
  return litert;
}

function describeRuntimes() {
  const parts = [];
  if (engines.ort) parts.push(`onnxruntime-web ${engines.ort.env.versions.web} (wasm)`);
  if (engines.litert) parts.push("LiteRT.js (wasm, CPU)");
  setText("runtimes", parts.length ? `Runtimes loaded: ${parts.join(", ")}.` : "No runtime loaded yet.", "muted");
}

function fillFeatureTable(meta, nFeatures) {
  const table = $("features");
  table.replaceChildren();
  $("features-box").hidden = !meta;
  if (!meta) return;
  // Open for a handful of features; image models (hundreds of pixels) start folded.
  $("features-box").open = nFeatures <= 16;
  $("features-summary").textContent = `Features (${nFeatures}): ${meta.input === "raw" ? "raw values" : "valid codes"}`;
  const head = table.insertRow();
  for (const h of ["#", "feature", meta.input === "raw" ? "input" : "codes"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  const names = meta.feature_names || [];
  for (let j = 0; j < nFeatures; j++) {
    const row = table.insertRow();
    row.insertCell().textContent = String(j);
    row.insertCell().textContent = names[j] ?? `feature ${j}`;
    row.insertCell().textContent = meta.input === "raw" ? "raw value (float)" : `0 … ${meta.cardinalities[j] - 1}`;
  }
}

async function pickFile(file) {
  model && (await model.dispose());
  model = null;
  for (const id of ["run", "use-check", "check-set"]) $(id).disabled = true;
  $("scores").replaceChildren();
  setText("result", "No result yet.", "muted");
  setText("check-result", "");
  try {
    const bytes = new Uint8Array(await file.arrayBuffer());
    const info = readModelInfo(bytes);
    if (info.format === "tflite") await loadLiteRt(); else await loadOrt();
    describeRuntimes();
    setText("model-info", `Loading ${file.name}…`, "muted");
    model = await openModel(bytes, engines);
    model.runs = 0;
    const meta = model.meta;
    const what = meta
      ? `${meta.model_kind === "dnn" ? `DNN (${meta.architecture || ""} ${meta.activation || ""})` : `BN ${String(meta.structure).toUpperCase()}`}, ` +
        `${meta.quantized === false || !Number.isInteger(meta.bits) ? "float32" : `${meta.bits}-bit`}, ${meta.n_classes} classes, ${model.nFeatures} features, ` +
        `input: ${meta.input === "raw" ? "raw values" : "integer codes"}${meta.exact ? ", exact" : ""}`
      : "no bnc-deploy metadata (inputs unchecked)";
    setText("model-info", `${file.name}: ${info.format.toUpperCase()} file in ${ENGINE_NAMES[model.engine]}` +
      `${model.batch ? ` (static batch ${model.batch})` : ""}. ${what}.`, "");
    $("input-help").textContent = meta && meta.input === "raw"
      ? `${model.nFeatures} raw feature values (the file discretizes them), separated by commas or spaces.`
      : `${model.nFeatures} integer codes, separated by commas or spaces.`;
    fillFeatureTable(meta, model.nFeatures);
    $("run").disabled = false;
    $("use-check").disabled = $("check-set").disabled = !(meta && meta.check);
  } catch (err) {
    showError("model-info", err);
  }
}

function parseRow(text) {
  const tokens = text.split(/[\s,;]+/).filter((t) => t.length);
  return tokens.map((t, j) => {
    const v = Number(t);
    if (!Number.isFinite(v)) throw new Error(`value ${j} ('${t}') is not a number`);
    return v;
  });
}

function showScores(result) {
  const meta = model.meta || {};
  const names = meta.class_names || [];
  const label = result.labels[0];
  const scoreName = meta.model_kind === "dnn" ? "logit" : "log joint";
  $("result").replaceChildren();
  const strong = document.createElement("span");
  strong.className = "label";
  strong.textContent = `Class: ${names[label] ?? label} (index ${label})`;
  const timing = document.createElement("div");
  timing.className = "muted";
  timing.textContent = `${result.ms.toFixed(2)} ms in ${ENGINE_NAMES[model.engine]}` +
    `${model.runs++ === 0 ? " (first call: includes warm-up; click again for the steady time)" : ""}` +
    `${result.labelSource === "argmax" ? " (label: first maximum of the scores; the file has no label output)" : ""}`;
  $("result").append(strong, timing);
  $("result").className = "";
  const table = $("scores");
  table.replaceChildren();
  const head = table.insertRow();
  for (const h of ["class", scoreName]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  for (let k = 0; k < result.nClasses; k++) {
    const row = table.insertRow();
    if (k === label) row.className = "best";
    row.insertCell().textContent = names[k] ?? String(k);
    const cell = row.insertCell();
    cell.className = "num";
    cell.textContent = String(result.scores[k]);
  }
}

$("model-file").addEventListener("change", (ev) => {
  const file = ev.target.files[0];
  if (file) pickFile(file);
});

$("run").addEventListener("click", async () => {
  try {
    showScores(await model.run([parseRow($("row").value)]));
  } catch (err) {
    $("scores").replaceChildren();
    showError("result", err);
  }
});

$("use-check").addEventListener("click", () => {
  $("row").value = model.meta.check.rows[0].join(", ");
});

$("check-set").addEventListener("click", async () => {
  try {
    const res = await checkSet(model);
    setText("check-result", `Check set (${res.rows} rows stored in the file): ${res.ok ? "passed" : "FAILED"}: ${res.reason}.`,
      res.ok ? "ok" : "error");
  } catch (err) {
    showError("check-result", err);
  }
});

loadOrt().then(describeRuntimes, (err) => showError("runtimes", `onnxruntime-web did not load: ${err.message}`));
window.bncSampleReady = true;
