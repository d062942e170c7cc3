// The sidecar's reject lines (QA: `drill watch` never showed them) against a
// real redis-server: the gate's own queue scripts write `<q>:events`, and the
// sidecar's one sample script call reads the new entries.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decisionFigures, formatDecisionLine, type AdmissionDecision } from "../../src/gate/policy.js";
import { decodeJob } from "../../src/queue/job.js";
import { DrillQueue, type JobSpec } from "../../src/queue/queue.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { QueueReader } from "../../src/sampler/read.js";
import { EVENTS_SCANNED_PER_SAMPLE, NO_REJECTS, REJECT_LINES_PER_SAMPLE } from "../../src/sampler/rejects.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let n = 0;
const readers: QueueReader[] = [];
const spec: JobSpec = { promptTokens: 24000, completionTokens: 256, files: 8, deadlineMs: 8000, hostClass: "shared-free" };

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-watch-rejects" });
});
afterAll(async () => {
  for (const reader of readers) reader.close();
  await closeRedis(redis);
  await server?.stop();
});

function freshQueue(): DrillQueue {
  return new DrillQueue(redis, `wr${++n}`);
}

async function reader(queue: DrillQueue, timeoutMs = 500): Promise<QueueReader> {
  const r = new QueueReader(server.url, queue.keys, "shared-free", timeoutMs);
  readers.push(r);
  await r.connect();
  return r;
}

/** One job pushed, taken and rejected through the gate's own scripts; the line the gate prints for it. */
async function reject(queue: DrillQueue, decision: Exclude<AdmissionDecision, { kind: "admit" }>, retryBudget = 3): Promise<string> {
  await queue.push(spec);
  const payload = await redis.lmoveBuffer(queue.keys.ready, queue.keys.processing("g1"), "LEFT", "RIGHT");
  const decoded = decodeJob(payload!);
  if (!decoded.ok) throw new Error(decoded.reason);
  const ctx = { gate: "g1", payload: payload!, job: decoded.job, fingerprint: decoded.fingerprint, nowMs: Date.now() };
  const outcome = await queue.reject(ctx, decision.kind, decisionFigures(decision), { retryHostClass: "dedicated", retryBudget });
  if (outcome.kind !== "applied") throw new Error(outcome.kind);
  return `${formatDecisionLine(decision, decoded.job)} route=${outcome.route}`;
}

async function admit(queue: DrillQueue): Promise<void> {
  await queue.push({ ...spec, promptTokens: 10 });
  const payload = await redis.lmoveBuffer(queue.keys.ready, queue.keys.processing("g1"), "LEFT", "RIGHT");
  const decoded = decodeJob(payload!);
  if (!decoded.ok) throw new Error(decoded.reason);
  const outcome = await queue.admit({ gate: "g1", payload: payload!, job: decoded.job, fingerprint: decoded.fingerprint, nowMs: Date.now() }, 1_000_000);
  if (outcome.kind !== "admit") throw new Error(outcome.kind);
}

/** `count` entries as the gate's event() writes them, and their stats counter, in one call. */
async function storm(queue: DrillQueue, reason: string, count: number): Promise<void> {
  await redis.eval(
    `for i = 1, tonumber(ARGV[2]) do
       redis.call('XADD', KEYS[1], 'MAXLEN', '~', '100000', '*', 'reason', ARGV[1], 'job', tostring(i), 'figures', 'psi=12.40 route=retry', 'ts', '1', 'gate', 'g1', 'attempt', '0')
     end
     redis.call('HINCRBY', KEYS[2], ARGV[1], tonumber(ARGV[2]))`,
    2,
    queue.keys.events,
    queue.keys.stats,
    reason,
    count,
  );
}

async function readOk(r: QueueReader): Promise<void> {
  const reading = await r.read();
  expect(reading.ok, reading.ok ? "" : reading.reason).toBe(true);
}

