#!/usr/bin/env node
// Gate decisions per second: `drill gate` draining N queued jobs against a
// private redis-server (started here on a free loopback port), beside the
// ceiling that server sets for the bare move a decision wraps:
// `redis-benchmark LMOVE ring ring LEFT RIGHT` on a list of job-sized payloads
// (-c 1 -P 1: one client, one command in flight, like one gate; the default
// -c 50 figure is printed for context only). A benchmark, not a timed test:
// nothing here passes or fails on a number.
//
// What one decision is, in the gate's code (src/gate/loop.ts, queue.ts):
// BLMOVE <q> → processing (its own connection) → GET <q>:mode ∥ HVALS
// <q>:inflight (sent together) → EVALSHA admit|reject (one Lua script moves
// the job on, records the decision, XADDs <q>:events, bumps <q>:stats) → one
// line on stdout. (LINDEX <q>:processing:<gate> 0 only at start and after an
// error.) So 3 sequential round trips and 4 commands per decision, where the
// ceiling does 1 round trip per move: ceiling / 3 is the round-trip bound.
// INFO commandstats (reset before each gate run) is printed per decision so
// the count can be checked against the code.
//
// How it is counted, and why:
// - Decisions/s is the gate's own view, from Redis: every decision XADDs one
//   entry to <q>:events, whose ids are the server's ms clock. Rate =
//   (entries − 1) / (last id − first id): node's start-up, the connect and
//   the --idle-exit wait after the queue empties are all outside it.
// - CPU per decision, gate and redis-server apart: the sum over
//   /proc/<pid>/task/*/schedstat (ns per thread) when the gate's stdout line
//   10 % of N arrives and when line N arrives (the gate then idles in BLMOVE,
//   its threads still alive), divided by the decisions in between: JIT
//   warm-up excluded. The ceiling's redis CPU per LMOVE is the same counter
//   around redis-benchmark.
// - Job mix, three scenarios (--scenarios, all by default), each on a
//   FLUSHALLed server, every repetition runs all of them then the ceiling:
//   reject        default gate flags, the runbook's job (24000 prompt tokens,
//                 cap 32000): job 1 is admitted, every other one is
//                 reject_packed_tokens → <q>:retry:dedicated. No worker, so
//                 the tokens are never released: the default config's steady
//                 state. (Deadline 1 h, so slack never decides instead.)
//   admit         --packed-token-limit 1000000000, 1-token jobs, no worker:
//                 every job admitted → <q>:admitted, and <q>:inflight grows
//                 to N entries. The gate reads that whole hash twice per
//                 decision (HVALS in node, HGETALL in the admit script), so
//                 this rate falls as the run goes: first and last 10 % are
//                 printed apart.
//   admit-steady  as admit, but the bench DELs <q>:inflight every 5 ms (a
//                 worker that frees tokens at once): the admit path with a
//                 small in-flight hash, which is what a real drill has.
// - CPU placement (--pin): a gate and redis-server play ping-pong, like
//   redis-benchmark -c 1, and on this project's 2-vCPU VM where the two sit
//   matters more than anything else: measured, LMOVE -c 1 does ~50k ops/s
//   when client and server share a CPU and ~10-20k across CPUs (each
//   cross-CPU wake-up is an IPI, expensive in a VM; the server's own CPU per
//   LMOVE goes from ~10 to ~25 us), and unpinned runs flip between the two
//   from run to run. So by default (--pin same) redis-server, the gate and
//   redis-benchmark all run on CPU 0 (taskset), which makes the ratio
//   reproducible and turns the bound into plain CPU: one decision takes about
//   gate CPU + redis CPU per decision ("CPU bound" below). --pin cross puts
//   the gate and redis-benchmark on CPU 1; --pin none leaves it to the
//   scheduler. The bench process itself (stdout reader) is not pinned.
// - After every run: sum of the lists (ready, processing, admitted, retry,
//   dead) = pushed, and every id 1..N is in exactly one of them.
//
// usage: node bench/gate-throughput.mjs [--jobs 20000] [--reps 3]
//          [--scenarios reject,admit,admit-steady] [--lmove-requests 100000]
//          [--idle-exit 1s] [--pin same|cross|none] [--aof]
// --aof: run the server as `drill up`'s embedded one (appendonly yes,
// appendfsync always): every decision and every LMOVE then waits for an fsync.
// Needs a built drill (npm run build), redis-server, redis-benchmark.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { arg, drill, fixed, freePort, range, requireBuilt, stats, threadCpuNs } from "./lib.mjs";

