#!/usr/bin/env node
// CPU time per sample: `drill watch` against the runbook's shell loop
// (bench/seed-sidecar.sh), in the same run, on a real cgroup and a real
// redis-server started here on a free loopback port.
//
// Each side runs alone, one after the other, and the order alternates from
// one repetition to the next (shell first, then drill first, ...), so slow
// drift of the host load falls on both sides alike. Alone, because that is
// how a sidecar runs: one loop or the other beside the job, never both. Run
// side by side, the shell loop's ~9 forks a sample evict the caches and TLBs
// of a Node process that wakes once a sample, and drill's measured cost about
// doubles; that is the shell perturbing drill, not drill's own cost.
//
// How CPU is counted, and why:
// - Totals: each side runs under `bash -c '…; times'`. `times`' second line is
//   getrusage(RUSAGE_CHILDREN): user + sys of every descendant the shell has
//   reaped, each with the descendants it reaped. The seed loop forks ~9 short
//   programs a sample (date, awk, vmstat, tail, awk, grep, cat, redis-cli,
//   sleep) that live a few ms: polling /proc/<pid>/stat would miss most of
//   them (and counts 10 ms ticks), whereas their parent's wait() folds them
//   into RUSAGE_CHILDREN exactly. drill spawns no children, so the same
//   number is node's own CPU, all threads included.
// - drill's marginal cost per sample: node's start-up (~0.3 s CPU) varies by
//   tens of ms run to run, far more than a sample costs, so "long run − short
//   run" is noise. Instead the benchmark reads drill's CPU while it runs: the
//   sum over /proc/<pid>/task/*/schedstat (ns of CPU per thread) when sample
//   line k arrives and when line N − 1 arrives (drill then sleeps until the
//   next tick; after line N it exits and its threads vanish from /proc, which
//   would make the sum wrong either way); Δ/(N − 1 − k) is the steady-state
//   cost of a sample (wake-up, kernel reads, Redis round trip, step, JSON,
//   write). Start-up = the RUSAGE_CHILDREN total − N × marginal (node boot,
//   module load, connect, the first samples' JIT warm-up, exit).
// - redis-server's CPU (schedstat of its threads) is reported, counted on
//   neither side: it is the shared server's work.
//
// - drill's window starts at sample --warmup, past the first seconds of JIT
//   tiering and of V8's memory reducer (full GCs it runs on an idle heap a
//   few times after start-up, 8 s apart): a sidecar runs for the whole drill,
//   so its steady state is what it costs.
//
// - Floors, each measured the same way in the same run: a Node timer loop, the
//   same with one ioredis round trip, a minimal Node sidecar (bench/floor.mjs)
//   and that minimal sidecar in C (bench/floor-native.c, built here with cc):
//   how far drill is from the least a Node process can do, and how far any
//   Node process is from a sampler that does not wake a JavaScript runtime.
//
// usage: node bench/watch-vs-shell.mjs [--reps 3] [--samples 120] [--warmup 40]
//          [--shell-samples 30] [--interval 250ms] [--shell-sleep 0] [--no-floor]
// --shell-sleep: the loop's `sleep N` (a fork + exec whatever N is; its CPU
// does not depend on N, 0 only saves wall time). vmstat 1 2 still waits 1 s.
// Needs a built drill (bench/run.mjs builds), redis-server, redis-cli, vmstat.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { arg, drill, fixed, freePort, range, repo, requireBuilt, stats, threadCpuNs } from "./lib.mjs";

const reps = Number(arg("--reps", "3"));
const samples = Number(arg("--samples", "120"));
const warmup = Number(arg("--warmup", "40"));
const shellSamples = Number(arg("--shell-samples", "30"));
const interval = arg("--interval", "250ms");
const shellSleep = arg("--shell-sleep", "0");
const withFloor = !process.argv.includes("--no-floor");
if (!(samples > warmup + 1 && warmup >= 1 && reps >= 1 && shellSamples >= 1)) throw new Error("bench: need --samples > --warmup + 1, --warmup >= 1, --reps >= 1, --shell-samples >= 1");
requireBuilt();

/** The children line of bash's `times`: "0m0.123s 0m0.045s" → CPU seconds. */
function childrenCpuS(text) {
  const lines = text.trim().split("\n");
  const m = /^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/.exec((lines.at(-1) ?? "").trim());
  if (!m) throw new Error(`bench: cannot parse times output: ${text.slice(-300)}`);
  return Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4]);
}

function drillSync(args) {
  return spawnSync("node", [drill, ...args], { encoding: "utf8" });
}

const root = mkdtempSync(path.join(tmpdir(), "drill-bench-"));
const stateDir = path.join(root, "state");
const cgroupName = `bench${process.pid}`;
let realCgroup = false;
const port = await freePort();
const redis = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"], { stdio: "ignore" });

