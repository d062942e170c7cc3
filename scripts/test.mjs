// npm test: the whole suite, with the `quiet` project running beside `drills`
// instead of before it, then `alone` (vitest.config.ts says which file is
// which and why). One vitest cannot run two projects side by side with
// different worker counts, so this runs three. With arguments it is plain
// `vitest run <args>`.
import { spawn, spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const vitest = path.join(root, "node_modules", "vitest", "vitest.mjs");
const args = process.argv.slice(2);

const children = new Set();
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    for (const child of children) child.kill(signal);
    process.exitCode = 128 + ({ SIGHUP: 1, SIGINT: 2, SIGTERM: 15 })[signal];
  });
}

/**
 * Runs vitest and keeps its output for the counts; `hold` prints it as one
 * block once it ends (a project beside another), otherwise it goes through.
 */
function run(vitestArgs, { env = {}, hold = false } = {}) {
  return new Promise((resolve) => {
    // Its own process group: a terminal's Ctrl-C reaches the vitests once, from here, not twice (a second one skips their teardown).
    const child = spawn(process.execPath, [vitest, "run", ...vitestArgs], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    children.add(child);
    const chunks = [];
    const keep = (to) => (chunk) => {
      chunks.push(chunk);
      if (!hold) to.write(chunk);
    };
    child.stdout.on("data", keep(process.stdout));
    child.stderr.on("data", keep(process.stderr));
    child.on("close", (code) => {
      children.delete(child);
      resolve({ code: code ?? 128, output: Buffer.concat(chunks).toString() });
    });
  });
}

/** A project's counts from vitest's summary lines (`Tests  1722 passed | 1 skipped (1723)`). */
function counts(output) {
  // eslint-disable-next-line no-control-regex
  const plain = output.replace(/\x1b\[[0-9;]*m/g, "");
  const line = (label) => new RegExp(`^\\s*${label}\\s+(.*)$`, "m").exec(plain)?.[1] ?? "";
  const n = (text, word) => Number(new RegExp(`(\\d+) ${word}`).exec(text)?.[1] ?? 0);
  const files = line("Test Files");
  const tests = line("Tests");
  return { files: n(files, "passed") + n(files, "failed") + n(files, "skipped"), passed: n(tests, "passed"), failed: n(tests, "failed"), skipped: n(tests, "skipped") };
}

if (args.length > 0) {
  const { code } = await run(args);
  process.exit(code);
}

const started = Date.now();
// globalSetup builds dist/ and the native helper; two vitests at once must not both write them.
console.log("test: building dist/ (and its bundle) and native/ once");
const build = spawnSync(process.execPath, ["scripts/build.mjs", "--type-errors-warn"], { cwd: root, stdio: "inherit" });
if (build.status !== 0) process.exit(build.status ?? 1);
const built = { DRILL_TEST_BUILT: "1" };

console.log("test: quiet (output below once it ends) beside drills; then alone");
const [quiet, drills] = await Promise.all([
  // Two workers: the drills beside it take the rest of the two cores.
  run(["--project", "quiet"], { env: { ...built, DRILL_TEST_QUIET_WORKERS: "2" }, hold: true }).then((r) => {
    process.stdout.write(`\n---- quiet (ran beside drills): exit ${r.code} ----\n${r.output}---- end of quiet ----\n\n`);
    return r;
  }),
  run(["--project", "drills"], { env: built }),
]);
const alone = process.exitCode === undefined ? await run(["--project", "alone"], { env: built }) : { code: 1 };

const lanes = { quiet, drills, alone };
const failed = Object.entries(lanes).filter(([, r]) => r.code !== 0).map(([name, r]) => `${name} (exit ${r.code})`);
const total = Object.values(lanes).map((r) => counts(r.output ?? "")).reduce((a, b) => ({ files: a.files + b.files, passed: a.passed + b.passed, failed: a.failed + b.failed, skipped: a.skipped + b.skipped }));
const minutes = ((Date.now() - started) / 60_000).toFixed(1);
console.log(`test: ${total.files} files; tests ${total.passed} passed, ${total.failed} failed, ${total.skipped} skipped; ${minutes} min`);
console.log(failed.length === 0 ? "test: quiet, drills and alone passed" : `test: FAILED: ${failed.join(", ")}`);
process.exitCode ??= failed.length === 0 ? 0 : 1;