const jobs = Number(arg("--jobs", "20000"));
const reps = Number(arg("--reps", "3"));
const lmoveRequests = Number(arg("--lmove-requests", "100000"));
const idleExit = arg("--idle-exit", "1s");
const aof = process.argv.includes("--aof");
const pin = arg("--pin", "same");
const scenarioNames = arg("--scenarios", "reject,admit,admit-steady").split(",").filter(Boolean);
const QUEUE = "jobs";
const RETRY_CLASS = "dedicated"; // the gate's default --retry-host-class
const RAISED_CAP = "1000000000";

const SCENARIOS = {
  reject: {
    promptTokens: 24000,
    gateArgs: [],
    release: false,
    describe: "default gate flags, 24000-token jobs, cap 32000, no worker: 1 admit, then reject_packed_tokens → retry",
  },
  admit: {
    promptTokens: 1,
    gateArgs: ["--packed-token-limit", RAISED_CAP],
    release: false,
    describe: `cap ${RAISED_CAP}, 1-token jobs, no worker: all admitted, ${QUEUE}:inflight grows to N`,
  },
  "admit-steady": {
    promptTokens: 1,
    gateArgs: ["--packed-token-limit", RAISED_CAP],
    release: true,
    describe: `as admit, ${QUEUE}:inflight DELeted every 5 ms (tokens freed at once)`,
  },
};

for (const name of scenarioNames) if (!(name in SCENARIOS)) throw new Error(`bench: unknown scenario "${name}" (${Object.keys(SCENARIOS).join(", ")})`);
if (!(Number.isInteger(jobs) && jobs >= 100 && reps >= 1 && lmoveRequests >= 1000)) throw new Error("bench: need --jobs >= 100, --reps >= 1, --lmove-requests >= 1000");
if (!["cross", "same", "none"].includes(pin)) throw new Error(`bench: --pin ${pin}: cross, same or none`);
if (pin === "cross" && availableParallelism() < 2) throw new Error("bench: --pin cross needs 2 CPUs");
requireBuilt();

/** Runs `command` on one CPU (taskset execs it, so the pid is the command's own). */
const SERVER_CPU = "0";
const CLIENT_CPU = pin === "cross" ? "1" : "0";
function pinned(cpu, command, args) {
  return pin === "none" ? [command, args] : ["taskset", ["-c", cpu, command, ...args]];
}

/** A job in DESIGN.md's format, as `drill pack` encodes it. */
function jobPayload(id, promptTokens, enqueueTs) {
  return JSON.stringify({ id: String(id), prompt_tokens: promptTokens, completion_tokens: 256, files: 8, enqueue_ts: enqueueTs, deadline_ms: 3_600_000, attempt: 0, host_class: "shared-free" });
}

