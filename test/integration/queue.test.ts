import { execFileSync } from "node:child_process";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeJob, encodeJob } from "../../src/queue/job.js";
import { DrillQueue, pushScope, pushUntilTaken, unnumberedJob, type JobSpec } from "../../src/queue/queue.js";
import { BlockingMover, closeRedis, connectRedis, runScript, WatchdogTimeout } from "../../src/queue/redis.js";
import { doneScript, firstTokenScript, recoverWorkingScript, workerDeadScript, workerKeys } from "../../src/worker/scripts.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, untilBlockedInBlmove, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let n = 0;
const spec: JobSpec = { promptTokens: 24000, completionTokens: 256, files: 8, deadlineMs: 8000, hostClass: "shared-free" };
const route = { retryHostClass: "dedicated", retryBudget: 3 };

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-queue" });
});
afterAll(async () => {
  await closeRedis(redis);
  await closeRedis(redis); // safe twice
  await server?.stop();
});

/** Every key of a queue with its type and content, to see that nothing changed. */
async function dump(queue: string): Promise<[string, string, string][]> {
  const keys = [queue, ...(await redis.keys(`${queue}:*`))].sort();
  return Promise.all(keys.map(async (key) => [key, await redis.type(key), (await redis.dumpBuffer(key))?.toString("base64") ?? ""] as [string, string, string]));
}

/** A unique queue per test: keys never collide, nothing to clean between tests. */
function freshQueue(): DrillQueue {
  return new DrillQueue(redis, `q${++n}`);
}

async function take(queue: DrillQueue, mover: BlockingMover, gate: string) {
  const payload = await mover.move(queue.keys.ready, queue.keys.processing(gate), 500);
  if (payload === null) return null;
  const decoded = decodeJob(payload);
  if (!decoded.ok) throw new Error(decoded.reason);
  return { gate, payload, job: decoded.job, fingerprint: decoded.fingerprint, nowMs: Date.now() };
}

