// `drill worker` end to end: the built binary, a real redis-server on a free
// port, a real memory cgroup under this test's own (--parent self), always
// torn down. (1) admitted jobs are processed, stats add up, inflight released,
// nothing lost; (2) the passes really slow under a thrash hog in the same
// cgroup, and the cgroup's PSI total grows (a relative comparison in one run);
// (3) SIGKILL mid-job: a new worker with the same id recovers its list;
// (4) a Redis outage: jobs lost BLMOVE replies left in the working list and the
// job taken when it comes back each run once, within --concurrency and --max-jobs.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { execa, type ResultPromise } from "execa";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { spawnInCgroup } from "../../src/cgroup/join.js";
import { readOomKillCount } from "../../src/cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { locatePageToucher, thrashCommand } from "../../src/native/pagetoucher.js";
import { encodeJob, type Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import type { DoneRecord } from "../../src/worker/plan.js";
import { workerKeys } from "../../src/worker/scripts.js";
import { workerEntryReady } from "../../src/drill/ready.js";
import { forceCleanup, realDrillSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { drillBin } from "../helpers/cli.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { freePort, startRedisServer, waitForPing, type RedisServer } from "../helpers/redisServer.js";

const reason = realDrillSkipReason();
if (reason) console.warn(`skipping real worker tests: ${reason}`);

const M = 1024 * 1024;
const LIMIT = 160 * M;
let server: RedisServer;
let redis: Redis;
let stateDir = "";
let weightsDir = "";
let cg: WorkerCgroup;
const children = new Set<ResultPromise | ChildProcess>();

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

let seq = 0;
function job(overrides: Partial<Job> = {}): Job {
  return {
    id: `${++seq}`,
    prompt_tokens: 4096,
    completion_tokens: 40,
    files: 1,
    enqueue_ts: Date.now(),
    deadline_ms: 8000,
    attempt: 0,
    host_class: "shared-free",
    ...overrides,
  };
}

/** As the gate leaves them: payload on <q>:admitted, packed tokens in <q>:inflight. */
async function admit(queue: string, jobs: Job[]): Promise<void> {
  const k = queueKeys(queue);
  for (const j of jobs) {
    await redis.hset(k.inflight, j.id, j.prompt_tokens);
    await redis.rpush(k.admitted, encodeJob(j));
  }
}

function workerArgs(queue: string, workerId: string, extra: string[]): string[] {
  return [
    drillBin, "--json", "--redis", server.url, "worker",
    "--name", cg.name, "--parent", "self", "--queue", queue, "--worker-id", workerId,
    "--file-dir", weightsDir, "--kv-bytes-per-token", "256", ...extra,
  ];
}

/**
 * Writes to the main server's data while it is down and the worker cannot see
 * it: a second redis-server on the same AOF dir, on another port, stopped
 * again (SIGTERM flushes the AOF) before the main one restarts on that dir.
 */
async function whileDown(write: (side: Redis) => Promise<unknown>): Promise<void> {
  const port = await freePort();
  const side = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", server.dir, "--daemonize", "no", "--loglevel", "warning"], { stdio: "ignore" });
  children.add(side);
  const exited = new Promise((resolve) => side.once("exit", resolve));
  try {
    await waitForPing(port, 10_000, () => (side.exitCode !== null ? `side redis-server exited ${side.exitCode}` : null));
    const client = await connectRedis(`redis://127.0.0.1:${port}`, { name: "test-worker-side" });
    try {
      await write(client);
    } finally {
      await closeRedis(client);
    }
  } finally {
    side.kill("SIGTERM");
    await exited;
    children.delete(side);
  }
}

function startWorker(queue: string, workerId: string, extra: string[]): ResultPromise<{ reject: false; env: Record<string, string>; timeout: number; buffer: true }> {
  const child = execa("node", workerArgs(queue, workerId, extra), {
    reject: false,
    env: { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir },
    timeout: 60_000,
    buffer: true,
  });
  children.add(child);
  void child.finally(() => children.delete(child));
  return child;
}

/** The worker's final `worker <id> stopped (...)` line. */
function summaryLine(stderr: string, workerId: string): string {
  return stderr.split("\n").find((l) => l.startsWith(`worker ${workerId} stopped (`)) ?? "";
}

/**
 * Kills the real redis-server under a running worker and, while it is down,
 * stages what the worker meets when it is back: `taken` on admitted (its first
 * take returns it) and `lost` in its working list, as BLMOVEs executed just
 * before the outage with their replies lost leave them.
 */
async function outageWithStrays(queue: string, workerId: string, worker: ResultPromise, taken: Job, lost: Job[]): Promise<void> {
  const k = queueKeys(queue);
  let stderr = "";
  worker.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  // Its ready mark is the last write before its loop: an outage earlier than that finds no
  // BLMOVE to lose a reply of (and "taking jobs from" is said just before the mark).
  const wk = workerKeys(queue);
  await waitFor("the worker's ready mark", async () => workerEntryReady(await redis.hget(wk.workers, workerId), await redis.get(wk.heartbeat(workerId))));
  server.kill("SIGKILL");
  await waitFor("the worker to see the outage", () => stderr.includes("redis unavailable"));
  await whileDown(async (side) => {
    for (const j of [taken, ...lost]) await side.hset(k.inflight, j.id, j.prompt_tokens);
    await side.rpush(k.admitted, encodeJob(taken));
    for (const j of lost) await side.rpush(k.working(workerId), encodeJob(j));
  });
  await server.restart();
}

async function doneRecords(queue: string): Promise<DoneRecord[]> {
  return (await redis.lrange(queueKeys(queue).done, 0, -1)).map((text) => JSON.parse(text) as DoneRecord);
}

function meanPassMs(records: DoneRecord[]): number {
  const passes = records.reduce((sum, r) => sum + r.passes, 0);
  return records.reduce((sum, r) => sum + r.pass_us_total, 0) / passes / 1000;
}

function psiSomeTotal(): number {
  const text = readFileSync(cg.pressureFile!, "utf8");
  return Number(/^some .*total=(\d+)/m.exec(text)?.[1] ?? NaN);
}

beforeAll(async () => {
  if (reason) return;
  stateDir = tempStateDir();
  weightsDir = mkdtempSync("/var/tmp/drill-worker-test-");
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-worker" });
  cg = realWorkerCgroup(`wk${process.pid}`);
  setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: LIMIT, swapMax: 0 });
});

