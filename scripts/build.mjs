// `npm run build`, and the build before the tests: tsc to dist/, the bundle
// bin/drill.js runs (scripts/bundle.mjs), the native page-touching helper
// (scripts/build-native.mjs). `--type-errors-warn`: tsc's errors are a
// warning (it emits anyway; `npm run typecheck` is the gate for them), so the
// tests still run, as npm test and vitest's globalSetup want.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const typeErrorsWarn = process.argv.includes("--type-errors-warn");
const node = (args, options = {}) => spawnSync(process.execPath, args, { cwd: root, stdio: "inherit", ...options });

const tsc = node([path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], typeErrorsWarn ? { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" } : {});
if (tsc.status !== 0) {
  if (!typeErrorsWarn) process.exit(tsc.status ?? 1);
  process.stderr.write(`build: tsc reported errors (run npm run typecheck):\n${tsc.stdout.slice(0, 2000)}\n`);
}
for (const step of ["scripts/bundle.mjs", "scripts/build-native.mjs"]) {
  const r = node([step]);
  if (r.status !== 0) process.exit(r.status ?? 1);
}
