// Builds native/pagetoucher.c with the machine's compiler at install time.
// No compiler, or a failed build, is one warning and exit 0: drill then runs
// native/pagetoucher.py (same protocol, slower page faults). npm ci must not
// fail for this.
import { spawnSync } from "node:child_process";
import { mkdirSync, renameSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const source = path.join(root, "native", "pagetoucher.c");
const outDir = path.join(root, "native", "build");
const output = path.join(outDir, "pagetoucher");
const compiler = process.env.CC && process.env.CC.trim() !== "" ? process.env.CC.trim() : "cc";

function warn(reason) {
  // A binary from an older source could speak an older protocol: remove it.
  rmSync(output, { force: true });
  console.warn(`drill: warning: native/pagetoucher not built (${reason}); the python3 fallback native/pagetoucher.py will be used (slower page faults)`);
}

mkdirSync(outDir, { recursive: true });
// Build to a temporary name and rename: a half-written binary must never be found.
const partial = `${output}.tmp-${process.pid}`;
const result = spawnSync(compiler, ["-O2", "-Wall", "-Wextra", "-o", partial, source], { stdio: ["ignore", "inherit", "pipe"], encoding: "utf8" });
if (result.error) {
  rmSync(partial, { force: true });
  warn(result.error.code === "ENOENT" ? `no C compiler "${compiler}" on PATH` : `${compiler}: ${result.error.message}`);
} else if (result.status !== 0) {
  rmSync(partial, { force: true });
  process.stderr.write(result.stderr);
  warn(`${compiler} exited ${result.status ?? result.signal}`);
} else {
  if (result.stderr) process.stderr.write(result.stderr);
  renameSync(partial, output);
  console.log(`drill: built ${path.relative(root, output)}`);
}