describe("DrillQueue against a real redis-server", () => {
  it("pushes with INCR ids and takes from the left (oldest first)", async () => {
    const queue = freshQueue();
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await queue.push(spec)).id);
    expect(ids).toEqual(["1", "2", "3"]);
    const mover = new BlockingMover(server.url, { name: "t" });
    const ctx = await take(queue, mover, "g1");
    mover.close();
    mover.close();
    expect(ctx?.job.id).toBe("1");
    expect(await redis.lrange(queue.keys.processing("g1"), 0, -1)).toHaveLength(1);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a push sent again under its token takes no second id and queues no second copy; the payload is encodeJob's", async () => {
    const queue = freshQueue();
    const job = unnumberedJob(spec, 1_764_480_000_123);
    const first = await queue.pushOnce(job, "run.0.0");
    const again = await queue.pushOnce(job, "run.0.0");
    expect(first).toEqual({ job: { id: "1", ...job }, again: false });
    expect(again).toEqual({ job: { id: "1", ...job }, again: true });
    const other = await queue.pushOnce(job, "run.0.1");
    expect(other.job.id).toBe("2");
    expect(await redis.lrangeBuffer(queue.keys.ready, 0, -1)).toEqual([encodeJob(first.job), encodeJob(other.job)]);
    expect(await redis.get(queue.keys.seq)).toBe("2");
    // The tokens are remembered for a while, not forever.
    expect(await redis.pttl(queue.keys.pushes)).toBeGreaterThan(0);
  });

  // QA: up rode out a SIGSTOPped Redis by re-sending INCR, whose timed-out
  // sends all ran when it woke: ids on no list, which report calls lost.
  it("a paused server: the sends that timed out run when it wakes, and the push still takes one id and queues one copy", async () => {
    const queue = freshQueue();
    const client = await connectRedis(server.url, { name: "test-push-paused", commandTimeoutMs: 300 });
    const paused = new DrillQueue(client, queue.keys.queue);
    const failed: string[] = [];
    server.kill("SIGSTOP");
    let outcome;
    try {
      outcome = await pushUntilTaken(paused, unnumberedJob(spec), `${pushScope("test")}.0`, {
        signal: new AbortController().signal,
        delayMs: () => 50,
        sendAgain: (failures) => failures < 20,
        onFailure: (err) => {
          failed.push(err instanceof Error ? err.message : String(err));
          // Three sends wait in the stopped server's socket; the fourth goes to a running one.
          if (failed.length === 3) server.kill("SIGCONT");
        },
      });
    } finally {
      server.kill("SIGCONT");
      await closeRedis(client);
    }
    // Three at least: on a loaded host the woken server's answers to the sends after SIGCONT may
    // outlast the 300 ms too (CI: five). Each of them runs too, and still one id, one copy.
    expect(failed.length).toBeGreaterThanOrEqual(3);
    expect(new Set(failed)).toEqual(new Set(["Command timed out"]));
    expect(outcome.ok && outcome.job.id).toBe("1");
    expect(await redis.get(queue.keys.seq)).toBe("1");
    expect(await redis.llen(queue.keys.ready)).toBe(1);
    expect(await redis.hlen(queue.keys.pushes)).toBe(1);
  });

  it("two gates admitting at once never overshoot the packed-token cap", async () => {
    const queue = freshQueue();
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push((await queue.push({ ...spec, promptTokens: 10_000 })).id);
    const gate = async (name: string) => {
      const mover = new BlockingMover(server.url, { name });
      const admitted: number[] = [];
      for (;;) {
        const ctx = await take(queue, mover, name);
        if (!ctx) break;
        const outcome = await queue.admit(ctx, 32_000);
        if (outcome.kind === "admit") admitted.push(outcome.packed);
        else if (outcome.kind === "reject_packed_tokens") await queue.reject(ctx, "reject_packed_tokens", `packed=${outcome.packed} limit=32000`, route);
        else throw new Error(`unexpected ${outcome.kind}`);
      }
      mover.close();
      return admitted;
    };
    const [a, b] = await Promise.all([gate("ga"), gate("gb")]);
    expect([...(a ?? []), ...(b ?? [])].length).toBe(3);
    expect(await queue.inflightTokens()).toBe(30_000);
    expect(await redis.llen(queue.keys.retry("dedicated"))).toBe(9);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("released tokens let the next job in", async () => {
    const queue = freshQueue();
    const ids = [(await queue.push(spec)).id, (await queue.push(spec)).id];
    const mover = new BlockingMover(server.url, { name: "t" });
    const first = await take(queue, mover, "g");
    expect((await queue.admit(first!, 32_000)).kind).toBe("admit");
    const second = await take(queue, mover, "g");
    expect(await queue.admit(second!, 32_000)).toEqual({ kind: "reject_packed_tokens", packed: 48_000 });
    expect(await queue.releaseTokens("1")).toBe(24_000);
    expect(await queue.releaseTokens("1")).toBeNull();
    expect(await queue.admit(second!, 32_000)).toEqual({ kind: "admit", packed: 24_000 });
    mover.close();
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a nack goes to the retry host class with reason and attempt+1, never back to the queue; past the budget it is dead", async () => {
    const queue = freshQueue();
    const id = (await queue.push(spec)).id;
    const mover = new BlockingMover(server.url, { name: "t" });
    const ctx = await take(queue, mover, "g");
    expect(await queue.reject(ctx!, "reject_host_pressure", "psi=12.40", route)).toEqual({ kind: "applied", route: "retry" });
    const [retried] = await redis.lrange(queue.keys.retry("dedicated"), 0, -1);
    expect(JSON.parse(retried!)).toMatchObject({ id, attempt: 1, reason: "host_pressure", host_class: "dedicated" });
    expect(await redis.llen(queue.keys.ready)).toBe(0);

    // A job already at the budget dies instead of retrying again.
    await queue.pushRaw(encodeJob({ ...ctx!.job, id: "99", attempt: 3 }));
    const tired = await take(queue, mover, "g");
    expect(await queue.reject(tired!, "reject_deadline_slack", "slack_ms=420", route)).toEqual({ kind: "applied", route: "dead" });
    const [dead] = await redis.lrange(queue.keys.dead, 0, -1);
    expect(JSON.parse(dead!)).toMatchObject({ id: "99", reason: expect.stringMatching(/^retry_budget_exceeded/) });
    // And one already in the retry host class is never nacked into it again.
    await queue.pushRaw(encodeJob({ ...ctx!.job, id: "98", host_class: "dedicated" }));
    const same = await take(queue, mover, "g");
    expect(await queue.reject(same!, "reject_packed_tokens", "packed=1 limit=0", route)).toEqual({ kind: "applied", route: "dead" });
    mover.close();
    expect(await redis.hget(queue.keys.stats, "nacked")).toBe("1");
    expect(await redis.hget(queue.keys.stats, "retry_count")).toBeNull(); // retries are counted where they run: the worker
    await assertNoJobLost(redis, queue.keys.queue, [id, "99", "98"]);
  });

  it("same id with a different payload is dead; an identical redelivery gets the stored decision; a new attempt of an admitted job is a redelivery too", async () => {
    const queue = freshQueue();
    const job = await queue.push(spec);
    const mover = new BlockingMover(server.url, { name: "t" });
    const first = await take(queue, mover, "g");
    expect((await queue.admit(first!, 32_000)).kind).toBe("admit");

    await queue.pushRaw(encodeJob(job)); // identical
    const again = await take(queue, mover, "g");
    expect(await queue.admit(again!, 32_000)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=24000 limit=32000" });
    expect(await queue.inflightTokens()).toBe(24_000); // not counted twice

    await queue.pushRaw(encodeJob({ ...job, prompt_tokens: 1 })); // same id, other work
    const impostor = await take(queue, mover, "g");
    expect((await queue.admit(impostor!, 32_000)).kind).toBe("conflict");
    expect(await queue.inflightTokens()).toBe(24_000);
    const dead = (await redis.lrange(queue.keys.dead, 0, -1)).map((e) => JSON.parse(e) as { reason: string });
    expect(dead.map((d) => d.reason)).toEqual(["id_reused_with_different_payload"]);

    // Once admitted, the job is the worker's (its recovery goes back to admitted,
    // not through the gate): a copy with another attempt is the same job again.
    await queue.pushRaw(encodeJob({ ...job, attempt: 1 }));
    const bumped = await take(queue, mover, "g");
    expect(await queue.admit(bumped!, 32_000)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=24000 limit=32000" });
    mover.close();
    expect(await queue.inflightTokens()).toBe(24_000);
    expect(await redis.llen(queue.keys.admitted)).toBe(1);
    // Only the impostor's dead entry shares the id.
    const report = await assertNoJobLost(redis, queue.keys.queue, [job.id], { allowDuplicate: (_id, places) => places.every((p) => p === queue.keys.admitted || p === queue.keys.dead) });
    expect(report.duplicates).toEqual([{ id: job.id, places: [queue.keys.admitted, queue.keys.dead] }]);
  });

  it("a re-sent copy recovered from a dead gate with attempt+1 is not admitted a second time", async () => {
    const queue = freshQueue();
    const job = await queue.push(spec);
    await queue.pushRaw(encodeJob(job)); // two identical copies (a producer without push tokens re-sending after a lost reply)
    const mover = new BlockingMover(server.url, { name: "t" });
    const first = await take(queue, mover, "ga");
    expect(await queue.admit(first!, 32_000)).toEqual({ kind: "admit", packed: 24_000 });
    // Gate ga takes the second copy and dies before deciding it (no heartbeat):
    // gb recovers it to the head of the ready list with the attempt counted.
    await take(queue, mover, "ga");
    expect((await queue.recoverExpiredGates("gb", 3)).jobs.map((r) => [r.id, r.attempt])).toEqual([[job.id, 1]]);
    const second = await take(queue, mover, "gb");
    mover.close();
    expect(second!.job.attempt).toBe(1);
    expect(await queue.admit(second!, 32_000)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=24000 limit=32000" });
    // One copy runs and jobs:inflight counts exactly that one.
    expect(await redis.lrange(queue.keys.admitted, 0, -1)).toEqual([encodeJob(job).toString()]);
    expect(await redis.hgetall(queue.keys.inflight)).toEqual({ [job.id]: "24000" });
    expect(await redis.llen(queue.keys.processing("gb"))).toBe(0);
    expect(await redis.hget(queue.keys.stats, "admitted")).toBe("1");
    expect(await redis.hget(queue.keys.stats, "redelivered")).toBe("1");
    const report = await assertNoJobLost(redis, queue.keys.queue, [job.id]);
    expect(report.duplicates).toEqual([]);
  });

  it("the recovered copy decided first: the original attempt arriving later is the redelivery", async () => {
    const queue = freshQueue();
    const job = await queue.push(spec);
    await queue.pushRaw(encodeJob(job));
    const mover = new BlockingMover(server.url, { name: "t" });
    await take(queue, mover, "ga"); // ga dies holding copy one
    const original = await take(queue, mover, "gb"); // gb holds copy two, attempt 0
    await queue.recoverExpiredGates("gb", 3);
    const recovered = await take(queue, mover, "gc");
    mover.close();
    expect(recovered!.job.attempt).toBe(1);
    expect(await queue.admit(recovered!, 32_000)).toEqual({ kind: "admit", packed: 24_000 });
    expect(await queue.admit(original!, 32_000)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=24000 limit=32000" });
    expect(await redis.llen(queue.keys.admitted)).toBe(1);
    expect(await queue.inflightTokens()).toBe(24_000);
    expect((await assertNoJobLost(redis, queue.keys.queue, [job.id])).duplicates).toEqual([]);
  });

  it("a rejected job's new attempt is still decided afresh", async () => {
    const queue = freshQueue();
    const job = await queue.push(spec);
    const mover = new BlockingMover(server.url, { name: "t" });
    const first = await take(queue, mover, "g");
    expect(await queue.reject(first!, "reject_host_pressure", "psi=12.40", route)).toEqual({ kind: "applied", route: "retry" });
    await queue.pushRaw(encodeJob({ ...job, attempt: 1 })); // the retry, brought back to this queue
    const retry = await take(queue, mover, "g");
    mover.close();
    expect(await queue.admit(retry!, 32_000)).toEqual({ kind: "admit", packed: 24_000 });
  });

  it("re-running a decision after a lost reply is a no-op", async () => {
    const queue = freshQueue();
    await queue.push(spec);
    const mover = new BlockingMover(server.url, { name: "t" });
    const ctx = await take(queue, mover, "g");
    mover.close();
    expect((await queue.admit(ctx!, 32_000)).kind).toBe("admit");
    expect(await queue.admit(ctx!, 32_000)).toEqual({ kind: "gone", storedKind: "admit", storedFigures: "packed=24000 limit=32000" });
    expect(await redis.llen(queue.keys.admitted)).toBe(1);
  });

  it("recovers only an expired gate's processing list, to the head, in order, attempt counted", async () => {
    const queue = freshQueue();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await queue.push(spec)).id);
    const mover = new BlockingMover(server.url, { name: "t" });
    await queue.heartbeat("dead-gate", 300, { pid: 1 });
    await queue.heartbeat("live-gate", 60_000, { pid: 2 });
    await take(queue, mover, "dead-gate");
    await take(queue, mover, "dead-gate");
    await take(queue, mover, "live-gate");
    mover.close();
    expect((await queue.recoverExpiredGates("me", 3)).jobs).toEqual([]); // heartbeat still alive
    await new Promise((r) => setTimeout(r, 400));
    const recovered = (await queue.recoverExpiredGates("me", 3)).jobs;
    expect(recovered.map((r) => [r.id, r.attempt, r.route])).toEqual([
      ["1", 1, "ready"],
      ["2", 1, "ready"],
    ]);
    const ready = (await redis.lrange(queue.keys.ready, 0, -1)).map((p) => JSON.parse(p) as { id: string; attempt: number });
    expect(ready.map((j) => `${j.id}@${j.attempt}`)).toEqual(["1@1", "2@1", "4@0"]);
    expect(await redis.llen(queue.keys.processing("live-gate"))).toBe(1);
    expect(await redis.hexists(queue.keys.gates, "dead-gate")).toBe(0);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("two gates recovering the same expired gate at once: each reports only the jobs it moved", async () => {
    const queue = freshQueue();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await queue.push(spec)).id);
    // No heartbeat: an expired gate holding all three.
    for (let i = 0; i < 3; i++) await redis.lmove(queue.keys.ready, queue.keys.processing("deadgate"), "LEFT", "RIGHT");
    const other = await connectRedis(server.url, { name: "test-queue-b" });
    try {
      const qb = new DrillQueue(other, queue.keys.queue);
      const [a, b] = await Promise.all([queue.recoverExpiredGates("gA", 3), qb.recoverExpiredGates("gB", 3)]);
      const reported = [...a.jobs, ...b.jobs].map((r) => r.id).sort();
      expect(reported).toEqual(ids);
      expect(await redis.llen(queue.keys.ready)).toBe(3);
      expect(await redis.hget(queue.keys.stats, "recovered")).toBe("3");
    } finally {
      await closeRedis(other);
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // The recover script was refused outright by a key it only records in of another
  // type: a dead gate's list stayed where nobody reads it (every gate's recovery
  // refused the same), and a stopping gate fell back to a second script.
  it.each([
    ["stats", (k: DrillQueue["keys"]) => redis.set(k.stats, "hello"), "string", "hash"],
    ["events", (k: DrillQueue["keys"]) => redis.set(k.events, "hello"), "string", "stream"],
    ["gates", (k: DrillQueue["keys"]) => redis.set(k.gates, "hello"), "string", "hash"],
  ] as const)("a dead gate's list while <q>:%s is of another type: back to the head, in order, attempt counted, the key named, once", async (name, corrupt, found, wanted) => {
    const queue = freshQueue();
    const k = queue.keys;
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await queue.push(spec)).id);
    for (let i = 0; i < 2; i++) await redis.lmove(k.ready, k.processing("g"), "LEFT", "RIGHT");
    await corrupt(k);
    const refusal = `${k.queue}:${name} is a ${found}, not a ${wanted} (drill never writes that there)`;
    const recovery = await queue.recoverExpiredGates("me", 3);
    expect(recovery.jobs.map((r) => [r.id, r.attempt, r.route])).toEqual([
      ["1", 1, "ready"],
      ["2", 1, "ready"],
    ]);
    expect(recovery.unrecorded).toEqual([{ gate: "g", moved: 2, refusal }]);
    expect(recovery.refused).toEqual([]);
    expect(recovery.registryRefusal).toBe(name === "gates" ? refusal : null);
    const ready = (await redis.lrange(k.ready, 0, -1)).map((p) => JSON.parse(p) as { id: string; attempt: number });
    expect(ready.map((j) => `${j.id}@${j.attempt}`)).toEqual(["1@1", "2@1", "3@0"]);
    // The keys of drill's type are still written.
    if (name !== "stats") expect(await redis.hget(k.stats, "recovered")).toBe("2");
    if (name !== "events") expect(await redis.xlen(k.events)).toBe(2);
    expect(await redis.get(`${k.queue}:${name}`)).toBe("hello");
    expect((await queue.recoverExpiredGates("me", 3)).jobs).toEqual([]);
    await redis.del(`${k.queue}:${name}`);
    await assertNoJobLost(redis, k.queue, ids);
  });

  it("a dead gate's job past the budget while <q>:dead is of another type goes back to the head as taken, attempt not counted, named", async () => {
    const queue = freshQueue();
    const k = queue.keys;
    const job = await queue.push(spec);
    await redis.lmove(k.ready, k.processing("g"), "LEFT", "RIGHT");
    const [taken] = await redis.lrange(k.processing("g"), 0, -1);
    await redis.hset(k.dead, "x", "1");
    const recovery = await queue.recoverExpiredGates("me", 0);
    expect(recovery.jobs).toEqual([{ fromGate: "g", id: job.id, attempt: 0, route: "ready" }]);
    expect(recovery.unrecorded).toEqual([{ gate: "g", moved: 1, refusal: `${k.dead} is a hash, not a list (drill never writes that there)` }]);
    expect(await redis.lrange(k.ready, 0, -1)).toEqual([taken]);
    expect(await redis.hget(k.stats, "recovered")).toBe("1");
    await redis.del(k.dead);
    await assertNoJobLost(redis, k.queue, [job.id]);
  });

  it("a dead gate's list a key refusal keeps (its list or the ready list of another type) is named and skipped; the other gates' lists still come back", async () => {
    const queue = freshQueue();
    const k = queue.keys;
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await queue.push(spec)).id);
    await redis.lmove(k.ready, k.processing("g2"), "LEFT", "RIGHT");
    await redis.set(k.processing("g1"), "hello");
    const recovery = await queue.recoverExpiredGates("me", 3);
    expect(recovery.refused).toEqual([{ gate: "g1", refusal: `${k.processing("g1")} is a string, not a list (drill never writes that there)` }]);
    expect(recovery.jobs.map((r) => r.id)).toEqual([ids[0]]);
    await redis.del(k.processing("g1"));
    // The ready list of another type: nothing moves, the refusal names it.
    await redis.lmove(k.ready, k.processing("g3"), "LEFT", "RIGHT");
    const ready = await redis.lrange(k.ready, 0, -1);
    await redis.del(k.ready);
    await redis.set(k.ready, "hello");
    const refused = await queue.recoverExpiredGates("me", 3);
    expect(refused.jobs).toEqual([]);
    expect(refused.refused).toEqual([{ gate: "g3", refusal: `${k.ready} is a string, not a list (drill never writes that there)` }]);
    expect(await redis.llen(k.processing("g3"))).toBe(1);
    await redis.del(k.ready);
    if (ready.length > 0) await redis.rpush(k.ready, ...ready);
    expect((await queue.recoverExpiredGates("me", 3)).jobs.map((r) => r.id)).toEqual([ids[0]]);
    await assertNoJobLost(redis, k.queue, ids);
  });

  it("an inflight entry that is not a token count fails the admit closed, naming it (it counted as 0 against the cap)", async () => {
    const queue = freshQueue();
    await redis.hset(queue.keys.inflight, "42", "lots");
    const id = (await queue.push(spec)).id;
    const mover = new BlockingMover(server.url, { name: "t" });
    const ctx = await take(queue, mover, "g");
    mover.close();
    await expect(queue.inflightTokens()).rejects.toThrow(/entry 42 is not a token count \("lots"\)/);
    await expect(queue.admit(ctx!, 32_000)).rejects.toThrow(/entry 42 is not a token count \("lots"\): the packed-token cap cannot be checked, nothing admitted/);
    // Nothing changed: the job still waits in the gate's list, nothing admitted or counted.
    expect(await redis.lrange(queue.keys.processing("g"), 0, -1)).toHaveLength(1);
    expect(await redis.llen(queue.keys.admitted)).toBe(0);
    expect(await redis.hgetall(queue.keys.inflight)).toEqual({ "42": "lots" });
    await redis.hset(queue.keys.inflight, "42", "8000");
    expect(await queue.inflightTokens()).toBe(8000);
    expect(await queue.admit(ctx!, 32_000)).toEqual({ kind: "admit", packed: 32_000 });
    expect(await redis.hget(queue.keys.inflight, id)).toBe("24000");
  });

  it("malformed payloads go to dead with the reason, in-flight tokens unchanged", async () => {
    const queue = freshQueue();
    await redis.hset(queue.keys.inflight, "42", "24000");
    const bad = [Buffer.from("not json"), Buffer.from([0xff, 0xfe, 0x22]), Buffer.alloc(10 * 1024 * 1024, 0x7b)];
    for (const payload of bad) await queue.pushRaw(payload);
    const mover = new BlockingMover(server.url, { name: "t" });
    for (let i = 0; i < bad.length; i++) {
      const payload = await mover.move(queue.keys.ready, queue.keys.processing("g"), 500);
      const decoded = decodeJob(payload!);
      expect(decoded.ok).toBe(false);
      if (!decoded.ok) expect(await queue.deadLetter("g", payload!, decoded.reason, decoded.id)).toBe("applied");
    }
    mover.close();
    const dead = (await redis.lrange(queue.keys.dead, 0, -1)).map((e) => JSON.parse(e) as { reason: string; payload_bytes: number; truncated?: boolean });
    expect(dead.map((d) => d.reason.split(" ")[0])).toEqual(["not_json", "invalid_utf8", "too_large"]);
    expect(dead[2]).toMatchObject({ payload_bytes: 10 * 1024 * 1024, truncated: true });
    expect(await queue.inflightTokens()).toBe(24_000);
    expect(await redis.llen(queue.keys.processing("g"))).toBe(0);
  });

  it("a stop ends a take at once (CLIENT UNBLOCK as a timeout): nothing moved, no wait for the block; after the stop no take blocks", async () => {
    const queue = freshQueue();
    const controller = new AbortController();
    const mover = new BlockingMover(server.url, { name: "t-stop", stop: { signal: controller.signal, via: redis } });
    // A 30 s block: without the unblock the take would outlive this test's timeout.
    const take = mover.move(queue.keys.ready, queue.keys.processing("g"), 30_000);
    await untilBlockedInBlmove(redis, "the take", { name: "t-stop" });
    const started = Date.now();
    controller.abort();
    expect(await take).toBeNull();
    expect(Date.now() - started, "the take waited out its block").toBeLessThan(5000);
    // A job pushed after the stop stays where it is: the unblocked BLMOVE took nothing, and no take follows.
    const id = (await queue.push(spec)).id;
    expect(await mover.move(queue.keys.ready, queue.keys.processing("g"), 30_000)).toBeNull();
    expect(await redis.llen(queue.keys.processing("g"))).toBe(0);
    await assertNoJobLost(redis, queue.keys.queue, [id]);
    expect(await redis.lrange(queue.keys.ready, 0, -1)).toHaveLength(1);
    mover.close();
  });

  it("a stop while the server is paused ends the take within the grace, not at the watchdog; after SIGCONT nothing was moved", async () => {
    const queue = freshQueue();
    const controller = new AbortController();
    const mover = new BlockingMover(server.url, { name: "t-stop-paused", stop: { signal: controller.signal, via: redis } });
    // A 30 s block: the watchdog would answer at 32 s, past this test's timeout.
    const take = mover.move(queue.keys.ready, queue.keys.processing("g"), 30_000);
    await untilBlockedInBlmove(redis, "the take", { name: "t-stop-paused" });
    server.kill("SIGSTOP");
    let waitedMs: number;
    try {
      const started = Date.now();
      controller.abort();
      expect(await take).toBeNull();
      waitedMs = Date.now() - started;
    } finally {
      server.kill("SIGCONT");
    }
    expect(waitedMs, "the stopped take waited for the watchdog").toBeLessThan(2000);
    // The unblock queued on the command connection runs first: a job pushed after it is not taken.
    const id = (await queue.push(spec)).id;
    await new Promise((r) => setTimeout(r, 200));
    expect(await redis.llen(queue.keys.processing("g"))).toBe(0);
    expect(await redis.lrange(queue.keys.ready, 0, -1)).toHaveLength(1);
    await assertNoJobLost(redis, queue.keys.queue, [id]);
    mover.close();
  });

  it("a stop unblocks only its own take: another client's BLMOVE on the same list keeps blocking", async () => {
    const queue = freshQueue();
    const controller = new AbortController();
    const mine = new BlockingMover(server.url, { name: "t-mine", stop: { signal: controller.signal, via: redis } });
    const other = new BlockingMover(server.url, { name: "t-other" });
    const myTake = mine.move(queue.keys.ready, queue.keys.processing("a"), 30_000);
    const otherTake = other.move(queue.keys.ready, queue.keys.processing("b"), 30_000);
    await untilBlockedInBlmove(redis, "both takes", { count: 2 });
    controller.abort();
    expect(await myTake).toBeNull();
    const id = (await queue.push(spec)).id;
    const payload = await otherTake;
    const decoded = decodeJob(payload!);
    expect(decoded.ok && decoded.job.id).toBe(id);
    mine.close();
    other.close();
  });

  // QA: a worker SIGSTOPped for 14 s woke to its overdue watchdog before the reply waiting in its socket, and blamed the server.
  it("a watchdog overdue because this process did not run looks at the socket once more: the reply that came meanwhile is taken", async () => {
    const queue = freshQueue();
    const mover = new BlockingMover(server.url, { name: "stalled-t", watchdogMarginMs: 300 });
    await mover.move(queue.keys.ready, queue.keys.processing("g"), 100); // connected
    const take = mover.move(queue.keys.ready, queue.keys.processing("g"), 1000);
    await untilBlockedInBlmove(redis, "the mover", { name: "stalled-t" });
    // This process stops running (as under SIGSTOP or a frozen cgroup) past the watchdog's 1.3 s; the server answers meanwhile.
    const stoppedAt = performance.now();
    execFileSync("redis-cli", ["-u", server.url, "RPUSH", queue.keys.ready, "job-during-the-stall"]);
    while (performance.now() - stoppedAt < 2800) {
      // not running: nothing of this process's event loop turns
    }
    expect((await take)?.toString()).toBe("job-during-the-stall");
    expect(mover.watchdogFires).toBe(0);
    mover.close();
  });

  it("the blocking read does not hang on a paused server: the watchdog fires, and it resumes after SIGCONT", async () => {
    const queue = freshQueue();
    const mover = new BlockingMover(server.url, { name: "t", watchdogMarginMs: 300 });
    await mover.move(queue.keys.ready, queue.keys.processing("g"), 200); // connected
    server.kill("SIGSTOP");
    const started = Date.now();
    try {
      await expect(mover.move(queue.keys.ready, queue.keys.processing("g"), 200)).rejects.toBeInstanceOf(WatchdogTimeout);
      expect(Date.now() - started).toBeLessThan(2000);
      expect(mover.watchdogFires).toBe(1);
    } finally {
      server.kill("SIGCONT");
    }
    const id = (await queue.push(spec)).id;
    // The BLMOVE the watchdog abandoned sat in the stopped server's socket
    // buffer: after SIGCONT it may still run, before the server sees that
    // socket closed, and take the job into this gate's processing list. That
    // is why the gate reads its processing head before it blocks again; the
    // job is taken exactly once either way.
    const payload = (await queue.processingHead("g")) ?? (await mover.move(queue.keys.ready, queue.keys.processing("g"), 1000));
    expect(payload).not.toBeNull();
    const decoded = decodeJob(payload!);
    expect(decoded.ok && decoded.job.id).toBe(id);
    expect(await redis.llen(queue.keys.processing("g"))).toBe(1);
    expect(await redis.llen(queue.keys.ready)).toBe(0);
    // The replacement connection serves the next job.
    await redis.del(queue.keys.processing("g"));
    const next = (await queue.push(spec)).id;
    const again = await mover.move(queue.keys.ready, queue.keys.processing("g"), 1000);
    const decodedAgain = decodeJob(again!);
    expect(decodedAgain.ok && decodedAgain.job.id).toBe(next);
    mover.close();
  });

  it("survives a SIGKILLed redis-server restarted on its AOF dir: nothing acknowledged is lost", async () => {
    const queue = freshQueue();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await queue.push(spec)).id);
    server.kill("SIGKILL");
    await server.restart();
    // The same client reconnects by itself.
    let pushed = false;
    for (let i = 0; i < 50 && !pushed; i++) {
      try {
        ids.push((await queue.push(spec)).id);
        pushed = true;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    expect(pushed).toBe(true);
    await assertNoJobLost(redis, queue.keys.queue, ids);
    expect(ids.at(-1)).toBe("6");
  });

  it("setMode: two flips at once each name the mode the other left, in the mode events too (one step, not GET then SET)", async () => {
    const queue = freshQueue();
    const other = await connectRedis(server.url, { name: "test-queue-2" });
    try {
      const otherQueue = new DrillQueue(other, queue.keys.queue);
      expect(await queue.setMode("admit", { forced: false, psi: "0.00", by: "gate_mode" })).toBeNull();
      for (let round = 0; round < 30; round++) {
        // Both start from admit; one of the two must see the other's reject_all.
        await queue.setMode("admit", { forced: false, psi: "0.00", by: "gate_mode" });
        const [a, b] = await Promise.all([
          queue.setMode("reject_all", { forced: false, psi: "0.00", by: "gate_mode" }),
          otherQueue.setMode("reject_all", { forced: true, psi: "0.00", by: "gate_mode" }),
        ]);
        expect([a, b].sort(), `round ${round}`).toEqual(["admit", "reject_all"]);
      }
      const events = await redis.xrange(queue.keys.events, "-", "+");
      const figures = events.map(([, fields]) => fields[fields.indexOf("figures") + 1]);
      expect(figures[0]).toBe("mode=admit previous=unset psi=0.00 by=gate_mode");
      // Each event's previous is the mode the event before it set.
      for (let k = 1; k < figures.length; k++) {
        const before = /^mode=(\S+)/.exec(figures[k - 1]!)![1];
        expect(figures[k], `event ${k}`).toMatch(new RegExp(`^mode=\\S+ previous=${before} psi=0\\.00( forced=1)? by=gate_mode$`));
      }
      // Garbage in the key: the gate rejects on it (fail closed), and the event says what was there.
      await redis.set(queue.keys.mode, "nonsense");
      expect(await queue.setMode("reject_all", { forced: false, psi: "1.00", by: "rollback" })).toBe("reject_all");
      const last = (await redis.xrevrange(queue.keys.events, "+", "-", "COUNT", 1))[0]![1];
      expect(last[last.indexOf("figures") + 1]).toBe("mode=reject_all previous=reject_all psi=1.00 previous_value=nonsense by=rollback");
    } finally {
      await closeRedis(other);
    }
  });
  // QA: `gate mode reject_all` over a <q>:mode hash died with WRONGTYPE: the deny-all lever must always move.
  it("setMode over a <q>:mode of another type: the lever moves, the previous is named by its type", async () => {
    const queue = freshQueue();
    await redis.hset(queue.keys.mode, "x", "1");
    expect(await queue.readMode()).toEqual({ type: "hash", value: null });
    expect(await queue.flipMode("reject_all", { forced: false, psi: "0.00", by: "gate_mode" })).toEqual({ previous: { type: "hash", value: null }, recorded: true });
    expect(await redis.get(queue.keys.mode)).toBe("reject_all");
    const last = (await redis.xrevrange(queue.keys.events, "+", "-", "COUNT", 1))[0]![1];
    expect(last[last.indexOf("figures") + 1]).toBe("mode=reject_all previous=reject_all psi=0.00 previous_type=hash by=gate_mode");
    // An events key of the wrong type leaves the flip unrecorded, never unflipped.
    await redis.del(queue.keys.events);
    await redis.set(queue.keys.events, "x");
    expect(await queue.flipMode("admit", { forced: false, psi: "0.00", by: "gate_mode" })).toEqual({ previous: { type: "string", value: "reject_all" }, recorded: false });
    expect(await redis.get(queue.keys.mode)).toBe("admit");
  });

  it("the admit script reads the lever as the gate does: a mistyped deny-all rejects, with what the key held", async () => {
    const queue = freshQueue();
    await queue.push(spec);
    const mover = new BlockingMover(server.url, { name: "t" });
    const ctx = await take(queue, mover, "g1");
    mover.close();
    await redis.set(queue.keys.mode, "reject-all");
    expect(await queue.admit(ctx!, 32000)).toEqual({ kind: "reject_all", stored: { type: "string", value: "reject-all" } });
    await redis.del(queue.keys.mode);
    await redis.hset(queue.keys.mode, "x", "1");
    expect(await queue.admit(ctx!, 32000)).toEqual({ kind: "reject_all", stored: { type: "hash", value: null } });
    expect(await redis.llen(queue.keys.admitted)).toBe(0);
  });

  // QA: a double's tostring made id 1e14 '1e+14', twice; a seq that is not a number was retried and never named.
  it("push ids are exact integers; a <q>:seq that is not an id under 2^53 is refused by name, nothing pushed", async () => {
    const queue = freshQueue();
    await redis.set(queue.keys.seq, "99999999999999");
    expect((await queue.push(spec)).id).toBe("100000000000000");
    expect((await queue.push(spec)).id).toBe("100000000000001");
    expect((await redis.lrange(queue.keys.ready, 0, -1)).map((p) => JSON.parse(p).id)).toEqual(["100000000000000", "100000000000001"]);
    // QA: at 2^53-1 it handed out 2^53, which a double cannot tell from 2^53+1: the last id is 2^53-1.
    await redis.set(queue.keys.seq, String(2 ** 53 - 2));
    expect((await queue.push(spec)).id).toBe(String(Number.MAX_SAFE_INTEGER));
    await expect(queue.push(spec)).rejects.toThrow(`${queue.keys.seq} is at ${Number.MAX_SAFE_INTEGER}, the last exact job id (2^53-1)`);
    expect(await redis.get(queue.keys.seq)).toBe(String(Number.MAX_SAFE_INTEGER));
    // QA: INCR refuses a leading zero ('007'), which this check passed: the push was sent again 10 times.
    // Whatever INCR refuses is refused here by name, before it; the seq is left as it was.
    for (const bad of [String(2 ** 53), "abc", "-3", "007", "00", "0".repeat(25) + "5", "+5", " 5", "5 ", "5\n", "1e3", "", "1\0", "\0", "ab\0cd"]) {
      await redis.set(queue.keys.seq, bad);
      // An error reply ends at a NUL (the refusal's mark with it, QA) and cannot carry a newline: control bytes show as '?'.
      // eslint-disable-next-line no-control-regex
      await expect(queue.push(spec)).rejects.toThrow(`${queue.keys.seq} is "${bad.slice(0, 30).replace(/[\x00-\x1f\x7f]/g, "?")}", not a job id under 2^53`);
      expect(await redis.get(queue.keys.seq)).toBe(bad);
    }
    expect(await redis.llen(queue.keys.ready)).toBe(3);
    expect(JSON.parse((await redis.lindex(queue.keys.ready, -1))!).id).toBe(String(Number.MAX_SAFE_INTEGER));
    await redis.set(queue.keys.seq, String(Number.MAX_SAFE_INTEGER));
    // Not sent again: the same answer would come back.
    let failures = 0;
    const outcome = await pushUntilTaken(queue, unnumberedJob(spec), `${pushScope("test")}.0`, { signal: new AbortController().signal, delayMs: () => 1, sendAgain: () => true, onFailure: () => failures++ });
    expect(outcome.ok).toBe(false);
    expect(failures).toBe(1);
    await redis.set(queue.keys.seq, "007");
    const zero = await pushUntilTaken(queue, unnumberedJob(spec), `${pushScope("test")}.0`, { signal: new AbortController().signal, delayMs: () => 1, sendAgain: () => true, onFailure: () => failures++ });
    expect(zero.ok).toBe(false);
    expect(failures).toBe(2);
    await redis.set(queue.keys.seq, "1\0");
    const nul = await pushUntilTaken(queue, unnumberedJob(spec), `${pushScope("test")}.0`, { signal: new AbortController().signal, delayMs: () => 1, sendAgain: () => true, onFailure: () => failures++ });
    expect(nul.ok).toBe(false);
    expect(failures, "a seq with a NUL was sent again").toBe(3);
    // '0' is an integer to INCR: the next id is 1.
    await redis.set(queue.keys.seq, "0");
    expect((await queue.push(spec)).id).toBe("1");
  });

  // Redis keeps a script's writes made before a command in it fails: each script checks every key it writes first.
  it("a key of the wrong type stops each script before its first write, naming the key and its type", async () => {
    const queue = freshQueue();
    const k = queue.keys;
    const w = workerKeys(k.queue);
    await queue.push(spec);
    await redis.lmove(k.ready, k.working("w1"), "LEFT", "RIGHT");
    const payload = (await redis.lindexBuffer(k.working("w1"), 0))!;
    await redis.hset(k.inflight, "1", "24000");
    await redis.set(k.stats, "hello");
    const before = await dump(k.queue);
    await expect(runScript(redis, doneScript, [k.working("w1"), k.done, k.stats, k.inflight, w.firstToken], [payload, "{}", "1", "0", "0"])).rejects.toThrow(`${k.stats} is a string, not a hash`);
    await expect(runScript(redis, workerDeadScript, [k.working("w1"), k.dead, k.stats, k.inflight], [payload, "{}", "1"])).rejects.toThrow(`${k.stats} is a string, not a hash`);
    await redis.del(k.stats);
    await redis.set(w.firstToken, "x");
    const again = await dump(k.queue);
    await expect(runScript(redis, firstTokenScript, [k.working("w1"), w.firstToken], [payload, "{}", "1", "5"])).rejects.toThrow(`${w.firstToken} is a string, not a hash`);
    // Only the two lists refuse the worker's recovery (a key it only records in is named in its reply): the string in admitted's place.
    await expect(runScript(redis, recoverWorkingScript, [w.heartbeat("w1"), k.working("w1"), w.firstToken, w.firstToken, k.stats, w.workers], ["t", "w1", payload, payload, "1"])).rejects.toThrow(`${w.firstToken} is a string, not a list`);
    expect(await dump(k.queue)).toEqual(again);
    expect(before.filter(([key]) => key !== k.stats)).toEqual(again.filter(([key]) => key !== w.firstToken));
  });
});