/** A calm host: PSI 0 (so no pressure, never stale), plus the vmstat and stat a sampler would read. */
function fakeProc(dir) {
  mkdirSync(path.join(dir, "pressure"), { recursive: true });
  writeFileSync(path.join(dir, "pressure", "memory"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  writeFileSync(path.join(dir, "vmstat"), "pswpin 0\npswpout 0\nworkingset_refault_file 0\nworkingset_refault_anon 0\n");
  writeFileSync(path.join(dir, "stat"), "cpu  100 0 100 10000 0 0 0 0 0 0\ncpu0 100 0 100 10000 0 0 0 0 0 0\n");
}

const f = (x, digits = 0) => fixed(x, digits);
const show = (s, digits = 0) => range(s, digits);
const msOfId = (id) => Number(String(id).split("-")[0]);

const root = mkdtempSync(path.join(tmpdir(), "drill-gate-bench-"));
const procfs = path.join(root, "proc");
const sysfs = path.join(root, "sys"); // empty: no cgroup hierarchy, so the gate decides on host signals alone
const stateDir = path.join(root, "state");
const redisDir = path.join(root, "redis");
fakeProc(procfs);
mkdirSync(sysfs);
mkdirSync(stateDir);
mkdirSync(redisDir);
const port = await freePort();
const persistence = aof ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"];
const redisServer = spawn(...pinned(SERVER_CPU, "redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", ...persistence, "--dir", redisDir, "--loglevel", "warning"]), { stdio: "ignore" });
const url = `redis://127.0.0.1:${port}`;
const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
redis.on("error", () => {}); // commands still reject; without a listener ioredis prints every reconnect
let gateChild = null;

async function push(promptTokens) {
  const enqueueTs = Date.now();
  const batch = 1000;
  const pipeline = redis.pipeline();
  for (let first = 1; first <= jobs; first += batch) {
    const payloads = [];
    for (let id = first; id < Math.min(first + batch, jobs + 1); id++) payloads.push(jobPayload(id, promptTokens, enqueueTs));
    pipeline.rpush(QUEUE, ...payloads);
  }
  pipeline.set(`${QUEUE}:seq`, String(jobs));
  const results = await pipeline.exec();
  for (const [err] of results) if (err) throw err;
  const len = await redis.llen(QUEUE);
  if (len !== jobs) throw new Error(`bench: pushed ${jobs}, ${QUEUE} holds ${len}`);
}

/** INFO commandstats → { cmd: calls }. */
async function commandCalls() {
  const calls = {};
  for (const m of (await redis.info("commandstats")).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
  return calls;
}

/** Every list a job can be in once the gate is done; ids found in each. */
async function accountFor(gateId) {
  const lists = [QUEUE, `${QUEUE}:processing:${gateId}`, `${QUEUE}:admitted`, `${QUEUE}:retry:${RETRY_CLASS}`, `${QUEUE}:dead`];
  const counts = {};
  const seen = new Uint8Array(jobs + 1);
  let duplicates = 0;
  let strangers = 0;
  for (const key of lists) {
    const items = await redis.lrange(key, 0, -1);
    counts[key] = items.length;
    for (const item of items) {
      const id = Number(JSON.parse(item).id); // dead entries keep the id too
      if (!(Number.isInteger(id) && id >= 1 && id <= jobs)) strangers++;
      else if (seen[id]++) duplicates++;
    }
  }
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const missing = seen.reduce((n, v, i) => (i > 0 && v === 0 ? n + 1 : n), 0);
  return { counts, total, missing, duplicates, strangers, ok: total === jobs && missing === 0 && duplicates === 0 && strangers === 0 };
}

/** Ids (server ms) of the events stream, in order. */
async function eventTimes() {
  const times = [];
  let start = "-";
  for (;;) {
    const page = await redis.xrange(`${QUEUE}:events`, start, "+", "COUNT", 5000);
    for (const [id] of page) times.push(msOfId(id));
    if (page.length < 5000) return times;
    start = `(${page.at(-1)[0]}`;
  }
}

async function runGate(name, rep) {
  const scenario = SCENARIOS[name];
  await redis.flushall();
  await push(scenario.promptTokens);
  await redis.config("RESETSTAT");
  const gateId = `bench-${name}-${rep}`;
  const args = [drill, "--redis", url, "--procfs", procfs, "--sysfs", sysfs, "--state-dir", stateDir, "gate", "--queue", QUEUE, "--gate-id", gateId, "--idle-exit", idleExit, ...scenario.gateArgs];
  const warm = Math.max(1, Math.floor(jobs / 10));
  const releaser = scenario.release ? setInterval(() => redis.del(`${QUEUE}:inflight`).catch(() => {}), 5) : null;
  const started = process.hrtime.bigint();
  const child = spawn(...pinned(CLIENT_CPU, "node", args), { stdio: ["ignore", "pipe", "pipe"] });
  gateChild = child;
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  let lines = 0;
  let lastLine = "";
  let tail = "";
  const marks = {};
  const mark = () => ({ at: process.hrtime.bigint(), gate: threadCpuNs(child.pid), redis: threadCpuNs(redisServer.pid) });
  child.stdout.on("data", (chunk) => {
    const text = tail + chunk.toString("utf8");
    const parts = text.split("\n");
    tail = parts.pop();
    for (const line of parts) {
      lines++;
      lastLine = line;
      if (lines === warm) marks.warm = mark();
      if (lines === jobs) marks.last = mark();
    }
  });
  const code = await new Promise((resolve) => child.once("close", (c) => resolve(c)));
  gateChild = null;
  const wallS = Number(process.hrtime.bigint() - started) / 1e9;
  if (releaser) clearInterval(releaser);
  if (code !== 0 || lines !== jobs || !marks.last) throw new Error(`bench: gate (${name}) exited ${code} after ${lines}/${jobs} lines; last "${lastLine}": ${stderr.slice(-500)}`);

  const calls = await commandCalls();
  const times = await eventTimes();
  const stat = await redis.hgetall(`${QUEUE}:stats`);
  const account = await accountFor(gateId);
  if (times.length !== jobs) throw new Error(`bench: ${QUEUE}:events holds ${times.length} entries, ${jobs} decisions expected`);
  const rate = (from, to) => (to - from) / ((times[to] - times[from]) / 1000);
  const tenth = Math.floor(jobs / 10);
  const between = jobs - warm;
  const steadyS = Number(marks.last.at - marks.warm.at) / 1e9;
  return {
    decisionsPerS: rate(0, jobs - 1),
    firstTenthPerS: rate(0, tenth),
    lastTenthPerS: rate(jobs - 1 - tenth, jobs - 1),
    stdoutSteadyPerS: between / steadyS,
    gateCpuUs: (marks.last.gate - marks.warm.gate) / 1e3 / between,
    redisCpuUs: (marks.last.redis - marks.warm.redis) / 1e3 / between,
    wallS,
    mix: Object.fromEntries(Object.entries(stat).filter(([k]) => k === "admitted" || k.startsWith("reject_") || k === "dead").map(([k, v]) => [k, Number(v)])),
    perDecision: Object.fromEntries(Object.entries(calls).filter(([, n]) => n >= jobs / 2).map(([k, n]) => [k, n / jobs])),
    account,
  };
}

function lmoveCeiling(clients, payload) {
  const before = threadCpuNs(redisServer.pid);
  const bench = spawnSync(...pinned(CLIENT_CPU, "redis-benchmark", ["-p", String(port), "-n", String(lmoveRequests), "-c", String(clients), "-P", "1", "--csv", "LMOVE", "ring", "ring", "LEFT", "RIGHT"]), { encoding: "utf8" });
  const redisUs = (threadCpuNs(redisServer.pid) - before) / 1e3 / lmoveRequests;
  const row = bench.stdout.trim().split("\n").find((l) => l.startsWith('"LMOVE'));
  if (bench.status !== 0 || !row) throw new Error(`bench: redis-benchmark failed: ${bench.stderr || bench.stdout}`);
  const cells = JSON.parse(`[${row}]`);
  return { opsPerS: Number(cells[1]), p50Ms: Number(cells[4]), redisUs, payloadBytes: payload.length };
}

async function runCeiling() {
  await redis.flushall();
  // 1000 payloads of a job's size; LEFT → RIGHT of the same list moves a real element every time.
  const payload = jobPayload(1, 24000, Date.now());
  await redis.rpush("ring", ...Array.from({ length: 1000 }, (_, i) => jobPayload(i + 1, 24000, Date.now())));
  const one = lmoveCeiling(1, payload);
  const fifty = lmoveCeiling(50, payload);
  const len = await redis.llen("ring");
  if (len !== 1000) throw new Error(`bench: ring holds ${len} after LMOVE, 1000 expected`);
  return { one, fifty };
}

try {
  for (let i = 0; ; i++) {
    try {
      await redis.connect();
      if ((await redis.ping()) === "PONG") break;
    } catch {
      if (i > 100) throw new Error("bench: redis-server did not start");
      redis.disconnect();
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const version = /redis_version:(\S+)/.exec(await redis.info("server"))?.[1];
  console.log(`bench: ${reps} repetition(s) × [${scenarioNames.join(", ")}] × ${jobs} jobs, then LMOVE × ${lmoveRequests}; redis-server ${version} 127.0.0.1:${port} (${aof ? "appendonly yes, appendfsync always" : "no persistence"}); ${pin === "none" ? "no CPU pinning" : `redis-server on CPU ${SERVER_CPU}, gate and redis-benchmark on CPU ${CLIENT_CPU}`}; fake calm /proc under ${procfs}`);
  for (const name of scenarioNames) console.log(`bench: ${name}: ${SCENARIOS[name].describe}`);

  const rows = Object.fromEntries(scenarioNames.map((n) => [n, []]));
  const ceilings = [];
  for (let rep = 1; rep <= reps; rep++) {
    for (const name of scenarioNames) {
      const r = await runGate(name, rep);
      rows[name].push(r);
      const a = r.account;
      console.log(
        `rep ${rep} ${name.padEnd(12)} ${f(r.decisionsPerS)} decisions/s (first 10 % ${f(r.firstTenthPerS)}, last 10 % ${f(r.lastTenthPerS)}) | CPU/decision gate ${f(r.gateCpuUs)} us, redis ${f(r.redisCpuUs, 1)} us | mix ${JSON.stringify(r.mix)} | jobs accounted ${a.total}/${jobs}${a.ok ? " ok" : ` LOST missing=${a.missing} duplicates=${a.duplicates} strangers=${a.strangers}`}`,
      );
      if (!a.ok) throw new Error(`bench: job accounting failed: ${JSON.stringify(a)}`);
    }
    const c = await runCeiling();
    ceilings.push(c);
    c.loadavg1 = loadavg()[0];
    console.log(`rep ${rep} LMOVE ceiling   -c 1: ${f(c.one.opsPerS)} ops/s (p50 ${c.one.p50Ms} ms, redis ${f(c.one.redisUs, 1)} us/op) | -c 50: ${f(c.fifty.opsPerS)} ops/s (redis ${f(c.fifty.redisUs, 1)} us/op) | host load avg 1 min ${f(c.loadavg1, 2)}`);
  }

  const c1 = stats(ceilings.map((c) => c.one.opsPerS));
  const c50 = stats(ceilings.map((c) => c.fifty.opsPerS));
  const lmoveRedisUs = stats(ceilings.map((c) => c.one.redisUs));
  const summary = {
    jobs,
    reps,
    persistence: aof ? "aof_always" : "none",
    pin,
    lmove_c1_ops_per_s: c1,
    lmove_c50_ops_per_s: c50,
    lmove_redis_cpu_us_per_op: lmoveRedisUs,
    lmove_payload_bytes: ceilings[0].one.payloadBytes,
    host_loadavg1_after_each_rep: ceilings.map((c) => c.loadavg1),
    scenarios: {},
  };
  console.log(`\nmedian [min–max] over ${reps} repetition(s); ratio = decisions/s ÷ LMOVE -c 1 ops/s of the same repetition:`);
  console.log(`  LMOVE ceiling -c 1 -P 1    ${show(c1)} ops/s, redis ${show(lmoveRedisUs, 1)} us CPU/op; round-trip bound for 3 round trips: ${f(c1.median / 3)}/s`);
  console.log(`  LMOVE -c 50 (context)      ${show(c50)} ops/s`);
  for (const name of scenarioNames) {
    const rs = rows[name];
    const col = (fn) => stats(rs.map(fn));
    const s = {
      describe: SCENARIOS[name].describe,
      decisions_per_s: col((r) => r.decisionsPerS),
      first_tenth_per_s: col((r) => r.firstTenthPerS),
      last_tenth_per_s: col((r) => r.lastTenthPerS),
      stdout_steady_per_s: col((r) => r.stdoutSteadyPerS),
      ratio_to_lmove_c1: stats(rs.map((r, i) => r.decisionsPerS / ceilings[i].one.opsPerS)),
      gate_cpu_us_per_decision: col((r) => r.gateCpuUs),
      redis_cpu_us_per_decision: col((r) => r.redisCpuUs),
      cpu_bound_per_s: col((r) => 1e6 / (r.gateCpuUs + r.redisCpuUs)),
      gate_wall_s: col((r) => r.wallS),
      mix: rs[0].mix,
      commands_per_decision: rs[0].perDecision,
      jobs_accounted: rs.every((r) => r.account.ok),
      lists: rs[0].account.counts,
    };
    summary.scenarios[name] = s;
    console.log(`  ${name.padEnd(12)} ${show(s.decisions_per_s)} decisions/s, ratio ${show(s.ratio_to_lmove_c1, 3)} (${f(s.ratio_to_lmove_c1.median * 100, 1)} % of the ceiling)`);
    console.log(`               first 10 % ${show(s.first_tenth_per_s)}/s, last 10 % ${show(s.last_tenth_per_s)}/s, after the first 10 % (stdout) ${show(s.stdout_steady_per_s)}/s`);
    console.log(`               CPU/decision gate ${show(s.gate_cpu_us_per_decision)} us + redis ${show(s.redis_cpu_us_per_decision, 1)} us → CPU bound ${show(s.cpu_bound_per_s)}/s`);
    console.log(`               commands/decision (INFO commandstats, Lua's own calls included): ${Object.entries(s.commands_per_decision).map(([k, v]) => `${k} ${f(v, 2)}`).join(", ")}`);
    console.log(`               no job lost in any repetition: ${s.jobs_accounted ? "yes" : "NO"}; lists after rep 1: ${Object.entries(s.lists).map(([k, v]) => `${k}=${v}`).join(" ")} (= ${jobs} pushed)`);
  }
  console.log(JSON.stringify(summary));
} finally {
  if (gateChild) gateChild.kill("SIGKILL");
  redis.disconnect();
  redisServer.kill("SIGKILL");
  rmSync(root, { recursive: true, force: true });
}
