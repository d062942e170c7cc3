// `drill watch` (the sidecar, issue 5) end to end on a real cgroup and a real
// redis-server: the built binary for every step (cgroup setup, inject, worker,
// watch, teardown), the cgroup under this test's own (--parent self), always
// torn down. (1) During a thrash hog, the fast stall rate shows the pressure
// within 2 samples of the hog filling the limit while avg10 still lags.
// (2) Idle CPU + a thrashing worker cgroup + an empty queue + an admitted job
// past its deadline without a first token pages `reclaim_not_underload`.
import { mkdtempSync, rmSync } from "node:fs";
import { createInterface } from "node:readline";
import { execa, type ResultPromise } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import type { InjectDocument } from "../../src/commands/inject.js";
import { encodeJob, type Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import type { Sample } from "../../src/sampler/step.js";
import { workerKeys } from "../../src/worker/scripts.js";
import { cgroupDirsLeft, forceCleanup, realDrillSkipReason, realWorkerCgroup, tempStateDir, waitForQuietHostPsi } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const reason = realDrillSkipReason();
if (reason) console.warn(`skipping real watch tests: ${reason}`);

const M = 1024 * 1024;
let server: RedisServer;
let redis: Redis;
let stateDir = "";
let fileDir = "";
/** Every cgroup a test set up: torn down in the test's finally and again in afterAll. */
const made = new Map<string, WorkerCgroup>();
const children = new Set<ResultPromise>();

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitFor<T>(what: string, probe: () => Promise<T | null | false> | T | null | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** The built binary in the background, tracked so a failed test still kills it. */
function spawnDrill(args: string[], timeoutMs = 60_000): ResultPromise<{ reject: false; env: Record<string, string>; timeout: number; buffer: true }> {
  const child = execa("node", [drillBin, "--state-dir", stateDir, ...args], {
    reject: false,
    env: { FORCE_COLOR: "0", NO_COLOR: "1" },
    timeout: timeoutMs,
    buffer: true,
  });
  children.add(child);
  void child.finally(() => children.delete(child));
  return child;
}

async function setupCgroup(name: string, memoryMax: string): Promise<WorkerCgroup> {
  const cg = realWorkerCgroup(name);
  made.set(name, cg);
  const result = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", memoryMax, "--swap-max", "0"]);
  expect(result.exitCode, result.stderr).toBe(0);
  return cg;
}

/** Kill what we started, `cgroup teardown` through the binary, then the blunt helper; nothing may be left. */
async function teardown(name: string): Promise<void> {
  for (const child of children) child.kill("SIGKILL");
  await Promise.allSettled([...children]);
  const cg = made.get(name);
  if (!cg) return;
  made.delete(name);
  const down = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--name", name, "--parent", "self"]);
  await forceCleanup(cg, stateDir);
  expect(cgroupDirsLeft(cg)).toEqual([]);
  expect(down.exitCode, down.stderr).toBe(0);
}

/** `watch --json` stdout: one sample per line, collected as they come (the test reads them live). */
function collectSamples(child: ResultPromise): Sample[] {
  const samples: Sample[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    if (line.trim() !== "") samples.push(JSON.parse(line) as Sample);
  });
  return samples;
}

function watchArgs(queue: string, name: string, count: number): string[] {
  return ["--redis", server.url, "--json", "watch", "--queue", queue, "--name", name, "--parent", "self", "--interval", "500ms", "--count", String(count)];
}

const fmt = (v: number | null | undefined, digits = 2): string => (v === null || v === undefined ? "n/a" : v.toFixed(digits));
const mib = (v: number | "max" | null): string => (v === null ? "n/a" : v === "max" ? "max" : `${(v / M).toFixed(1)}M`);

beforeAll(async () => {
  if (reason) return;
  stateDir = tempStateDir();
  // A disk filesystem for the hog's file and the weights (tmpfs would be shmem: OOM, not thrash).
  fileDir = mkdtempSync("/var/tmp/drill-watch-test-");
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-watch-real" });
});

afterAll(async () => {
  if (reason) return;
  for (const child of children) child.kill("SIGKILL");
  await Promise.allSettled([...children]);
  try {
    for (const [name, cg] of made) {
      await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--name", name, "--parent", "self"]);
      await forceCleanup(cg, stateDir);
    }
  } finally {
    await closeRedis(redis);
    await server?.stop();
    rmSync(fileDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
});

describe.skipIf(reason)("drill watch on a real cgroup and a real redis-server", () => {
  it("thrash: psi_mem_some_rate is above 5 within 2 samples of the hog filling the limit, while psi_mem_some_avg10 is still climbing", async () => {
    const name = `wr1x${process.pid}`;
    try {
      // "avg10 still climbing" needs a host whose avg10 starts low: not the previous file's hog still decaying out
      // of it (CI: worker.test's thrash right before left avg10 at 22 while this thrash's rate was 17).
      const waited = await waitForQuietHostPsi(2);
      if (waited > 0) console.log(`watch-real: waited ${waited} ms for host memory PSI avg10 < 2 before the hog`);
      await setupCgroup(name, "128M");
      // 500 ms samples for ~20 s: before the hog, its fill, 12 s of thrash, after.
      const watch = spawnDrill(watchArgs("wr1", name, 40));
      const samples = collectSamples(watch);
      await waitFor("the first watch sample", () => samples.length >= 2, 15_000);

      const inject = await spawnDrill(["--json", "inject", "--name", name, "--parent", "self", "--size", "256M", "--mode", "thrash", "--hold", "12s", "--file-dir", fileDir]);
      expect(inject.exitCode, inject.stderr).toBe(0);
      expect(inject.stderr).toMatch(/touched/);
      const report = JSON.parse(inject.stdout) as InjectDocument;
      expect(report).toMatchObject({ outcome: "packed", joined: true, packed_bytes: 256 * M });
      const watched = await watch;
      expect(watched.exitCode, watched.stderr).toBe(0);

      console.log("sample  cg_mem/cg_max     psi_rate  psi_avg10  cg_psi_rate  cg_psi_avg10  cpu_idle  iowait");
      samples.forEach((s, i) =>
        console.log(
          `${String(i).padStart(6)}  ${`${mib(s.cg_mem_current)}/${mib(s.cg_mem_max)}`.padEnd(16)} ${fmt(s.psi_mem_some_rate).padStart(8)}  ${fmt(s.psi_mem_some_avg10).padStart(9)}` +
            `  ${fmt(s.cg_psi_mem_some_rate).padStart(11)}  ${fmt(s.cg_psi_mem_some_avg10).padStart(12)}  ${fmt(s.cpu_idle_pct, 0).padStart(8)}  ${fmt(s.cpu_iowait_pct, 0).padStart(6)}`,
        ),
      );

      // The hog fills the limit: the first sample with the cgroup's usage within 2 % of its max.
      const fill = samples.findIndex((s) => typeof s.cg_mem_max === "number" && s.cg_mem_current !== null && s.cg_mem_current >= 0.98 * s.cg_mem_max);
      expect(fill, "no sample saw the cgroup at its limit").toBeGreaterThan(0);
      expect(samples[fill]!.cg_mem_max).toBe(128 * M);
      // Before the hog the cgroup was empty: this really is the fill, not a leftover.
      expect(samples[0]!.cg_mem_current!).toBeLessThan(16 * M);

      const next = samples.slice(fill + 1, fill + 3);
      expect(next).toHaveLength(2);
      // The issue names the host field, and it holds here: in the first sample
      // after the fill the host rate measured 12.8-18.4 % over 8 runs (the
      // cgroup's 9.4-19.2 %; host "some" is diluted by the other CPU's
      // non-stalled time, so it is sometimes the lower one, never near 5).
      const hit = next.find((s) => s.psi_mem_some_rate !== null && s.psi_mem_some_rate > 5);
      console.log(
        `fill at sample ${fill} (${samples[fill]!.ts}); next two: psi_mem_some_rate ${next.map((s) => fmt(s.psi_mem_some_rate)).join(", ")}` +
          ` avg10 ${next.map((s) => fmt(s.psi_mem_some_avg10)).join(", ")}; cg rate ${next.map((s) => fmt(s.cg_psi_mem_some_rate)).join(", ")}` +
          ` cg avg10 ${next.map((s) => fmt(s.cg_psi_mem_some_avg10)).join(", ")}`,
      );
      expect(hit, "psi_mem_some_rate > 5 in neither of the 2 samples after the fill").toBeDefined();
      const rate = hit!.psi_mem_some_rate!;
      const avg10 = hit!.psi_mem_some_avg10!;
      // avg10 lags: at that moment it is below the rate...
      expect(avg10).toBeLessThan(rate);
      // ...and still climbing: later samples of the same thrash show it higher.
      const thrash = samples.slice(samples.indexOf(hit!) + 1).filter((s) => s.cg_mem_current !== null && s.cg_mem_current >= 0.9 * 128 * M);
      const laterAvg10 = Math.max(...thrash.map((s) => s.psi_mem_some_avg10 ?? -1));
      console.log(`at the hit: psi_mem_some_rate=${fmt(rate)} psi_mem_some_avg10=${fmt(avg10)}; avg10 later in the thrash up to ${fmt(laterAvg10)}; inject stall_rates_pct ${report.stall_rates_pct.join(",")}`);
      expect(laterAvg10).toBeGreaterThan(avg10);
      // The hog never escaped its limit and was not OOM-killed (file pages are reclaimable).
      expect(report.cg_oom_kill_after).toBe(report.cg_oom_kill_before);
    } finally {
      await teardown(name);
    }
  });

  it("reclaim_not_underload pages with idle CPU, a thrashing worker cgroup, an empty queue and an admitted job past its deadline", async () => {
    const name = `wr2x${process.pid}`;
    const queue = "wr2";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const workerId = "w2";
    const job = (id: string, overrides: Partial<Job>): Job => ({
      id,
      prompt_tokens: 2048,
      completion_tokens: 400,
      files: 1,
      enqueue_ts: Date.now(),
      deadline_ms: 8000,
      attempt: 0,
      host_class: "shared-free",
      ...overrides,
    });
    /** As the gate leaves an admitted job: payload on <q>:admitted, packed tokens in <q>:inflight. */
    const admit = async (j: Job): Promise<void> => {
      await redis.hset(k.inflight, j.id, j.prompt_tokens);
      await redis.rpush(k.admitted, encodeJob(j));
    };
    try {
      await setupCgroup(name, "160M");
      // The real worker, concurrency 1, decoding at 0.5 token/s: the first job holds it for minutes.
      // Slow on purpose: the thrash hog alone keeps one of the 2 cores busy or in
      // iowait (measured here: sys 27 %, iowait 24-29 %, idle 41-46 % of the host);
      // a worker making passes as fast as it can would add its own iowait.
      const worker = spawnDrill([
        "--redis", server.url, "--json", "worker", "--name", name, "--parent", "self", "--queue", queue, "--worker-id", workerId,
        "--weights", "48M", "--weights-dir", fileDir, "--kv-bytes-per-token", "256", "--decode-tokens-per-s", "0.5", "--concurrency", "1", "--duration", "50s",
      ]);
      const busy = job("1", { deadline_ms: 600_000 });
      await admit(busy);
      await waitFor("the worker to take the first job and emit its first token", async () => (await redis.hlen(wk.firstToken)) === 1 && (await redis.llen(k.admitted)) === 0, 30_000);

      // The neighbour in the same cgroup: a file-backed map twice the limit, faulted from inside.
      const inject = await runDrill(["--state-dir", stateDir, "--json", "inject", "--name", name, "--parent", "self", "--size", "256M", "--mode", "thrash", "--hold", "30s", "--detach", "--file-dir", fileDir]);
      expect(inject.exitCode, inject.stderr).toBe(0);
      expect(JSON.parse(inject.stdout) as InjectDocument).toMatchObject({ outcome: "packed", detached: true });

      // Admitted 20 s ago with an 8 s deadline, no first token: it waits behind the busy job (concurrency 1).
      const late = job("2", { enqueue_ts: Date.now() - 20_000, deadline_ms: 8000 });
      await admit(late);
      expect(await redis.llen(k.ready)).toBe(0); // nothing queued: queue_age_ms 0 "looks fine"

      // 12 samples (6 s): the page needs one sample with idle > 30 %; a neighbour's burst on a shared host can cost a few.
      const watch = await spawnDrill(watchArgs(queue, name, 12));
      expect(watch.exitCode, watch.stderr).toBe(0);
      const samples = watch.stdout.trim().split("\n").map((line) => JSON.parse(line) as Sample);
      for (const s of samples) {
        console.log(
          `${s.ts} cpu_idle=${fmt(s.cpu_idle_pct)} iowait=${fmt(s.cpu_iowait_pct)} psi_rate=${fmt(s.psi_mem_some_rate)} cg_psi_rate=${fmt(s.cg_psi_mem_some_rate)}` +
            ` cg_psi_avg10=${fmt(s.cg_psi_mem_some_avg10)} slack_ms=${s.deadline_slack_ms ?? "n/a"} queue_age_ms=${s.queue_age_ms ?? "n/a"} cg_mem=${mib(s.cg_mem_current)} alarm=${s.alarm.join(",") || "none"}`,
        );
      }
      console.log(`watch stderr:\n${watch.stderr}`);

      const fired = samples.find((s) => s.alarm.includes("reclaim_not_underload"));
      expect(fired, `no sample has alarm reclaim_not_underload; cpu_idle_pct ${samples.map((s) => fmt(s.cpu_idle_pct, 0)).join(",")} (the host must be otherwise quiet)`).toBeDefined();
      console.log(`fired: ${JSON.stringify(fired)}`);
      expect(fired!.cpu_idle_pct!).toBeGreaterThan(30);
      expect(fired!.queue_len).toBe(0);
      expect(fired!.queue_age_ms!).toBeLessThan(500);
      expect(fired!.deadline_slack_ms!).toBeLessThan(0);
      // The late job is the one waiting: its slack, not the busy job's (which has its first token).
      expect(fired!.deadline_slack_ms).toBe(late.enqueue_ts + late.deadline_ms - Date.parse(fired!.ts));
      // And the worker cgroup really thrashes: at its limit, stalling.
      expect(fired!.cg_mem_current!).toBeGreaterThanOrEqual(0.9 * 160 * M);
      expect(fired!.cg_psi_mem_some_rate!).toBeGreaterThan(5);

      const page = /^PAGE reclaim, not underload: cpu_idle=(\d+)% psi=(\d+\.\d\d) slack_ms=(-\d+) queue_age_ms=(\d+) via=(\w+)=(-?[\d.]+)$/m.exec(watch.stderr);
      expect(page, `no PAGE line in stderr:\n${watch.stderr}`).not.toBeNull();
      const [, idle, psi, slack, age, viaField, viaValue] = page!;
      expect(Number(idle)).toBeGreaterThan(30);
      expect(Number(slack)).toBeLessThan(0);
      expect(Number(age)).toBeLessThan(500);
      // psi= is host some avg10 (what the gate's lines call psi), whatever tripped; via= is the figure that did.
      expect(psi).toBe(fired!.psi_mem_some_avg10!.toFixed(2));
      expect(Number(viaValue)).toBe(Number((fired![viaField as keyof Sample] as number).toFixed(2)));
      console.log(`PAGE figures: cpu_idle=${idle}% psi=${psi} slack_ms=${slack} queue_age_ms=${age}`);

      // Stop the worker: the busy job goes back to the head of admitted, the late one is still there.
      worker.kill("SIGTERM");
      const stopped = await worker;
      expect(stopped.exitCode, stopped.stderr).toBe(143);
      await assertNoJobLost(redis, queue, [busy.id, late.id]);
    } finally {
      await teardown(name);
    }
  });
});