// The cgroup files drill reads each sample (src/sampler/read.ts), for the
// minimal-sidecar floor; the host files are the same on either layout.
const V2_FILES = ["memory.current", "memory.max", "memory.peak", "memory.events", "memory.swap.current", "memory.swap.max"];
const V1_FILES = ["memory.usage_in_bytes", "memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control", "memory.stat", "memory.memsw.limit_in_bytes"];
const HOST_FILES = ["/proc/pressure/memory", "/proc/vmstat", "/proc/stat"];

/** The worker cgroup both sides read: a real one when we may create it, else a fake v2 tree. */
function setupCgroup() {
  const setup = drillSync(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", cgroupName, "--memory-max", "1G"]);
  if (setup.status === 0) {
    realCgroup = true;
    const status = JSON.parse(drillSync(["--json", "--state-dir", stateDir, "cgroup", "status", "--parent", "self", "--name", cgroupName]).stdout);
    const { version, dir } = status.memory;
    const twin = status.dirs.find((d) => d.role === "twin");
    const names = version === 2 ? V2_FILES : V1_FILES;
    return {
      sidecarFiles: [...names.map((name) => path.join(dir, name)), path.join(twin?.dir ?? dir, "memory.pressure")],
      watchArgs: ["--state-dir", stateDir, "watch", "--parent", "self", "--name", cgroupName],
      // the seed's `cat memory.current`; v1 calls the same counter memory.usage_in_bytes
      currentFile: path.join(dir, version === 2 ? "memory.current" : "memory.usage_in_bytes"),
      describe: `real ${status.layout} cgroup ${dir}`,
      why: "",
    };
  }
  const cg = path.join(root, "sys", "fs", "cgroup");
  const infer = path.join(cg, "infer");
  mkdirSync(infer, { recursive: true });
  writeFileSync(path.join(cg, "cgroup.controllers"), "cpu io memory pids\n");
  writeFileSync(path.join(cg, "cgroup.procs"), "1\n");
  for (const [name, text] of Object.entries({
    "memory.current": "1048576\n",
    "memory.max": "2147483648\n",
    "memory.peak": "1572864\n",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    "memory.swap.current": "0\n",
    "memory.swap.max": "0\n",
    "memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
  })) {
    writeFileSync(path.join(infer, name), text);
  }
  return {
    sidecarFiles: [...V2_FILES, "memory.pressure"].map((name) => path.join(infer, name)),
    watchArgs: ["--sysfs", path.join(root, "sys"), "watch"],
    currentFile: path.join(infer, "memory.current"),
    describe: `FAKE v2 cgroup tree under ${root} (tmpfs files, cheaper than cgroupfs)`,
    why: (setup.stderr || setup.stdout).trim().split("\n")[0],
  };
}

/** The seed loop for `shellSamples` iterations: CPU of the whole process tree. */
async function runShell(target) {
  const script = path.join(repo, "bench", "seed-sidecar.sh");
  const child = spawn("bash", ["-c", `bash "$0" "$1" "$2" "$3" "$4" >/dev/null 2>&1; times`, script, target.currentFile, String(port), String(shellSamples), shellSleep], { stdio: ["ignore", "pipe", "inherit"] });
  let stdout = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  await new Promise((resolve) => child.once("close", resolve));
  return { msPerSample: (childrenCpuS(stdout) / shellSamples) * 1000 };
}

/** One `drill watch --count samples`: total CPU (rusage) and the steady-state CPU per sample (schedstat). */
async function runDrill(target) {
  const args = [drill, "--redis", `redis://127.0.0.1:${port}`, "--json", ...target.watchArgs, "--interval", interval, "--count", String(samples)];
  const quoted = args.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ");
  // node in the background so its pid is known; `wait` reaps it, so `times` counts it.
  const child = spawn("bash", ["-c", `node ${quoted} & pid=$!; echo "pid $pid" >&2; wait $pid; rc=$?; times >&2; exit $rc`], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const pidOf = async () => {
    for (;;) {
      const m = /^pid (\d+)$/m.exec(stderr);
      if (m) return Number(m[1]);
      await new Promise((r) => setTimeout(r, 1));
    }
  };
  let lines = 0;
  let atWarmup = 0;
  let atLast = 0;
  let last = "";
  for await (const line of createInterface({ input: child.stdout })) {
    lines++;
    last = line;
    if (lines === warmup) atWarmup = threadCpuNs(await pidOf());
    if (lines === samples - 1) atLast = threadCpuNs(await pidOf());
  }
  const code = await new Promise((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once("exit", resolve)));
  if (code !== 0 || lines !== samples) throw new Error(`bench: drill watch exited ${code} after ${lines} samples: ${stderr.slice(-500)}`);
  const sample = JSON.parse(last);
  const totalS = childrenCpuS(stderr);
  const marginalMs = (atLast - atWarmup) / 1e6 / (samples - 1 - warmup);
  return {
    marginalMs,
    totalS,
    startupMs: totalS * 1000 - marginalMs * samples,
    sample,
  };
}

/**
 * Floors (bench/floor.mjs): a bare timer loop writing a line per tick; with
 * one ioredis round trip; a minimal hand-written sidecar reading drill's files
 * and writing a line with drill's sample keys (`sample`: a line drill wrote).
 */
async function runFloor(mode, target, sample) {
  const files = [...HOST_FILES, ...target.sidecarFiles];
  const env = { ...process.env, FLOOR_FILES: JSON.stringify(files), FLOOR_KEYS: JSON.stringify(Object.keys(sample)) };
  const child =
    mode === "native"
      ? spawn(nativeFloor, [String(port), String(intervalMs), String(samples), String(files.length), ...files, ...Object.keys(sample)], { stdio: ["ignore", "pipe", "inherit"] })
      : spawn("node", [path.join(repo, "bench", "floor.mjs"), mode, String(port), interval, String(samples)], { stdio: ["ignore", "pipe", "inherit"], env });
  let lines = 0;
  let atWarmup = 0;
  let atLast = 0;
  for await (const _ of createInterface({ input: child.stdout })) {
    lines++;
    if (lines === warmup) atWarmup = threadCpuNs(child.pid);
    if (lines === samples - 1) atLast = threadCpuNs(child.pid);
  }
  await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", resolve)));
  return (atLast - atWarmup) / 1e6 / (samples - 1 - warmup);
}

/** bench/floor-native.c compiled here with cc (null, and said why, without a compiler). */
function buildNativeFloor() {
  const out = path.join(root, "floor-native");
  const cc = spawnSync("cc", ["-O2", "-o", out, path.join(repo, "bench", "floor-native.c")], { encoding: "utf8" });
  if (cc.status === 0) return { path: out, why: "" };
  return { path: null, why: cc.error ? `cc: ${cc.error.message}` : `cc exited ${cc.status}: ${cc.stderr.trim().split("\n")[0]}` };
}
const intervalMs = (() => {
  const m = /^(\d+)(ms|s)$/.exec(interval);
  if (!m) throw new Error(`bench: --interval ${interval}: use e.g. 250ms or 1s`);
  return Number(m[1]) * (m[2] === "s" ? 1000 : 1);
})();
let nativeFloor = null;

const f = (x, digits = 3) => fixed(x, digits);
const show = (s, digits = 3) => range(s, digits);

let target = null;
try {
  for (let i = 0; ; i++) {
    if (spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout.trim() === "PONG") break;
    if (i > 100) throw new Error("bench: redis-server did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
  // A few queued and admitted jobs, so drill's sample decodes real payloads.
  const now = Date.now();
  const job = (id) => JSON.stringify({ id: String(id), prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: now, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
  spawnSync("redis-cli", ["-p", String(port), "RPUSH", "jobs", ...[1, 2, 3, 4, 5, 6, 7, 8].map(job)]);
  spawnSync("redis-cli", ["-p", String(port), "RPUSH", "jobs:admitted", ...[9, 10, 11, 12].map(job)]);
  target = setupCgroup();
  if (withFloor) {
    const built = buildNativeFloor();
    nativeFloor = built.path;
    if (nativeFloor === null) console.log(`bench: no native floor (bench/floor-native.c did not build: ${built.why})`);
  }
  console.log(`bench: ${reps} repetitions, each side alone: shell ${shellSamples} samples (sleep ${shellSleep}), drill ${samples} samples --interval ${interval} (steady state from sample ${warmup}); redis-server 127.0.0.1:${port}`);
  console.log(`bench: cgroup: ${target.describe}${target.why ? ` — real cgroup setup failed: ${target.why}` : ""}`);
  console.log(`bench: shell cats ${target.currentFile}`);

  // Alone and alternating: odd repetitions run the shell loop first, even ones drill first.
  const rows = [];
  for (let rep = 0; rep < reps; rep++) {
    const redisBefore = threadCpuNs(redis.pid);
    let shell;
    let run;
    if (rep % 2 === 0) {
      shell = await runShell(target);
      run = await runDrill(target);
    } else {
      run = await runDrill(target);
      shell = await runShell(target);
    }
    const floorTimer = withFloor ? await runFloor("timer", target, run.sample) : NaN;
    const floorRedis = withFloor ? await runFloor("redis", target, run.sample) : NaN;
    const floorSidecar = withFloor ? await runFloor("sidecar", target, run.sample) : NaN;
    const floorNative = withFloor && nativeFloor !== null ? await runFloor("native", target, run.sample) : NaN;
    // redis-server's CPU over the repetition (shell + drill + the floor's LLENs), per sample of both sides.
    const redisAll = (threadCpuNs(redis.pid) - redisBefore) / 1e6 / (samples + shellSamples);
    if (run.sample.queue_len !== 8 || run.sample.cg_mem_current === null) {
      throw new Error(`bench: drill's sample did not read the queue and the cgroup: ${JSON.stringify(run.sample.missing)}`);
    }
    const row = {
      shellMs: shell.msPerSample,
      drillMarginalMs: run.marginalMs,
      drillStartupMs: run.startupMs,
      drillAllInMs: (run.totalS * 1000) / samples,
      ratio: shell.msPerSample / run.marginalMs,
      ratioAllIn: shell.msPerSample / ((run.totalS * 1000) / samples),
      redisAllMs: redisAll,
      floorTimerMs: floorTimer,
      floorRedisMs: floorRedis,
      floorSidecarMs: floorSidecar,
      floorNativeMs: floorNative,
    };
    rows.push(row);
    console.log(
      `rep ${rep + 1}: shell ${f(row.shellMs)} ms/sample | drill ${f(row.drillMarginalMs)} ms/sample marginal, startup ${f(row.drillStartupMs, 0)} ms | ratio ${f(row.ratio, 1)}x (all-in over ${samples}: ${f(row.ratioAllIn, 1)}x)` +
        (withFloor ? ` | floors ${f(row.floorTimerMs)} / ${f(row.floorRedisMs)} / ${f(row.floorSidecarMs)} / native ${f(row.floorNativeMs)} ms` : ""),
    );
  }
  const col = (key) => stats(rows.map((r) => r[key]));
  const summary = {
    reps,
    samples,
    interval,
    cgroup: realCgroup ? "real" : "fake",
    shell_ms_per_sample: col("shellMs"),
    drill_marginal_ms_per_sample: col("drillMarginalMs"),
    drill_startup_ms: col("drillStartupMs"),
    ratio_marginal: col("ratio"),
    ratio_all_in: col("ratioAllIn"),
    redis_server_ms_per_sample_both_sides: col("redisAllMs"),
  };
  if (withFloor) summary.floor_ms_per_sample = { node_timer_wakeup_and_write: col("floorTimerMs"), plus_one_ioredis_round_trip: col("floorRedisMs"), minimal_node_sidecar: col("floorSidecarMs"), ...(nativeFloor !== null ? { minimal_native_sidecar: col("floorNativeMs") } : {}) };
  console.log("\nmedian [min–max] over repetitions:");
  console.log(`  seed shell loop      ${show(summary.shell_ms_per_sample)} ms CPU/sample (children included)`);
  console.log(`  drill watch marginal ${show(summary.drill_marginal_ms_per_sample)} ms CPU/sample (samples ${warmup}..${samples - 1})`);
  console.log(`  drill watch startup  ${show(summary.drill_startup_ms, 0)} ms CPU once (node boot, modules, connect, JIT warm-up, exit)`);
  console.log(`  ratio (marginal)     ${show(summary.ratio_marginal, 1)}x   target >= 50x`);
  console.log(`  ratio (all-in, ${samples} samples incl. startup) ${show(summary.ratio_all_in, 1)}x`);
  console.log(`  redis-server, counted on neither side: ${show(summary.redis_server_ms_per_sample_both_sides)} ms per sample of both sides together`);
  if (withFloor) {
    console.log(`  floor, node timer wake-up + one line written: ${show(summary.floor_ms_per_sample.node_timer_wakeup_and_write)} ms/sample`);
    console.log(`  floor, + one ioredis round trip (LLEN):       ${show(summary.floor_ms_per_sample.plus_one_ioredis_round_trip)} ms/sample`);
    console.log(`  floor, minimal Node sidecar (drill's files, raw RESP, drill's keys): ${show(summary.floor_ms_per_sample.minimal_node_sidecar)} ms/sample`);
    if (nativeFloor !== null) console.log(`  floor, minimal native sidecar (the same, in C: bench/floor-native.c): ${show(summary.floor_ms_per_sample.minimal_native_sidecar)} ms/sample`);
    console.log(`  target: 50x the shell loop = ${f(summary.shell_ms_per_sample.median / 50)} ms/sample`);
  }
  console.log(JSON.stringify(summary));
} finally {
  if (realCgroup) {
    const down = drillSync(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", cgroupName]);
    if (down.status !== 0) console.error(`bench: cgroup teardown failed: ${down.stderr}`);
  }
  redis.kill("SIGKILL");
  rmSync(root, { recursive: true, force: true });
}