describe("QueueReader: the gate's reject lines", () => {
  it("starts from now; then each reject in the gate's own words, admits left out; nothing new is nothing", async () => {
    const queue = freshQueue();
    await reject(queue, { kind: "reject_host_pressure", psi: 12.4, trigger: "psi_avg10", figure: null }); // history: drill report's
    const r = await reader(queue);
    await readOk(r);
    expect(r.takeRejects()).toBe(NO_REJECTS);

    const lines = [
      await reject(queue, { kind: "reject_packed_tokens", packed: 36012, limit: 32000 }),
      await reject(queue, { kind: "reject_host_pressure", psi: 0.4, trigger: "reject_all", figure: null }, 0),
    ];
    await admit(queue);
    lines.push(await reject(queue, { kind: "reject_deadline_slack", slackMs: 420, limitMs: 1500, stallMsP99: null }));
    expect(lines).toEqual([
      "reject_packed_tokens job=2 packed=36012 limit=32000 route=retry",
      "reject_host_pressure job=3 psi=0.40 mode=reject_all route=dead",
      "reject_deadline_slack job=5 slack_ms=420 route=retry",
    ]);
    await readOk(r);
    expect(r.takeRejects()).toEqual({ lines, more: 0 });
    expect(r.takeRejects()).toBe(NO_REJECTS);
    await readOk(r);
    expect(r.takeRejects()).toBe(NO_REJECTS);
  });

  it("no stream yet when it starts: the first entries written are new", async () => {
    const queue = freshQueue();
    const r = await reader(queue);
    await readOk(r);
    const line = await reject(queue, { kind: "reject_host_pressure", psi: "missing", trigger: "psi_missing", figure: null });
    await readOk(r);
    expect(r.takeRejects()).toEqual({ lines: [line], more: 0 });
  });

  it("a storm: at most the line cap, the rest counted; past the scan cap it jumps to the newest, counted by the stats", async () => {
    const queue = freshQueue();
    const r = await reader(queue);
    await readOk(r);
    await storm(queue, "reject_host_pressure", REJECT_LINES_PER_SAMPLE + 50);
    await readOk(r);
    const capped = r.takeRejects();
    expect(capped.lines).toHaveLength(REJECT_LINES_PER_SAMPLE);
    expect(capped.lines[0]).toBe("reject_host_pressure job=1 psi=12.40 route=retry");
    expect(capped.more).toBe(50);

    // More admits than one read scans, then rejects: none of them read, all counted; the next read starts past them.
    await storm(queue, "admit", EVENTS_SCANNED_PER_SAMPLE + 10);
    await storm(queue, "reject_packed_tokens", 30);
    await readOk(r);
    expect(r.takeRejects()).toEqual({ lines: [], more: 30 });
    await readOk(r);
    expect(r.takeRejects()).toBe(NO_REJECTS);
    const line = await reject(queue, { kind: "reject_packed_tokens", packed: 48000, limit: 32000 });
    await readOk(r);
    expect(r.takeRejects()).toEqual({ lines: [line], more: 0 });
  });

  it("Redis killed and back: no lines while it is down, then the ones it missed, once", async () => {
    const queue = freshQueue();
    const r = await reader(queue);
    await readOk(r);
    const missed = [
      await reject(queue, { kind: "reject_host_pressure", psi: 12.4, trigger: "psi_avg10", figure: null }),
      await reject(queue, { kind: "reject_host_pressure", psi: 13.1, trigger: "psi_avg10", figure: null }),
    ];
    server.kill("SIGKILL"); // appendfsync always: the entries are on disk
    expect((await r.read()).ok).toBe(false);
    expect(r.takeRejects()).toBe(NO_REJECTS);
    await server.restart();
    const deadline = Date.now() + 15_000;
    while (!(await r.read()).ok) {
      if (Date.now() > deadline) throw new Error("the reader did not reconnect");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(r.takeRejects()).toEqual({ lines: missed, more: 0 });
    await readOk(r);
    expect(r.takeRejects()).toBe(NO_REJECTS);
  }, 30_000);

  it("a reply that did not come back in time (server paused): its lines come with the next reading, once", async () => {
    const queue = freshQueue();
    await redis.ping(); // the helper client is back after the restart above
    const r = await reader(queue, 300);
    await readOk(r);
    const line = await reject(queue, { kind: "reject_deadline_slack", slackMs: -230, limitMs: 1500, stallMsP99: null });
    server.kill("SIGSTOP");
    try {
      const reading = await r.read();
      expect(reading.ok).toBe(false);
      expect(r.takeRejects()).toBe(NO_REJECTS);
    } finally {
      server.kill("SIGCONT");
    }
    const deadline = Date.now() + 15_000;
    while (!(await r.read()).ok) {
      if (Date.now() > deadline) throw new Error("the reader did not reconnect");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(r.takeRejects()).toEqual({ lines: [line], more: 0 });
  }, 30_000);
});
