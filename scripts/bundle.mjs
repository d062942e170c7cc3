// Bundles what tsc built (dist/) and the dependencies into dist/bundle/, the
// code bin/drill.js runs. Why: a CLI call spent most of its start-up loading
// ~300 modules one by one (resolve, stat, read, compile each; ioredis alone is
// ~40 CommonJS files), and `drill up` pays it again for each child (gate,
// worker, sidecar, hogs). Code splitting keeps the commands lazy: `--help`
// loads the command definitions, each command's implementation is its own
// chunk, loaded by the `import()` in its definition.
//
// dist/ keeps tsc's module tree: tests load single modules from it in
// children (dist/drill/drain.js under a file size limit).
import { rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const outdir = path.join(root, "dist", "bundle");

rmSync(outdir, { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: { interrupt: "dist/interrupt.js", main: "dist/main.js" },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // Chunks named after their first module, so a stack trace and `--cpu-prof` say where they are.
  chunkNames: "chunks/[name]-[hash]",
  // CommonJS dependencies (ioredis, cli-table3) require() Node's built-ins: give ESM chunks a require.
  banner: { js: 'import { createRequire as __drillCreateRequire } from "node:module"; const require = __drillCreateRequire(import.meta.url);' },
  legalComments: "none",
  logLevel: "warning",
});
