#!/usr/bin/env node
// CPU time per sample: `drill watch` against the runbook's shell loop
// (bench/seed-sidecar.sh). Both run under `bash -c '…; times'`, whose second
// line is the CPU (user + sys) of every descendant the shell waited for, so
// the shell loop's forks (date, awk, vmstat, grep, cat, redis-cli, sleep) count.
//
// usage: node bench/watch-vs-shell.mjs [--samples 200] [--interval 100ms] [--shell-iterations 10]
// Needs a built drill (npm run build), redis-server, redis-cli and vmstat.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const drill = path.join(repo, "bin", "drill.js");

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}
const samples = Number(arg("--samples", "200"));
const interval = arg("--interval", "100ms");
const shellIterations = Number(arg("--shell-iterations", "10"));
// drill's fixed cost (node start, module load, first connect) is measured with
// a short run and subtracted, so the figure is the marginal cost of a sample.
const baselineSamples = Math.max(2, Math.round(samples / 10));

if (!existsSync(path.join(repo, "dist", "main.js"))) {
  console.error("bench: dist/main.js missing: run npm run build first");
  process.exit(1);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** CPU seconds (user + sys) of `command` and all its descendants. */
function cpuOf(command) {
  const started = process.hrtime.bigint();
  const r = spawnSync("bash", ["-c", `${command} >/dev/null 2>&1; times`], { encoding: "utf8" });
  const wallS = Number(process.hrtime.bigint() - started) / 1e9;
  const children = r.stdout.trim().split("\n")[1];
  const m = children && /^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/.exec(children.trim());
  if (!m) throw new Error(`bench: cannot parse times output: ${r.stdout} ${r.stderr}`);
  return { cpuS: Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4]), wallS };
}

const root = mkdtempSync(path.join(tmpdir(), "drill-bench-"));
// A v2 cgroup tree with every file the sampler reads, so both sides read a
// real file for the cgroup (the host's /proc is real for both).
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

const port = await freePort();
const redis = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" });
try {
  for (let i = 0; ; i++) {
    if (spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout.trim() === "PONG") break;
    if (i > 100) throw new Error("bench: redis-server did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
  // A few queued and admitted jobs, so the sample decodes real payloads.
  const now = Date.now();
  const job = (id) => JSON.stringify({ id: String(id), prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: now, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
  spawnSync("redis-cli", ["-p", String(port), "RPUSH", "jobs", ...[1, 2, 3, 4, 5, 6, 7, 8].map(job)]);
  spawnSync("redis-cli", ["-p", String(port), "RPUSH", "jobs:admitted", ...[9, 10, 11, 12].map(job)]);

  const watch = (count) =>
    `node ${drill} --procfs /proc --sysfs ${path.join(root, "sys")} --redis redis://127.0.0.1:${port} watch --json --interval ${interval} --count ${count}`;
  const full = cpuOf(watch(samples));
  const base = cpuOf(watch(baselineSamples));
  const shell = cpuOf(`bash ${path.join(repo, "bench", "seed-sidecar.sh")} ${path.join(infer, "memory.current")} ${port} ${shellIterations} 1`);

  const drillMarginalMs = ((full.cpuS - base.cpuS) / (samples - baselineSamples)) * 1000;
  const drillAllInMs = (full.cpuS / samples) * 1000;
  const shellMs = (shell.cpuS / shellIterations) * 1000;
  const result = {
    drill_samples: samples,
    drill_cpu_s: Number(full.cpuS.toFixed(3)),
    drill_cpu_ms_per_sample_marginal: Number(drillMarginalMs.toFixed(3)),
    drill_cpu_ms_per_sample_incl_startup: Number(drillAllInMs.toFixed(3)),
    shell_iterations: shellIterations,
    shell_cpu_s: Number(shell.cpuS.toFixed(3)),
    shell_cpu_ms_per_sample: Number(shellMs.toFixed(3)),
    ratio_marginal: Number((shellMs / drillMarginalMs).toFixed(1)),
    ratio_incl_startup: Number((shellMs / drillAllInMs).toFixed(1)),
  };
  console.log(`drill watch : ${drillMarginalMs.toFixed(3)} ms CPU/sample marginal, ${drillAllInMs.toFixed(3)} ms incl. node startup (${samples} samples at ${interval})`);
  console.log(`seed shell  : ${shellMs.toFixed(3)} ms CPU/sample (${shellIterations} iterations, children included)`);
  console.log(`ratio       : ${result.ratio_marginal}x cheaper marginal, ${result.ratio_incl_startup}x incl. startup (target >= 50x)`);
  console.log(JSON.stringify(result));
} finally {
  redis.kill("SIGKILL");
  rmSync(root, { recursive: true, force: true });
}
