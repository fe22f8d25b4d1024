// browser_check.mjs — the browser test's driver: a loopback static server, headless Chromium
// (Debian's /usr/bin/chromium, driven by playwright-core; no browser is ever downloaded), the
// runner page (runner.html) on a test manifest, and the sample page (samples/web) on one model.
//
//   node tests/web/browser_check.mjs --manifest M.json --out OUT.json [--samples S.json] [--chromium PATH]
//
// S.json: [{"model": FILE, "row": "1, 2, 3", "screenshot": PNG}, ...]: for each, the sample page is
// opened, FILE picked with its file input, the row typed, "Classify" and "Run the file's check
// set" clicked, and the page saved as PNG.
//
// Serves, on 127.0.0.1 (a free port):  /tests/web/*  and  /samples/web/*  from the repository,
// /samples/web/node_modules/*  from tests/web/node_modules (the sample's import map reads
// ./node_modules), and  /models/*  from the manifest's folder. Writes OUT.json:
//   {browser, runner: <runner page result>, samples: [{modelInfo, runtimes, result, scores, check}],
//    console: [...], timings_s: {launched, runner_done, samples_done} (seconds since start)}.
// Exits 1 (after writing what it has) when the page or the browser fails.
import {createReadStream} from "node:fs";
import {readFile, stat, writeFile} from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {parseArgs} from "node:util";
import {chromium} from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");
const {values: args} = parseArgs({options: {
  manifest: {type: "string"}, out: {type: "string"}, chromium: {type: "string", default: "/usr/bin/chromium"},
  samples: {type: "string"},
  timeout: {type: "string", default: "120000"},
}});
if (!args.manifest || !args.out) {
  console.error("usage: node browser_check.mjs --manifest M.json --out OUT.json [--samples S.json] [--chromium PATH]");
  process.exit(2);
}
const modelsDir = path.dirname(path.resolve(args.manifest));
const timeout = Number(args.timeout);

// Correct types matter: module scripts need a JavaScript type, and WebAssembly.instantiateStreaming
// needs application/wasm.
const TYPES = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".css": "text/css", ".json": "application/json", ".map": "application/json", ".wasm": "application/wasm",
  ".png": "image/png", ".onnx": "application/octet-stream", ".ort": "application/octet-stream",
  ".tflite": "application/octet-stream",
};
const ROUTES = [  // URL prefix -> folder; the first match wins
  ["/samples/web/node_modules/", path.join(here, "node_modules")],
  ["/samples/web/", path.join(repo, "samples", "web")],
  ["/tests/web/", here],
  ["/models/", modelsDir],
];

function resolve(urlPath) {
  for (const [prefix, root] of ROUTES) {
    if (!urlPath.startsWith(prefix)) continue;
    const file = path.resolve(root, "." + path.posix.normalize("/" + urlPath.slice(prefix.length)));
    return file.startsWith(root + path.sep) ? file : null;  // no escape from the served folder
  }
  return null;
}

const server = http.createServer(async (req, res) => {
  let file = null;
  try {
    file = resolve(decodeURIComponent(new URL(req.url, "http://x").pathname));
    if (file && !(await stat(file)).isFile()) file = null;
  } catch {
    file = null;
  }
  if (!file) {
    res.writeHead(404, {"content-type": "text/plain"}).end("not found");
    return;
  }
  res.writeHead(200, {"content-type": TYPES[path.extname(file)] || "application/octet-stream",
    "cache-control": "no-store"});
  createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}`;

const output = {console: [], timings_s: {}};
const t0 = Date.now();
const lap = (name) => { output.timings_s[name] = (Date.now() - t0) / 1000; };
let status = 0;
const browser = await chromium.launch({
  executablePath: args.chromium,
  headless: true,
  // Playwright gives each launch a fresh temporary --user-data-dir and passes --no-sandbox.
  // The rest keep Chromium off the (closed) network and off the GPU.
  args: ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  output.browser = browser.version();
  lap("launched");
  const page = await browser.newPage({viewport: {width: 900, height: 900}});
  page.setDefaultTimeout(timeout);
  page.on("console", (msg) => output.console.push(`${msg.type()}: ${msg.text()}`));
  page.on("pageerror", (err) => output.console.push(`pageerror: ${err.message}`));

  const manifest = JSON.parse(await readFile(args.manifest, "utf8"));
  await page.goto(`${base}/tests/web/runner.html`);
  await page.waitForFunction(() => window.runnerReady === true);
  output.runner = await page.evaluate((m) => window.runTestManifest(m), manifest);
  lap("runner_done");

  output.samples = [];
  const samples = args.samples ? JSON.parse(await readFile(args.samples, "utf8")) : [];
  for (const spec of samples) {
    const sample = {};
    output.samples.push(sample);
    await page.goto(`${base}/samples/web/index.html`);
    await page.waitForFunction(() => window.bncSampleReady === true);
    await page.waitForFunction(() => document.getElementById("runtimes").textContent.includes("onnxruntime-web"));
    await page.setInputFiles("#model-file", spec.model);
    await page.waitForFunction(() => !document.getElementById("run").disabled ||
      document.getElementById("model-info").className === "error");
    sample.modelInfo = await page.textContent("#model-info");
    sample.runtimes = await page.textContent("#runtimes");
    if ((await page.getAttribute("#model-info", "class")) === "error") continue;
    await page.fill("#row", spec.row);
    await page.click("#run");
    await page.waitForFunction(() => document.getElementById("result").className !== "muted");
    sample.result = await page.textContent("#result");
    sample.scores = await page.$$eval("#scores tr", (rows) => rows.slice(1).map((r) => r.cells[1].textContent));
    if (!(await page.isDisabled("#check-set"))) {
      await page.click("#check-set");
      await page.waitForFunction(() => document.getElementById("check-result").textContent.length > 0);
      sample.check = await page.textContent("#check-result");
    }
    if (spec.screenshot) await page.screenshot({path: spec.screenshot, fullPage: true});
  }
  lap("samples_done");
} catch (err) {
  output.error = String(err && err.stack ? err.stack : err);
  status = 1;
} finally {
  await browser.close();
  server.close();
  await writeFile(args.out, JSON.stringify(output));
}
process.exit(status);
