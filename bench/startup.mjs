#!/usr/bin/env node
// Start-up cost of the CLI: `drill --help` against `node -e 0` (Node's own
// boot, the floor any Node CLI pays), and `drill --version`, alternating
// within each repetition so every figure of a repetition saw the same host
// load. `--help` builds every command's definition but runs no action, so
// what it costs above `node -e 0` is the module graph loaded before commander
// parses: that is what lazy command modules keep small.
//
// How it is measured, and why:
// - Each run is one child of `bash -c`, which reads $EPOCHREALTIME (µs) just
//   before the fork and just after the wait, and then prints `times`. Wall is
//   the difference: fork, exec, run, exit, reap; bash's own start-up is outside
//   it, so both sides are timed the same way.
// - CPU is `times`' second line: getrusage(RUSAGE_CHILDREN), user + sys of the
//   reaped child, every thread included (V8's compiler and GC threads work
//   through start-up), in ms. Polling /proc/<pid>/stat would count 10 ms ticks
//   and miss the exit; /usr/bin/time -f prints centiseconds.
// - One warm-up run of each is discarded (page cache, first exec).
// - The ratio is drill/node per repetition, then median [min-max] over the
//   repetitions, as each pair ran back to back.
//
// usage: node bench/startup.mjs [--runs 30]
// Needs a built drill (npm run build) and bash >= 5 ($EPOCHREALTIME).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { arg, drill, repo, requireBuilt, stats } from "./lib.mjs";

const runs = Number(arg("--runs", "30"));
if (!(Number.isInteger(runs) && runs >= 1)) throw new Error("bench: --runs must be a whole number >= 1");
requireBuilt();

const emptyStateDir = mkdtempSync(path.join(tmpdir(), "drill-bench-startup-"));
process.on("exit", () => rmSync(emptyStateDir, { recursive: true, force: true }));

const cases = [
  { name: "drill --help", args: [drill, "--help"] },
  { name: "node -e 0", args: ["-e", "0"] },
  { name: "drill --version", args: [drill, "--version"] },
  // A command that loads its implementation (ioredis and the rest) and does a little work: nothing to roll back in an empty state dir.
  { name: "drill rollback (nothing to do)", args: [drill, "--state-dir", emptyStateDir, "rollback"] },
];

// $1.. is the command; prints "<start µs> <end µs> <exit code>", then `times`.
const WRAPPER = 's=$EPOCHREALTIME; "$@" >/dev/null; rc=$?; e=$EPOCHREALTIME; echo "$s $e $rc"; times';

const seconds = (text) => {
  const m = /^(\d+)m([\d.]+)s$/.exec(text);
  if (!m) throw new Error(`bench: cannot read a time from bash's times: ${text}`);
  return Number(m[1]) * 60 + Number(m[2]);
};

/** One run: wall and CPU (user + sys) of the child, in ms. */
function measure(c) {
  const r = spawnSync("bash", ["-c", WRAPPER, "bash", process.execPath, ...c.args], { cwd: repo, encoding: "utf8", env: { ...process.env, FORCE_COLOR: "0" } });
  const lines = r.stdout.trim().split("\n");
  const [start, end, rc] = (lines[0] ?? "").split(" ");
  if (r.status !== 0 || rc !== "0" || lines.length !== 3 || !start?.includes(".")) {
    throw new Error(`bench: ${c.name} failed (exit ${rc ?? r.status}): ${r.stderr.trim() || r.stdout.trim()}`);
  }
  const [user, sys] = lines[2].split(" ").map(seconds);
  return { wallMs: (Number(end) - Number(start)) * 1000, cpuMs: (user + sys) * 1000 };
}

const round = (s, digits) => Object.fromEntries(Object.entries(s).map(([k, v]) => [k, Number(v.toFixed(digits))]));
const show = (s, digits, unit) => `${s.median.toFixed(digits)} [${s.min.toFixed(digits)}-${s.max.toFixed(digits)}]${unit}`;

for (const c of cases) measure(c);
const results = cases.map(() => []);
for (let i = 0; i < runs; i++) cases.forEach((c, k) => results[k].push(measure(c)));

const [help, bare] = results;
const summary = { bench: "startup", runs, node: process.version, cases: {}, ratio: {} };
console.log(`start-up, ${runs} runs each, alternating; median [min-max]`);
cases.forEach((c, k) => {
  const wall = stats(results[k].map((r) => r.wallMs));
  const cpu = stats(results[k].map((r) => r.cpuMs));
  summary.cases[c.name] = { wall_ms: round(wall, 1), cpu_ms: round(cpu, 1) };
  console.log(`  ${c.name.padEnd(30)} wall ${show(wall, 1, " ms").padEnd(26)} cpu ${show(cpu, 1, " ms")}`);
});
for (const key of ["wallMs", "cpuMs"]) {
  const ratio = stats(help.map((r, i) => r[key] / bare[i][key]));
  const label = key === "wallMs" ? "wall" : "cpu";
  summary.ratio[label] = round(ratio, 2);
  console.log(`  drill --help / node -e 0, ${label.padEnd(4)} ${show(ratio, 2, "x")}`);
}
console.log(JSON.stringify(summary));
