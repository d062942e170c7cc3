// runWorker's stop against a real redis-server (a fake weights coprocess): every
// cleanup step runs even when one of them fails.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { decodeJob, encodeJob, MAX_PAYLOAD_BYTES } from "../../src/queue/job.js";
import { defaultWorkerConfig, givenBackPayload, markFirstToken } from "../../src/worker/plan.js";
import { runWorker, type Weights, type WorkerOptions } from "../../src/worker/run.js";
import { doneScript, workerKeys } from "../../src/worker/scripts.js";
import { startReplyCutProxy } from "../helpers/replyCutProxy.js";
import { startRedisServer, untilBlockedInBlmove, untilClientGone, type RedisServer } from "../helpers/redisServer.js";
import { asTaken } from "../helpers/payloads.js";

let server: RedisServer;
let client: Redis;
let weightsDir = "";
beforeAll(async () => {
  server = await startRedisServer();
  client = new Redis(server.url);
  // One test kills the server under it: its reconnects are expected, not "Unhandled error event" noise.
  client.on("error", () => {});
  weightsDir = mkdtempSync(path.join(tmpdir(), "drill-worker-cleanup-"));
});
afterAll(async () => {
  client.disconnect();
  await server.stop();
  rmSync(weightsDir, { recursive: true, force: true });
});