afterAll(async () => {
  if (reason) return;
  for (const child of children) child.kill("SIGKILL");
  try {
    await forceCleanup(cg, stateDir);
  } finally {
    await closeRedis(redis);
    await server?.stop();
    rmSync(weightsDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
});

// A test that fails midway leaves its worker running (up to its --duration) with its weights file
// in weightsDir, and every later test's "weights dir empty" check would fail on it: stop them here.
afterEach(async () => {
  const running = [...children];
  for (const child of running) child.kill("SIGTERM");
  await Promise.all(running.map((child) => ("then" in child ? child.catch(() => undefined) : child.exitCode !== null || child.signalCode !== null ? undefined : new Promise((resolve) => child.once("exit", resolve)))));
});

describe.skipIf(reason)("drill worker (real cgroup, real redis)", () => {
  it("processes admitted jobs inside the cgroup: done records, stats, inflight released, malformed to dead, nothing lost", async () => {
    const queue = "w1";
    const jobs = [job(), job({ completion_tokens: 1 }), job({ prompt_tokens: 9000, attempt: 1 }), job({ enqueue_ts: Date.now() - 9000 })];
    await admit(queue, jobs);
    await redis.rpush(queueKeys(queue).admitted, Buffer.from([0x7b, 0xff, 0x7d])); // invalid UTF-8
    const result = await startWorker(queue, "t1", ["--weights", "32M", "--decode-tokens-per-s", "200", "--max-jobs", "5"]);
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stderr).toContain(`in ${cg.limits.dir}`);

    const lines = result.stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.filter((l) => l.event === "done").map((l) => l.id).sort()).toEqual(jobs.map((j) => j.id).sort());
    expect(lines.filter((l) => l.event === "dead")).toHaveLength(1);

    const k = queueKeys(queue);
    const records = await doneRecords(queue);
    expect(records.map((r) => r.id).sort()).toEqual(jobs.map((j) => j.id).sort());
    for (const r of records) {
      const j = jobs.find((x) => x.id === r.id)!;
      expect(r).toMatchObject({ tokens_out: j.completion_tokens, prompt_tokens: j.prompt_tokens, deadline_ms: 8000, attempt: j.attempt, worker: "t1" });
      expect(r.passes).toBe(Math.ceil(j.prompt_tokens / 2048) + j.completion_tokens - 1);
      expect(r.late).toBe(r.first_token_ms > r.deadline_ms);
    }
    // The job that waited 9 s upstream is late; the others are not.
    expect(records.find((r) => r.id === jobs[3]!.id)!.late).toBe(true);
    const stats = await redis.hgetall(k.stats);
    expect(stats).toMatchObject({
      jobs_done: "4",
      jobs_late: "1",
      retry_count: "1",
      dead: "1",
      tokens_out: String(jobs.reduce((sum, j) => sum + j.completion_tokens, 0)),
    });
    expect(await redis.hlen(k.inflight)).toBe(0);
    expect(await redis.hlen(workerKeys(queue).firstToken)).toBe(0);
    expect(await redis.exists(k.working("t1"), workerKeys(queue).heartbeat("t1"))).toBe(0);
    const dead = JSON.parse((await redis.lindex(k.dead, 0))!) as { reason: string };
    expect(dead.reason).toBe("invalid_utf8");
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  // QA: the dead-letter path left the job's packed tokens in <q>:inflight, lowering the gate's cap until a rollback.
  it("a payload it dead-letters releases that job's packed tokens from inflight with the move, and only those", async () => {
    const queue = "w-dead-inflight";
    const k = queueKeys(queue);
    const bad = { ...job(), prompt_tokens: -1 };
    await redis.hset(k.inflight, bad.id, 24000, "other", 4000);
    await redis.rpush(k.admitted, JSON.stringify(bad));
    const result = await startWorker(queue, "t-dead", ["--weights", "16M", "--max-jobs", "1"]);
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stdout).toContain(`"event":"dead","job":"${bad.id}"`);
    expect(await redis.hgetall(k.inflight)).toEqual({ other: "4000" });
    expect(await redis.llen(k.dead)).toBe(1);
    expect(await redis.exists(k.working("t-dead"))).toBe(0);
  });

  it("slows through real reclaim: mean pass time with a thrash hog in the cgroup ≥ 3× without, and the cgroup's PSI total grows", async () => {
    const queue = "w2";
    // 112M of weights fit in 160M beside the worker's own ~30M. Hot weights sit on
    // the active file list, which the kernel keeps at most about half of the
    // page cache: with 64-96M they mostly survive a neighbour's thrash (measured:
    // 2-4x); at 112M they cannot all stay active and every pass refaults.
    const worker = startWorker(queue, "t2", ["--weights", "112M", "--decode-tokens-per-s", "100", "--concurrency", "2", "--duration", "50s"]);
    const k = queueKeys(queue);

    const calm = Array.from({ length: 4 }, () => job());
    await admit(queue, calm);
    await waitFor("the calm jobs", async () => (await redis.llen(k.done)) === calm.length);
    const calmMs = meanPassMs(await doneRecords(queue));
    const psiBefore = psiSomeTotal();

    // The neighbour: a file-backed map larger than the limit, created from inside the cgroup.
    const file = path.join(weightsDir, "hog.bin");
    const cmd = thrashCommand(locatePageToucher(), { file, sizeBytes: 256 * M, holdMs: 30_000, order: "random" });
    // Shorter under pressure (a pass there takes ~50x as long): 4 x 10 passes still average well past 3x.
    const pressed = Array.from({ length: 4 }, () => job({ completion_tokens: 10 }));
    const hog = spawnInCgroup(cg, cmd.file, cmd.args, { stdio: ["ignore", "pipe", "inherit"] });
    children.add(hog);
    try {
      // Admit only once the hog is thrashing: its first `reads` line comes about a second into the
      // random passes after `packed`, when the weights have been pushed out at least once.
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: hog.stdout! }).on("line", (line) => line.startsWith("reads") && resolve());
        hog.once("exit", (code) => reject(new Error(`hog exited ${code} before it thrashed`)));
      });
      await admit(queue, pressed);
      await waitFor("the jobs under pressure", async () => (await redis.llen(k.done)) === calm.length + pressed.length, 40_000);
      const pressedMs = meanPassMs((await doneRecords(queue)).slice(calm.length));
      const psiAfter = psiSomeTotal();
      console.log(`worker pass time: ${calmMs.toFixed(2)} ms mean without the hog, ${pressedMs.toFixed(2)} ms with it (${(pressedMs / calmMs).toFixed(1)}x); cgroup PSI some total +${((psiAfter - psiBefore) / 1000).toFixed(0)} ms`);
      expect(pressedMs).toBeGreaterThanOrEqual(3 * calmMs);
      expect(psiAfter).toBeGreaterThan(psiBefore);
    } finally {
      hog.kill("SIGTERM");
      if (hog.exitCode === null && hog.signalCode === null) await new Promise((resolve) => hog.once("exit", resolve));
      children.delete(hog);
      rmSync(file, { force: true });
    }
    worker.kill("SIGTERM");
    const result = await worker;
    expect(result.exitCode, result.stderr).toBe(143);
    await assertNoJobLost(redis, queue, [...calm, ...pressed].map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  it("SIGKILL mid-job loses nothing: the coprocess exits and unlinks, a new worker with the same id recovers the working list", async () => {
    const queue = "w3";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const jobs = Array.from({ length: 3 }, () => job({ completion_tokens: 400 }));
    await admit(queue, jobs);
    const first = startWorker(queue, "t3", ["--weights", "32M", "--decode-tokens-per-s", "20", "--concurrency", "2"]);
    let stderr = "";
    first.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor("two jobs past their first token", async () => (await redis.hlen(wk.firstToken)) === 2);
    const pid = Number(/worker t3: pid (\d+) in /.exec(stderr)?.[1]);
    expect(pid).toBeGreaterThan(0);
    const weightsFile = await waitFor("the weights file", () => readdirSync(weightsDir).find((n) => n.startsWith("drill-weights-t3-")) ?? null);
    // Taking jobs: its registry entry says ready (what `drill up` waits for), under its live heartbeat.
    const entry = await redis.hget(wk.workers, "t3");
    expect(workerEntryReady(entry, await redis.get(wk.heartbeat("t3"))), entry ?? "no entry").toBe(true);
    const { ready_at: readyAt, started } = JSON.parse(entry!) as { ready_at: number; started: number };
    expect(readyAt).toBeGreaterThanOrEqual(started);

    process.kill(pid, "SIGKILL"); // what the OOM killer does
    const killed = await first;
    expect(killed.exitCode).toBe(1);
    expect(killed.stderr).toMatch(/killed by SIGKILL/);
    // our kill -9, which the cgroup's oom_kill did not count: not blamed on the OOM killer
    expect(killed.stderr).toMatch(/not the OOM killer \(oom_kill unchanged\)/);
    // The serve coprocess sees EOF on its stdin and unlinks its file.
    await waitFor("the weights file to be unlinked", () => !existsSync(path.join(weightsDir, weightsFile)), 10_000);
    expect(await redis.llen(k.working("t3"))).toBe(2);
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));

    const second = await startWorker(queue, "t3", ["--weights", "32M", "--decode-tokens-per-s", "0", "--max-jobs", "3"]);
    expect(second.exitCode, second.stderr).toBe(0);
    expect(second.stderr).toMatch(/gave 2 job\(s\) left in w3:working:t3 by a previous run back to the head of w3:admitted/);
    const records = await doneRecords(queue);
    expect(records.map((r) => r.id).sort()).toEqual(jobs.map((j) => j.id).sort());
    expect(await redis.hget(k.stats, "worker_recovered")).toBe("2");
    expect(await redis.hlen(k.inflight)).toBe(0);
    expect(await redis.hlen(wk.firstToken)).toBe(0);
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  // RELIABILITY 2 through real memory pressure, not a kill -9: a job whose KV
  // cannot fit the cgroup gets the worker OOM-killed mid-job; its list is recovered.
  it("OOM-killed mid-job by the kernel loses nothing: the cgroup's oom_kill rises, a new worker recovers the job", async () => {
    const queue = "w8";
    const k = queueKeys(queue);
    const oomBefore = readOomKillCount(cg.limits);
    expect(oomBefore.ok).toBe(true);
    // 60 000 tokens x 4096 B of KV = 234M in a 160M cgroup.
    const big = job({ prompt_tokens: 60_000, completion_tokens: 8 });
    await admit(queue, [big]);
    const killed = await startWorker(queue, "t8", ["--weights", "16M", "--kv-bytes-per-token", "4096", "--decode-tokens-per-s", "0"]);
    expect(killed.exitCode, killed.stderr).toBe(1);
    const oomAfter = readOomKillCount(cg.limits);
    expect(oomAfter.ok && oomBefore.ok && oomAfter.value > oomBefore.value, `oom_kill ${JSON.stringify(oomBefore)} -> ${JSON.stringify(oomAfter)}`).toBe(true);
    expect(killed.stderr).toMatch(/killed by SIGKILL: the OOM killer/);
    expect(await redis.llen(k.working("t8"))).toBe(1);
    await assertNoJobLost(redis, queue, [big.id]);

    // The same job on a worker whose KV fits: recovered, run once, finished.
    const second = await startWorker(queue, "t8", ["--weights", "16M", "--kv-bytes-per-token", "1024", "--decode-tokens-per-s", "0", "--max-jobs", "1"]);
    expect(second.exitCode, second.stderr).toBe(0);
    expect(second.stderr).toMatch(/gave 1 job\(s\) left in w8:working:t8 by a previous run back to the head of w8:admitted/);
    expect((await doneRecords(queue)).map((r) => r.id)).toEqual([big.id]);
    expect(await redis.hlen(k.inflight)).toBe(0);
    await assertNoJobLost(redis, queue, [big.id]);
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  // QA: SIGTERM within ~0.3 s of the start killed the worker before it had its handler, and
  // the launcher said "killed by SIGTERM" and exited 1, as for somebody else's kill.
  it("SIGTERM while the worker inside is still starting: exit 143, saying the stop was passed on", async () => {
    const worker = startWorker("w-early", "early", ["--weights", "8M"]);
    // The moment the launcher's child is in the cgroup, before its node has started.
    await waitFor("the worker in the cgroup", () => readFileSync(path.join(cg.limits.dir, "cgroup.procs"), "utf8").trim() !== "", 20_000);
    worker.kill("SIGTERM");
    const r = await worker;
    expect(r.exitCode, r.stderr).toBe(143);
    expect(r.stderr).not.toMatch(/was killed by SIGTERM/);
    if (!/stopped \(signal\)/.test(r.stderr)) expect(r.stderr).toMatch(/drill: worker pid \d+ stopped by the SIGTERM passed on to it before it could stop by itself/);
  });

  // QA: a closed terminal's SIGHUP and a `timeout`'s came as two: the second SIGKILLed the worker mid give-back, its jobs left in its working list.
  it("SIGHUP twice while it holds jobs: exit 129, every job given back (only a second Ctrl-C kills)", async () => {
    const queue = "w-hup";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const jobs = Array.from({ length: 2 }, () => job({ completion_tokens: 1000 }));
    await admit(queue, jobs);
    const worker = startWorker(queue, "hup", ["--weights", "8M", "--decode-tokens-per-s", "5"]);
    await waitFor("both jobs taken", async () => (await redis.llen(k.working("hup"))) === 2, 30_000);
    worker.kill("SIGHUP");
    // Two deliveries, not one merged pending signal: the second comes while the first's stop is under way.
    await new Promise((resolve) => setTimeout(resolve, 5));
    worker.kill("SIGHUP");
    const r = await worker;
    expect(r.exitCode, `${String(r.signal)} ${r.stderr}`).toBe(129);
    expect(r.stderr).not.toContain("then SIGKILL");
    expect(await redis.exists(k.working("hup"), wk.heartbeat("hup"))).toBe(0);
    expect((await redis.lrange(k.admitted, 0, -1)).length).toBe(2);
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
  });

  it("exits by itself when its launcher dies, and at --duration: unfinished jobs go back to the head of admitted", async () => {
    const queue = "w4";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const jobs = Array.from({ length: 2 }, () => job({ completion_tokens: 1000 }));
    await admit(queue, jobs);

    const first = startWorker(queue, "t4", ["--weights", "32M", "--decode-tokens-per-s", "20"]);
    let stderr = "";
    first.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor("both jobs past their first token", async () => (await redis.hlen(wk.firstToken)) === 2);
    const inner = Number(/worker t4: pid (\d+) in /.exec(stderr)?.[1]);
    first.kill("SIGKILL"); // the launcher outside the cgroup, not the worker
    await first;
    await waitFor("the inner worker to exit", () => {
      try {
        process.kill(inner, 0);
        return false;
      } catch {
        return true;
      }
    }, 15_000);
    // QA: it said "interrupted by SIGTERM", which nobody had sent.
    await waitFor("the inner worker's last line", () => /launcher .* is gone/.test(stderr), 5000);
    expect(stderr).not.toMatch(/interrupted by SIGTERM/);
    expect(await redis.llen(k.admitted)).toBe(2);
    expect(await redis.exists(k.working("t4"), wk.heartbeat("t4"))).toBe(0);
    expect(await redis.hlen(wk.firstToken)).toBe(0);
    // Given back unmarked: the sidecar sees them waiting for their first token again (a first token they had is kept apart, for the report).
    for (const payload of await redis.lrange(k.admitted, 0, -1)) expect(JSON.parse(payload)).not.toHaveProperty("first_token_ts");
    expect(readdirSync(weightsDir)).toEqual([]);

    const timed = await startWorker(queue, "t4", ["--weights", "32M", "--decode-tokens-per-s", "20", "--duration", "2s"]);
    expect(timed.exitCode, timed.stderr).toBe(0);
    expect(timed.stderr).toMatch(/stopped \(duration\)/);
    expect((await redis.lrange(k.admitted, 0, -1)).map((p) => (JSON.parse(p) as Job).id)).toEqual(jobs.map((j) => j.id));
    expect(await redis.hlen(k.inflight)).toBe(2); // still admitted: their packed tokens stay counted
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  it("a Redis outage with --concurrency 1: two jobs lost BLMOVE replies left in the working list and the job taken when Redis is back run one at a time, strays first, each once, tokens counted once", async () => {
    const queue = "w5";
    const k = queueKeys(queue);
    const lost = [job({ completion_tokens: 7 }), job({ completion_tokens: 12 })];
    const taken = job({ completion_tokens: 30 });
    const all = [...lost, taken];
    const worker = startWorker(queue, "t5", ["--weights", "32M", "--decode-tokens-per-s", "0", "--concurrency", "1", "--max-jobs", "3"]);
    await outageWithStrays(queue, "t5", worker, taken, lost);

    const result = await worker;
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/worker t5: redis back after/);
    expect(result.stderr).not.toMatch(/not recorded twice/);
    const summary = summaryLine(result.stderr, "t5");
    expect(summary).toMatch(new RegExp(`stopped \\(max_jobs\\): taken=3 done=3 .*tokens=${all.reduce((sum, j) => sum + j.completion_tokens, 0)}\\b.* given_back=0\\b`));
    const lines = result.stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    // Each once, in the order they were taken: the strays (older) before the new one.
    expect(lines.filter((l) => l.event === "done").map((l) => l.id)).toEqual(all.map((j) => j.id));
    const records = await doneRecords(queue);
    expect(records.map((r) => r.id)).toEqual(all.map((j) => j.id));
    // Never two in flight: jobs in flight together share passes (one pass serves every
    // waiting job), so the worker's pass count equals the jobs' summed passes only
    // when each pass served one job; and no job's first token precedes the previous one's done.
    expect(Number(/ passes=(\d+)/.exec(summary)?.[1])).toBe(records.reduce((sum, r) => sum + r.passes, 0));
    for (let i = 1; i < records.length; i++) expect(records[i]!.first_token_ts).toBeGreaterThanOrEqual(records[i - 1]!.done_ts);
    expect(await redis.hget(k.stats, "tokens_out")).toBe(String(all.reduce((sum, j) => sum + j.completion_tokens, 0)));
    expect(await redis.hget(k.stats, "jobs_done")).toBe("3");
    expect(await redis.hlen(k.inflight)).toBe(0);
    await assertNoJobLost(redis, queue, all.map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  it("a Redis outage with --max-jobs 2: the two strays it already holds run and count towards it; the job taken on reconnect goes back to the head of admitted unstarted", async () => {
    const queue = "w6";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const lost = [job({ completion_tokens: 7 }), job({ completion_tokens: 12 })];
    const taken = job({ completion_tokens: 30 });
    const worker = startWorker(queue, "t6", ["--weights", "32M", "--decode-tokens-per-s", "0", "--max-jobs", "2"]);
    await outageWithStrays(queue, "t6", worker, taken, lost);

    const result = await worker;
    expect(result.exitCode, result.stderr).toBe(0);
    expect(summaryLine(result.stderr, "t6")).toMatch(new RegExp(`stopped \\(max_jobs\\): taken=2 done=2 .*tokens=${lost[0]!.completion_tokens + lost[1]!.completion_tokens}\\b.* given_back=1\\b`));
    expect(result.stderr).toMatch(/worker t6: --max-jobs 2 reached; 1 job\(s\) in w6:working:t6 not started go back with the stop/);
    expect(result.stderr).toMatch(/worker t6: gave 1 unfinished job\(s\) back to the head of w6:admitted/);
    expect((await doneRecords(queue)).map((r) => r.id).sort()).toEqual(lost.map((j) => j.id).sort());
    expect(await redis.lrangeBuffer(k.admitted, 0, -1)).toEqual([encodeJob(taken)]); // byte for byte, unstarted
    expect(await redis.hkeys(k.inflight)).toEqual([taken.id]); // still admitted: its packed tokens stay counted
    expect(await redis.exists(k.working("t6"), wk.heartbeat("t6"))).toBe(0);
    expect(await redis.hlen(wk.firstToken)).toBe(0);
    await assertNoJobLost(redis, queue, [...lost, taken].map((j) => j.id));
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  // QA: `cgroup teardown` (and rollback's cgroup step) SIGKILLed the worker and
  // its weights toucher together: the jobs it held stayed in its working list
  // (their tokens in flight, so the next gate rejected good jobs) and its
  // weights file stayed in the weights dir. SIGTERM first, then the kill.
  it("cgroup teardown stops a worker as SIGTERM would: its jobs back on admitted, its weights file unlinked, then the cgroup removed", async () => {
    const queue = "w7";
    const k = queueKeys(queue);
    const wk = workerKeys(queue);
    const name = `wkt${process.pid}`;
    const env = { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir };
    const setup = await execa("node", [drillBin, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "160M"], { reject: false, env });
    expect(setup.exitCode, setup.stderr).toBe(0);
    const jobs = Array.from({ length: 2 }, () => job({ completion_tokens: 1000 }));
    await admit(queue, jobs);
    const worker = execa("node", [drillBin, "--json", "--redis", server.url, "worker", "--name", name, "--parent", "self", "--queue", queue, "--worker-id", "t7",
      "--weights-dir", weightsDir, "--weights", "32M", "--kv-bytes-per-token", "256", "--decode-tokens-per-s", "20"], { reject: false, env, timeout: 60_000, buffer: true });
    children.add(worker);
    try {
      await waitFor("both jobs past their first token", async () => (await redis.hlen(wk.firstToken)) === 2);
      await waitFor("the weights file", () => readdirSync(weightsDir).find((n) => n.startsWith("drill-weights-t7-")) ?? null);
      const teardown = await execa("node", [drillBin, "cgroup", "teardown", "--parent", "self", "--name", name], { reject: false, env, timeout: 60_000 });
      expect(teardown.exitCode, teardown.stdout + teardown.stderr).toBe(0);
      await worker;
      expect(await redis.llen(k.working("t7"))).toBe(0);
      expect((await redis.lrange(k.admitted, 0, -1)).map((p) => (JSON.parse(p) as Job).id).sort()).toEqual(jobs.map((j) => j.id).sort());
      expect(readdirSync(weightsDir).filter((n) => n.startsWith("drill-weights-t7-"))).toEqual([]);
      expect(teardown.stdout).toMatch(/^how: sigterm/m);
      await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
    } finally {
      children.delete(worker);
      await execa("node", [drillBin, "cgroup", "teardown", "--parent", "self", "--name", name], { reject: false, env });
      await redis.del(k.admitted, k.inflight);
    }
  });
});
