// node_check.mjs — run a test manifest in onnxruntime-node (the .onnx/.ort files of the web tests).
//
//   node tests/web/node_check.mjs MANIFEST.json OUT.json
//
// Each manifest entry's "file" is a path relative to the manifest's folder. Writes the results of
// run_manifest.mjs as JSON to OUT.json (written whole at the end; the Python test reads it).
import {readFile, writeFile} from "node:fs/promises";
import {createRequire} from "node:module";
import path from "node:path";
import {runManifest} from "./run_manifest.mjs";

const [manifestPath, outPath] = process.argv.slice(2);
if (!manifestPath || !outPath) {
  console.error("usage: node node_check.mjs MANIFEST.json OUT.json");
  process.exit(2);
}
// onnxruntime-node is CommonJS and lives in this folder's node_modules.
const ort = createRequire(import.meta.url)("onnxruntime-node");
const manifest = JSON.parse(await readFile(manifestPath, "utf8"));
const folder = path.dirname(path.resolve(manifestPath));
const results = await runManifest(manifest, {ort},
  async (entry) => new Uint8Array(await readFile(path.join(folder, entry.file))));
await writeFile(outPath, JSON.stringify({runtime: "onnxruntime-node", version: ort.env.versions.common, results}));