async function clientNames(): Promise<string[]> {
  const list = (await client.client("LIST")) as string;
  return list.split("\n").map((line) => /\bname=(\S*)/.exec(line)?.[1] ?? "").filter((name) => name !== "");
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`not true within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("runWorker's stop", () => {
  it("weights that cannot be unlinked (EACCES): said, and the signal listener and the Redis connection are still released", async () => {
    const stopped = new AbortController();
    stopped.abort(); // stops right after the weights are up
    const removeListener = vi.spyOn(stopped.signal, "removeEventListener");
    const file = path.join(weightsDir, "w1.weights");
    const weights: Weights = {
      pid: 1,
      file,
      fallback: false,
      pass: () => Promise.resolve(1),
      close: () => Promise.reject(new Error(`EACCES: permission denied, rm '${file}'`)),
    };
    const err: string[] = [];
    const summary = await runWorker(
      { queue: "cleanup", workerId: "w1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    expect(summary.stoppedBy).toBe("signal");
    expect(err.join("\n")).toContain(`could not remove its weights ${file} (EACCES`);
    expect(removeListener).toHaveBeenCalledWith("abort", expect.any(Function));
    // closeRedis sent QUIT: the server drops the connection right after its reply.
    await waitFor(async () => !(await clientNames()).includes("drill-worker:w1"));
  });

  // The recovery script records in <q>:stats, <q>:first_token and <q>:workers; one of
  // the wrong type refused it, and the stop said 'could not give back' and left the
  // jobs in <q>:working:<id>, a list nobody reads (every recovery is refused the same).
  for (const [name, key] of [
    ["stats", (queue: string) => workerKeys(queue).queue.stats],
    ["first_token", (queue: string) => workerKeys(queue).firstToken],
  ] as const) {
    it(`a stop while <q>:${name} is a string gives the jobs back to the head of admitted as taken, in order, once, unrecorded`, async () => {
      const queue = `strand-${name}`;
      const wk = workerKeys(queue);
      const k = wk.queue;
      const now = Date.now();
      const payloads = ["1", "2"].map((id) =>
        encodeJob({ id, prompt_tokens: 10, completion_tokens: 100_000, files: 1, enqueue_ts: now, deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }),
      );
      const stopped = new AbortController();
      const weights: Weights = { pid: 1, file: path.join(weightsDir, `${name}.weights`), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 5)), close: () => Promise.resolve() };
      const err: string[] = [];
      const run = runWorker(
        { queue, workerId: "s1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16, concurrency: 2 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
        { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
      );
      try {
        // The key goes bad while it runs (at its start it refuses), before it takes the jobs.
        await waitFor(async () => ((await client.hget(wk.workers, "s1")) ?? "").includes("ready_at"));
        await client.set(key(queue), "hello");
        for (const payload of payloads) await client.rpush(k.admitted, payload);
        await waitFor(async () => (await client.llen(k.working("s1"))) === 2);
        // Both past their first token: marked in the working list where <q>:first_token allows it.
        if (name === "first_token") await waitFor(() => Promise.resolve(err.filter((l) => l.includes("could not publish its first token")).length === 2));
        else await waitFor(async () => (await client.hlen(wk.firstToken)) === 2);
      } finally {
        stopped.abort();
      }
      const summary = await run;
      const said = err.join("\n");
      expect(said).not.toContain("could not give back");
      expect(said).toContain(`worker s1: gave 2 unfinished job(s) back to the head of ${k.admitted} as taken, unrecorded (${key(queue)} is a string, not a hash`);
      expect(summary.givenBackAtStop).toBe(2);
      expect((await client.lrangeBuffer(k.admitted, 0, -1)).map(asTaken)).toEqual(payloads);
      expect(await client.exists(k.working("s1"), wk.heartbeat("s1"))).toBe(0);
      expect(await client.get(key(queue))).toBe("hello");
      // Given back, they wait for their first token again: no entry left for watch or report to read as seen.
      if (name === "stats") expect(await client.hlen(wk.firstToken)).toBe(0);
    });
  }

  // A dead peer's list was recovered by the same script every 5 s: each refusal went
  // to the take loop's catch, said as 'redis unavailable (...)' (Redis was fine), and
  // the peer's jobs stayed in its working list, where nobody reads them.
  for (const [name, key] of [
    ["stats", (queue: string) => workerKeys(queue).queue.stats],
    ["first_token", (queue: string) => workerKeys(queue).firstToken],
    ["workers", (queue: string) => workerKeys(queue).workers],
  ] as const) {
    it(`a dead peer's list while <q>:${name} is a string goes back to the head of admitted as taken, the key named once, no outage said, and jobs still taken`, async () => {
      const queue = `peer-${name}`;
      const wk = workerKeys(queue);
      const k = wk.queue;
      const now = Date.now();
      const payloads = ["1", "2"].map((id) =>
        encodeJob({ id, prompt_tokens: 10, completion_tokens: 100_000, files: 1, enqueue_ts: now, deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }),
      );
      const stopped = new AbortController();
      const weights: Weights = { pid: 1, file: path.join(weightsDir, `peer-${name}.weights`), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 5)), close: () => Promise.resolve() };
      const err: string[] = [];
      const run = runWorker(
        { queue, workerId: "p1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16, concurrency: 2 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, peerRecoveryMs: 100 },
        { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
      );
      const refusal = `${key(queue)} is a string, not a hash (drill never writes that there)`;
      try {
        await waitFor(async () => ((await client.hget(wk.workers, "p1")) ?? "").includes("ready_at"));
        // The key goes bad while it runs; then a peer (no heartbeat: dead) is found holding two jobs, one past its first token.
        await client.del(key(queue));
        await client.set(key(queue), "hello");
        if (name !== "first_token") await client.hset(wk.firstToken, "1", String(now));
        await client.rpush(k.working("dead1"), ...payloads);
        // Taken again by p1 from the head of admitted; several recovery rounds pass meanwhile.
        await waitFor(async () => (await client.exists(k.working("dead1"))) === 0 && (await client.llen(k.working("p1"))) === 2, 5000);
        await new Promise((resolve) => setTimeout(resolve, 600));
      } finally {
        stopped.abort();
      }
      await run;
      const said = err.join("\n");
      expect(said).not.toContain("redis unavailable");
      expect(err.filter((l) => l.includes(`as taken, unrecorded (${refusal})`))).toEqual([
        `worker p1: gave 2 job(s) of dead worker dead1 (${k.working("dead1")}) back to the head of ${k.admitted} as taken, unrecorded (${refusal})`,
        `worker p1: gave 2 unfinished job(s) back to the head of ${k.admitted} as taken, unrecorded (${refusal})`,
      ]);
      expect((await client.lrangeBuffer(k.admitted, 0, -1)).map(asTaken)).toEqual(payloads);
      expect(await client.exists(k.working("dead1"), k.working("p1"), wk.heartbeat("p1"))).toBe(0);
      expect(await client.get(key(queue))).toBe("hello");
      if (name !== "first_token") expect(await client.hlen(wk.firstToken)).toBe(0);
      if (name !== "workers") expect(await client.hexists(wk.workers, "dead1")).toBe(0);
    });
  }

  it("a dead peer's working list of another type is named once, not said as a Redis outage, and jobs are still taken", async () => {
    const queue = "peer-list";
    const wk = workerKeys(queue);
    const k = wk.queue;
    const payload = encodeJob({ id: "1", prompt_tokens: 10, completion_tokens: 100_000, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" });
    const stopped = new AbortController();
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "peer-list.weights"), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 5)), close: () => Promise.resolve() };
    const err: string[] = [];
    await client.set(k.working("dead2"), "hello");
    const run = runWorker(
      { queue, workerId: "p2", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, peerRecoveryMs: 100 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    try {
      await waitFor(async () => ((await client.hget(wk.workers, "p2")) ?? "").includes("ready_at"));
      await client.rpush(k.admitted, payload);
      await waitFor(async () => (await client.llen(k.working("p2"))) === 1, 5000);
      await new Promise((resolve) => setTimeout(resolve, 600));
    } finally {
      stopped.abort();
    }
    await run;
    expect(err.join("\n")).not.toContain("redis unavailable");
    expect(err.filter((l) => l.includes("dead2"))).toEqual([
      `worker p2: could not recover ${k.working("dead2")} of dead worker dead2 (${k.working("dead2")} is a string, not a list (drill never writes that there)); its jobs stay there until that key is fixed`,
    ]);
    expect((await client.lrangeBuffer(k.admitted, 0, -1)).map(asTaken)).toEqual([payload]);
  });

  // Its start-up give-back of a previous run's list was refused the same way and the
  // error went out bare (WRONGTYPE for <q>:workers); a worker that started anyway could
  // record no job done. Now: the list goes back unrecorded, then a refusal naming the key.
  for (const [name, key] of [
    ["stats", (queue: string) => workerKeys(queue).queue.stats],
    ["first_token", (queue: string) => workerKeys(queue).firstToken],
    ["workers", (queue: string) => workerKeys(queue).workers],
  ] as const) {
    it(`a start while <q>:${name} is a string gives the previous run's list back unrecorded, then refuses (exit 2) naming the key, nothing taken`, async () => {
      const queue = `start-${name}`;
      const wk = workerKeys(queue);
      const k = wk.queue;
      await client.set(key(queue), "hello");
      const now = Date.now();
      const payloads = ["1", "2"].map((id) =>
        encodeJob({ id, prompt_tokens: 10, completion_tokens: 100_000, files: 1, enqueue_ts: now, deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }),
      );
      await client.rpush(k.working("b1"), ...payloads);
      if (name !== "first_token") await client.hset(wk.firstToken, "1", String(now));
      const startWeights = vi.fn(() => Promise.resolve({ pid: 1, file: path.join(weightsDir, `start-${name}.weights`), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() }));
      const err: string[] = [];
      const refusal = `${key(queue)} is a string, not a hash (drill never writes that there)`;
      const run = runWorker(
        { queue, workerId: "b1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
        { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: new AbortController().signal, startWeights },
      );
      await expect(run).rejects.toMatchObject({ exitCode: 2, message: expect.stringContaining(`worker b1: ${refusal}`) as unknown });
      expect(err).toContain(`worker b1: gave 2 job(s) left in ${k.working("b1")} by a previous run back to the head of ${k.admitted} as taken, unrecorded (${refusal})`);
      expect(startWeights).not.toHaveBeenCalled();
      expect((await client.lrangeBuffer(k.admitted, 0, -1)).map(asTaken)).toEqual(payloads);
      expect(await client.exists(k.working("b1"), wk.heartbeat("b1"))).toBe(0);
      expect(await client.get(key(queue))).toBe("hello");
      if (name !== "first_token") expect(await client.hlen(wk.firstToken)).toBe(0);
    });
  }
  it("a stop while it waits for a job does not wait out the take's block (CLIENT UNBLOCK): it returns at once, nothing taken", async () => {
    const queue = "stop-unblocks";
    const wk = workerKeys(queue);
    const stopped = new AbortController();
    const startWeights = vi.fn(() => Promise.resolve({ pid: 1, file: path.join(weightsDir, "stop-unblocks.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() }));
    // A 30 s block: without the unblock the worker would outlive this test's timeout.
    const run = runWorker(
      { queue, workerId: "u1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 30_000 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: () => undefined, signal: stopped.signal, startWeights },
    );
    await untilBlockedInBlmove(client, "the worker", { name: "drill-worker-take:u1" });
    const started = Date.now();
    stopped.abort();
    await run;
    expect(Date.now() - started, "the stop waited out the block").toBeLessThan(5000);
    await client.rpush(wk.queue.admitted, "after-the-stop");
    expect(await client.lrange(wk.queue.admitted, 0, -1)).toEqual(["after-the-stop"]);
    expect(await client.exists(wk.queue.working("u1"))).toBe(0);
  });

  it("a stop while redis-server stays paused: the take ends within its grace, nothing is retried, the give-back times out and says so", async () => {
    const queue = "stop-paused";
    const wk = workerKeys(queue);
    const stopped = new AbortController();
    const err: string[] = [];
    const startWeights = vi.fn(() => Promise.resolve({ pid: 1, file: path.join(weightsDir, "stop-paused.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() }));
    const run = runWorker(
      { queue, workerId: "p1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 30_000 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights },
    );
    await untilBlockedInBlmove(client, "the worker", { name: "drill-worker-take:p1" });
    server.kill("SIGSTOP");
    let stoppedInMs: number;
    try {
      const started = Date.now();
      stopped.abort();
      await run;
      stoppedInMs = Date.now() - started;
    } finally {
      server.kill("SIGCONT");
    }
    // The take's grace (0.5 s) and the give-back's 5 s command timeout; the watchdog alone would be 32 s.
    expect(stoppedInMs, "the stop waited for the take's watchdog").toBeLessThan(15_000);
    expect(err.filter((e) => /retrying|watchdog|not retried/.test(e)), err.join("\n")).toEqual([]);
    expect(err).toContainEqual(expect.stringMatching(/^worker p1: could not give back /));
    // Once it answers, nothing was taken: the stop closed the take's connection (the server drops it,
    // and its BLMOVE, as it wakes; under load a push could otherwise reach it first), and a job pushed now stays admitted.
    await untilClientGone(client, "the stopped worker", "drill-worker-take:p1");
    await client.rpush(wk.queue.admitted, "after-the-stop");
    expect(await client.lrange(wk.queue.admitted, 0, -1)).toEqual(["after-the-stop"]);
    expect(await client.exists(wk.queue.working("p1"))).toBe(0);
  });

  // QA: a job that finished as the stop came, with Redis paused, retried its done
  // record through the stop, then failed the worker (exit 1, no summary).
  it("a job that finishes during a stop with redis-server paused: said, not a failure; the job is on one list once it answers", async () => {
    const queue = "done-paused";
    const wk = workerKeys(queue);
    const stopped = new AbortController();
    const err: string[] = [];
    // One prefill pass (its token is the first) and one decode pass, the last, which waits for the test.
    let passes = 0;
    let lastHeld!: () => void;
    const held = new Promise<void>((resolve) => (lastHeld = resolve));
    let releaseLast!: () => void;
    const weights: Weights = {
      pid: 1,
      file: path.join(weightsDir, "done-paused.weights"),
      fallback: false,
      pass: () => {
        if (++passes < 2) return Promise.resolve(1);
        lastHeld();
        return new Promise<number>((resolve) => (releaseLast = () => resolve(1)));
      },
      close: () => Promise.resolve(),
    };
    const job = { id: "d1", prompt_tokens: 100, completion_tokens: 2, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" };
    await client.rpush(wk.queue.admitted, encodeJob(job));
    const run = runWorker(
      { queue, workerId: "d1w", config: { ...defaultWorkerConfig, weightsBytes: 8192, decodeTokensPerS: 0 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, commandTimeoutMs: 300 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    await held;
    server.kill("SIGSTOP");
    try {
      stopped.abort();
      releaseLast();
      // Resolves: a record that could not reach Redis during a stop is not the worker failing.
      expect(await run).toMatchObject({ stoppedBy: "signal" });
    } finally {
      server.kill("SIGCONT");
    }
    expect(err).toContainEqual(expect.stringMatching(/^worker d1w: job=d1 finished, but its done record did not reach redis before the stop \(Redis at 127\.0\.0\.1:\d+ did not answer within \d+m?s: check whether it is paused \(CLIENT PAUSE, SIGSTOP\) or overloaded\)/));
    // Once it answers, the tries that timed out run (a script it has not cached yet is NOSCRIPT, a
    // no-op): the job is on exactly one list, done, back in admitted, or still in the working list
    // that the next worker recovers once this one's heartbeat expires. Never two, never none.
    await new Promise((r) => setTimeout(r, 300));
    const ids = async (key: string) => (await client.lrange(key, 0, -1)).map((entry) => (JSON.parse(entry) as { id: string }).id);
    const where = [...(await ids(wk.queue.done)), ...(await ids(wk.queue.admitted)), ...(await ids(wk.queue.working("d1w")))];
    expect(where).toEqual(["d1"]);
  });

  /**
   * A worker running two jobs of `completionTokens` (5 ms passes, no decode pacing) from
   * `queue`; `running` resolves once they are well under way (20 passes).
   */
  const twoJobsRunning = async (queue: string, workerId: string, completionTokens: number, options: Partial<WorkerOptions>) => {
    const stopped = new AbortController();
    const err: string[] = [];
    let passes = 0;
    let underWay!: () => void;
    const running = new Promise<void>((resolve) => (underWay = resolve));
    const weights: Weights = {
      pid: 1,
      file: path.join(weightsDir, `${queue}.weights`),
      fallback: false,
      pass: () => {
        if (++passes === 20) underWay();
        return new Promise<number>((resolve) => setTimeout(() => resolve(1), 5));
      },
      close: () => Promise.resolve(),
    };
    const ids = [`${workerId}-a`, `${workerId}-b`];
    const jobs = ids.map((id) => encodeJob({ id, prompt_tokens: 100, completion_tokens: completionTokens, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }));
    await client.rpush(workerKeys(queue).queue.admitted, ...jobs);
    const run = runWorker(
      { queue, workerId, config: { ...defaultWorkerConfig, weightsBytes: 8192, decodeTokensPerS: 0 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, ...options },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    return { ids, err, running, run, stop: () => stopped.abort() };
  };

  // QA: Ctrl-C with redis-server paused took ~9 s: the last tokens_out count, then the give-back,
  // each waited out the command timeout (set to 120 s here, past the test's 60 s).
  it("a stop with redis-server paused and jobs running waits only the stop's reply time, and names the list that holds them", async () => {
    const wk = workerKeys("stop-paused-running");
    const worker = await twoJobsRunning("stop-paused-running", "s1w", 10_000, { commandTimeoutMs: 120_000 });
    await worker.running;
    server.kill("SIGSTOP");
    try {
      worker.stop();
      expect(await worker.run).toMatchObject({ stoppedBy: "signal", taken: 2, done: 0 });
    } finally {
      server.kill("SIGCONT");
    }
    expect(worker.err).toContainEqual(
      `worker s1w: could not give back ${wk.queue.working("s1w")} (Redis at 127.0.0.1:${server.port} did not answer within 1s: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded); another worker recovers it once ${wk.heartbeat("s1w")} expires, or rollback drains it`,
    );
    // Once it answers, the stopped jobs are where the line says, in the order taken.
    const ids = (await client.lrange(wk.queue.working("s1w"), 0, -1)).map((entry) => (JSON.parse(entry) as { id: string }).id);
    expect(ids).toEqual(worker.ids);
  });

  // QA: "redis back after 2.0 s" for a 5 s DEBUG SLEEP: the outage counted from the watchdog giving up, seconds in.
  it("a pause while it waits for a job: the outage it says counts from the take that got no reply", async () => {
    const stopped = new AbortController();
    const err: string[] = [];
    const startWeights = vi.fn(() => Promise.resolve({ pid: 1, file: path.join(weightsDir, "pause-said.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() }));
    const run = runWorker(
      { queue: "pause-said", workerId: "ps1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 300 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights },
    );
    try {
      await untilBlockedInBlmove(client, "the worker", { name: "drill-worker-take:ps1" });
      server.kill("SIGSTOP");
      try {
        await new Promise((r) => setTimeout(r, 3000));
      } finally {
        server.kill("SIGCONT");
      }
      await waitFor(() => Promise.resolve(err.some((l) => l.startsWith("worker ps1: redis back after "))), 15_000);
      const back = err.find((l) => l.startsWith("worker ps1: redis back after "))!;
      expect(Number(/after (\d+\.\d) s/.exec(back)![1]), err.join("\n")).toBeGreaterThanOrEqual(2.9);
    } finally {
      stopped.abort();
      await run;
    }
  });

  // QA: the tokens_out flushes a pause timed out were counted again by the next flush; Redis ran
  // the timed-out ones too once it woke, so tokens_out overcounted by exactly what it said was lost.
  it("a pause past the command timeout while jobs make tokens: tokens_out counts each token once", async () => {
    const wk = workerKeys("tokens-paused");
    const worker = await twoJobsRunning("tokens-paused", "t1w", 100_000, { commandTimeoutMs: 300, statsFlushMs: 50 });
    await worker.running;
    server.kill("SIGSTOP");
    try {
      // Past the 300 ms command timeout: the flushes sent meanwhile time out, and run when it wakes.
      await new Promise((r) => setTimeout(r, 1200));
    } finally {
      server.kill("SIGCONT");
    }
    await new Promise((r) => setTimeout(r, 500));
    worker.stop();
    const summary = await worker.run;
    expect(summary.tokensOut).toBeGreaterThan(0);
    expect(Number(await client.hget(wk.queue.stats, "tokens_out")), worker.err.join("\n")).toBe(summary.tokensOut);
  });

  // The registry's ready mark is retried through an outage for ~30 s; it said nothing
  // meanwhile (the loop's "redis unavailable" comes only once it takes jobs).
  it("an outage while it marks itself ready is said at once and its end too, and the mark lands", async () => {
    const stopped = new AbortController();
    const err: string[] = [];
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "r1.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() };
    const run = runWorker(
      { queue: "ready-outage", workerId: "r1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
      {
        redisUrl: server.url,
        roots: new HostRoots(),
        where: "test",
        out: () => undefined,
        err: (line) => err.push(line),
        signal: stopped.signal,
        // Redis dies between the weights and the ready mark.
        startWeights: () => {
          server.kill("SIGKILL");
          return Promise.resolve(weights);
        },
      },
    );
    try {
      await waitFor(() => Promise.resolve(err.some((l) => l.startsWith("worker r1: redis unavailable (") && l.endsWith("marking it ready in ready-outage:workers; retrying"))));
      await server.restart();
      await waitFor(() => Promise.resolve(err.some((l) => /^worker r1: redis back after \d+\.\d s; marked ready$/.test(l))));
      const entry = JSON.parse((await client.hget("ready-outage:workers", "r1")) ?? "{}") as { ready_at?: number };
      expect(entry.ready_at).toEqual(expect.any(Number));
    } finally {
      stopped.abort();
    }
    expect((await run).stoppedBy).toBe("signal");
  });
});

describe("runWorker with a key of another type while it runs", () => {
  const job = (id: string, completionTokens: number) =>
    encodeJob({ id, prompt_tokens: 10, completion_tokens: completionTokens, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" });
  const start = (queue: string, workerId: string, err: string[], signal: AbortSignal) =>
    runWorker(
      { queue, workerId, config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
      {
        redisUrl: server.url,
        roots: new HostRoots(),
        where: "test",
        out: () => undefined,
        err: (line) => err.push(line),
        signal,
        startWeights: () => Promise.resolve({ pid: 1, file: path.join(weightsDir, `${queue}.weights`), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 2)), close: () => Promise.resolve() }),
      },
    );
  const ready = (queue: string, workerId: string) => waitFor(async () => ((await client.hget(workerKeys(queue).workers, workerId)) ?? "").includes("ready_at"));

  // The done script refused by <q>:stats a string was re-run ~40 times (~35 s) as if
  // Redis were away; the key does not fix itself.
  it("a done refused by <q>:stats a string fails at once (exit 2) naming the key; the job goes back to the head of admitted", async () => {
    const queue = "refused-done";
    const k = workerKeys(queue).queue;
    const stopped = new AbortController();
    const err: string[] = [];
    const payload = job("1", 3);
    const run = start(queue, "d1", err, stopped.signal);
    const outcome = run.then(
      () => null,
      (e: unknown) => e,
    );
    try {
      await ready(queue, "d1");
      await client.set(k.stats, "hello");
      await client.rpush(k.admitted, payload);
      const startedAt = Date.now();
      const failed = await Promise.race([outcome, new Promise((resolve) => setTimeout(() => resolve("still retrying"), 5000))]);
      expect(failed).toMatchObject({ exitCode: 2, message: expect.stringContaining(`worker d1 failed: ${k.stats} is a string, not a hash (drill never writes that there)`) as unknown });
      expect(Date.now() - startedAt).toBeLessThan(5000);
    } finally {
      stopped.abort();
      await outcome;
    }
    expect(err.join("\n")).not.toContain("redis unavailable");
    expect(err).toContain(`worker d1: gave 1 unfinished job(s) back to the head of ${k.admitted} as taken, unrecorded (${k.stats} is a string, not a hash (drill never writes that there))`);
    expect((await client.lrangeBuffer(k.admitted, 0, -1)).map(asTaken)).toEqual([payload]);
    await client.del(k.stats);
  });

  // BLMOVE from a <q>:admitted of another type: 'redis unavailable (WRONGTYPE ...)',
  // no key named, Redis fine. Like the gate over a ready list of another type, it
  // keeps trying (the key may be fixed), saying so once.
  it("a take refused by <q>:admitted a string is named once, not as an outage; once the key is fixed it takes jobs again", async () => {
    const queue = "refused-take";
    const k = workerKeys(queue).queue;
    const stopped = new AbortController();
    const err: string[] = [];
    const run = start(queue, "t1", err, stopped.signal);
    try {
      await ready(queue, "t1");
      await client.set(k.admitted, "hello");
      await new Promise((resolve) => setTimeout(resolve, 1000)); // many takes
      await client.del(k.admitted);
      await client.rpush(k.admitted, job("1", 100_000));
      await waitFor(async () => (await client.llen(k.working("t1"))) === 1, 5000);
    } finally {
      stopped.abort();
    }
    await run;
    expect(err.join("\n")).not.toContain("redis unavailable");
    expect(err.filter((l) => l.includes("could not take") || l.includes("taking jobs again"))).toEqual([
      `worker t1: could not take jobs from ${k.admitted} into ${k.working("t1")} (${k.admitted} is a string, not a list (drill never writes that there)); waiting until that key is fixed`,
      expect.stringMatching(/^worker t1: taking jobs again after \d+\.\d s$/),
    ]);
  });

  // The same take refused at start: its give-back's refusal went out bare, as an
  // unexpected error with a stack (exit 1).
  it("a start while <q>:admitted is a string refuses (exit 2) naming the key, nothing taken", async () => {
    const queue = "refused-start";
    const k = workerKeys(queue).queue;
    await client.set(k.admitted, "hello");
    const err: string[] = [];
    await expect(start(queue, "a1", err, new AbortController().signal)).rejects.toMatchObject({
      exitCode: 2,
      message: `worker a1: ${k.admitted} is a string, not a list (drill never writes that there): it could not give back nor take jobs; nothing taken. Fix or delete that key, then start it again`,
    });
    expect(err.filter((l) => l.includes("weights"))).toEqual([]);
    await client.del(k.admitted);
  });

  // tokens_out increments refused by <q>:stats a string were kept back in silence,
  // the held count growing with every token.
  it("tokens_out refused by <q>:stats a string is said once; counted once the key is fixed", async () => {
    const queue = "refused-tokens";
    const k = workerKeys(queue).queue;
    const stopped = new AbortController();
    const err: string[] = [];
    const run = start(queue, "k1", err, stopped.signal);
    try {
      await ready(queue, "k1");
      await client.set(k.stats, "hello");
      await client.rpush(k.admitted, job("1", 100_000));
      await waitFor(async () => (await client.llen(k.working("k1"))) === 1, 5000);
      await new Promise((resolve) => setTimeout(resolve, 600)); // several flushes
      await client.del(k.stats);
      await waitFor(async () => Number((await client.hget(k.stats, "tokens_out")) ?? "0") > 0, 5000);
    } finally {
      stopped.abort();
    }
    await run;
    const refusal = `${k.stats} is a string, not a hash (drill never writes that there)`;
    expect(err.filter((l) => l.includes("tokens_out"))).toEqual([
      `worker k1: could not count tokens_out in ${k.stats} (${refusal}); its tokens are held until that key is fixed`,
      expect.stringMatching(new RegExp(`^worker k1: tokens_out counted in ${k.stats} again \\(\\d+ held token\\(s\\) added\\)$`)),
    ]);
  });
});

// QA R 2: a done record Redis refused was retried ~37 s, then the worker exited mid-outage with
// every slot's job unrecorded, silent until then (all slots busy: the take loop says nothing).
describe("runWorker against a Redis that refuses its writes (an ACL here; a full or read-only Redis the same)", () => {
  it("a refused done record is said at once with its fix and retried until it lands; failed heartbeat renewals are said, and when they work again", async () => {
    const queue = "acl-done";
    const k = workerKeys(queue).queue;
    await client.call("ACL", "SETUSER", "wrefused", "on", ">pw", "~*", "&*", "+@all");
    const url = `redis://wrefused:pw@127.0.0.1:${server.port}`;
    const stopped = new AbortController();
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "refused.weights"), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 2)), close: () => Promise.resolve() };
    const err: string[] = [];
    const said = () => Promise.resolve(err.join("\n"));
    const run = runWorker(
      { queue, workerId: "r1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, heartbeatTtlMs: 1500 },
      { redisUrl: url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    try {
      await waitFor(async () => ((await client.hget(workerKeys(queue).workers, "r1")) ?? "").includes("ready_at"));
      await client.call("ACL", "SETUSER", "wrefused", "-rpush", "-set");
      await client.rpush(k.admitted, encodeJob({ id: "1", prompt_tokens: 10, completion_tokens: 5, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }));
      await waitFor(async () => (await said()).includes("job=1 finished; redis refused"));
      await waitFor(async () => (await said()).includes("could not renew heartbeat"));
      await client.call("ACL", "SETUSER", "wrefused", "+rpush", "+set");
      await waitFor(async () => (await said()).includes("job=1 recorded after"));
      await waitFor(async () => /heartbeat \S+ (renewed again after|expired while its renewals failed)/.test(await said()));
    } finally {
      stopped.abort();
    }
    const summary = await run;
    const text = err.join("\n");
    expect(text).toMatch(/worker r1: job=1 finished; redis refused at \S+ recording it \(NOPERM this redis user may not run RPUSH on acl-done:done\b.*\(this redis user may not run that command or touch that key \(ACL\): grant it/);
    expect(text).toMatch(/worker r1: could not renew heartbeat acl-done:workers:r1 \(.*(NOPERM|can't run this command).*\); retrying/);
    expect(summary.done).toBe(1);
    expect(await client.llen(k.done)).toBe(1);
    expect(await client.exists(k.working("r1"))).toBe(0);
  });
});

describe("runWorker refused its worker id's claim", () => {
  it("stops with the refusal and no word of deregistering: its heartbeat was never written", async () => {
    await client.call("ACL", "SETUSER", "noclaim", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval");
    const stopped = new AbortController();
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "noclaim.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() };
    const err: string[] = [];
    const run = runWorker(
      { queue: "noclaim", workerId: "n1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false },
      { redisUrl: `redis://noclaim:pw@127.0.0.1:${server.port}`, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    await expect(run).rejects.toThrow(/NOPERM|can't run this command/);
    expect(err.join("\n")).not.toMatch(/deregister|give back/);
    expect(await client.exists(workerKeys("noclaim").heartbeat("n1"))).toBe(0);
  });
});

// Every try of the done record answered (refused): no try may still land, so the stop line waits for none.
describe("runWorker stopped while its Redis refuses the done record", () => {
  it("says the job goes back with the give-back, not 'unless a try that timed out lands'", async () => {
    const queue = "acl-stop";
    const k = workerKeys(queue).queue;
    await client.call("ACL", "SETUSER", "wrefstop", "on", ">pw", "~*", "&*", "+@all");
    const url = `redis://wrefstop:pw@127.0.0.1:${server.port}`;
    const stopped = new AbortController();
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "refstop.weights"), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 2)), close: () => Promise.resolve() };
    const err: string[] = [];
    const run = runWorker(
      { queue, workerId: "s1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false, blockMs: 100, heartbeatTtlMs: 1500 },
      { redisUrl: url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    try {
      await waitFor(async () => ((await client.hget(workerKeys(queue).workers, "s1")) ?? "").includes("ready_at"));
      await client.call("ACL", "SETUSER", "wrefstop", "-rpush");
      await client.rpush(k.admitted, encodeJob({ id: "1", prompt_tokens: 10, completion_tokens: 5, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }));
      await waitFor(() => Promise.resolve(err.join("\n").includes("job=1 finished; redis refused")));
      stopped.abort();
      await run;
    } finally {
      stopped.abort();
      await client.call("ACL", "SETUSER", "wrefstop", "+rpush");
    }
    const line = err.find((l) => l.includes("did not reach redis before the stop"));
    expect(line, err.join("\n")).toMatch(/^worker s1: job=1 finished, but its done record did not reach redis before the stop \(.*\); it goes back with the give-back$/);
    // Not lost: given back, or left in the worker's list for the next worker or the rollback.
    const held = [...(await client.lrange(k.admitted, 0, -1)), ...(await client.lrange(k.working("s1"), 0, -1))];
    expect(held.map((p) => (JSON.parse(p) as { id: string }).id)).toEqual(["1"]);
  });
});

describe("runWorker when a done record's reply is lost", () => {
  it("the connection cut between the done script's write and its reply: the job is counted done once, said recorded by that try, not as gone from the list", async () => {
    const queue = "lost-done";
    const k = workerKeys(queue).queue;
    await client.script("LOAD", doneScript.source); // loaded: the cut EVALSHA is the run, not a NOSCRIPT
    const proxy = await startReplyCutProxy(server.port);
    const stopped = new AbortController();
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "lost.weights"), fallback: false, pass: () => new Promise((resolve) => setTimeout(() => resolve(1), 2)), close: () => Promise.resolve() };
    const err: string[] = [];
    const run = runWorker(
      { queue, workerId: "l1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16 }, weightsDir, maxJobs: 2, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
      { redisUrl: proxy.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    try {
      await waitFor(async () => ((await client.hget(workerKeys(queue).workers, "l1")) ?? "").includes("ready_at"));
      const cut = proxy.cutReplyTo(doneScript.sha1);
      for (const id of ["1", "2"]) await client.rpush(k.admitted, encodeJob({ id, prompt_tokens: 10, completion_tokens: 3, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }));
      await cut;
      const summary = await run;
      const text = err.join("\n");
      // The cut drops the connection, and with it the reply of every done script then in flight: one job's, or both.
      expect((text.match(/worker l1: job=[12] recorded by a try whose reply was lost \(its record is in lost-done:done\)/g) ?? []).length, text).toBeGreaterThanOrEqual(1);
      expect(text).not.toContain("had left");
      expect(summary.done, text).toBe(2);
      expect(await client.llen(k.done)).toBe(2);
      expect(await client.hget(k.stats, "jobs_done")).toBe("2");
    } finally {
      stopped.abort();
      await run.catch(() => undefined);
      await proxy.close();
    }
  });
});

// The wait for a free slot left its 1 s timer and its listener on the stop signal when a job ended first.
describe("runWorker's wait for a free slot", () => {
  it("leaves no abort listener behind on its stop signal: hundreds of quick jobs, no MaxListenersExceededWarning (QA: 27 listeners at ~150 jobs/s)", async () => {
    const queue = "listeners";
    const jobs = 300;
    const now = Date.now();
    const payloads = Array.from({ length: jobs }, (_, i) =>
      encodeJob({ id: String(i + 1), prompt_tokens: 1, completion_tokens: 1, files: 0, enqueue_ts: now, deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }),
    );
    await client.rpush(workerKeys(queue).queue.admitted, ...payloads);
    const warnings: string[] = [];
    const onWarning = (warning: Error): void => {
      if (warning.name === "MaxListenersExceededWarning") warnings.push(warning.message);
    };
    process.on("warning", onWarning);
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "slots1.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() };
    try {
      const summary = await runWorker(
        { queue, workerId: "slots1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16, decodeTokensPerS: 0, concurrency: 1 }, weightsDir, maxJobs: jobs, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
        { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: () => undefined, signal: new AbortController().signal, startWeights: () => Promise.resolve(weights) },
      );
      expect(summary.done).toBe(jobs);
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings).toEqual([]);
  });
});

// QA: a job of 64 KiB (the gate's largest) was admitted, had its first token
// marked, and was given back (a SIGTERM, a rollback, a restart): the marks a
// give-back keeps made it 42 bytes over, and the next worker sent the admitted
// job to dead as too_large, its packed tokens held in <q>:inflight for good.
describe("runWorker on a job the gate's largest payload", () => {
  it("runs a given-back job of 64 KiB, its first token kept, and releases its packed tokens", async () => {
    const queue = "largest";
    const wk = workerKeys(queue);
    const now = Date.now();
    const job = { id: "big1", prompt_tokens: 100, completion_tokens: 1, files: 0, enqueue_ts: now - 1000, deadline_ms: 600_000, attempt: 0, host_class: "shared-free", pad: "" };
    job.pad = "p".repeat(MAX_PAYLOAD_BYTES - encodeJob(job).length);
    const pushed = encodeJob(job);
    expect(pushed.length).toBe(MAX_PAYLOAD_BYTES);
    expect(decodeJob(pushed, now).ok).toBe(true);
    const givenBack = givenBackPayload(markFirstToken(pushed, now - 500)!);
    await client.rpush(wk.queue.admitted, givenBack);
    await client.hset(wk.queue.inflight, "big1", "100");
    const weights: Weights = { pid: 1, file: path.join(weightsDir, "largest1.weights"), fallback: false, pass: () => Promise.resolve(1), close: () => Promise.resolve() };
    const out: string[] = [];
    const summary = await runWorker(
      { queue, workerId: "largest1", config: { ...defaultWorkerConfig, weightsBytes: 8192, kvBytesPerToken: 16, decodeTokensPerS: 0 }, weightsDir, maxJobs: 1, idleExitMs: null, durationMs: null, json: false, blockMs: 100 },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: (line) => out.push(line), err: () => undefined, signal: new AbortController().signal, startWeights: () => Promise.resolve(weights) },
    );
    expect(out.join("\n")).not.toContain("dead job=big1");
    expect({ done: summary.done, dead: summary.dead }).toEqual({ done: 1, dead: 0 });
    expect(await client.llen(wk.queue.dead)).toBe(0);
    expect(await client.hlen(wk.queue.inflight)).toBe(0);
    const [record] = await client.lrange(wk.queue.done, 0, -1);
    expect(JSON.parse(record!)).toMatchObject({ id: "big1", first_token_ts: now - 500 });
  });
});
