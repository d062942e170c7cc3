// The sidecar's queue sample against a real redis-server: its work per sample
// is bounded by SAMPLE_LIST_SCAN_CAP, not by the queue (a full LRANGE of a
// 500 000-job ready list took ~0.5 s inside Redis every sample), and a
// truncated scan says so.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DrillQueue } from "../../src/queue/queue.js";
import type { QueueRaw } from "../../src/sampler/step.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { QueueReader, SAMPLE_LIST_SCAN_CAP, WORKING_SCAN_MAX_KEYS } from "../../src/sampler/read.js";
import { workerKeys } from "../../src/worker/scripts.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let n = 0;
const readers: QueueReader[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-watch-scan" });
});
afterAll(async () => {
  for (const reader of readers) reader.close();
  await closeRedis(redis);
  await server?.stop();
});

const job = (id: string, attempt: number) =>
  JSON.stringify({ id, prompt_tokens: 10, completion_tokens: 1, files: 0, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt, host_class: "shared-free" });

/** `count` first-attempt jobs RPUSHed to `key` in one call, ids `<prefix><i>`. */
async function fill(key: string, prefix: string, count: number): Promise<void> {
  await redis.eval(
    `for i = 1, tonumber(ARGV[2]) do
       redis.call('RPUSH', KEYS[1], '{"id":"' .. ARGV[1] .. i .. '","prompt_tokens":10,"completion_tokens":1,"files":0,"enqueue_ts":' .. ARGV[3] .. ',"deadline_ms":60000,"attempt":0,"host_class":"shared-free"}')
     end`,
    1,
    key,
    prefix,
    count,
    Date.now(),
  );
}

async function sample(queue: DrillQueue): Promise<QueueRaw> {
  const r = new QueueReader(server.url, queue.keys, "shared-free", 5_000);
  readers.push(r);
  await r.connect();
  const reading = await r.read();
  if (!reading.ok) throw new Error(reading.reason);
  return reading.value;
}

const retriedIds = (q: QueueRaw) => q.retryCandidates.map((p) => (JSON.parse(p.toString()) as { id: string }).id).sort();

describe("the queue sample's list scan", () => {
  it("reads whole lists up to the cap: every retried job seen, nothing truncated", async () => {
    const queue = new DrillQueue(redis, `ws${++n}`);
    await fill(queue.keys.ready, "r", 100);
    await redis.lset(queue.keys.ready, 50, job("mid", 1));
    await fill(queue.keys.admitted, "a", 10);
    const q = await sample(queue);
    expect(q.scan).toEqual({ readyLen: 100, readyScanned: 100, admittedLen: 10, admittedScanned: 10 });
    expect(q.admitted).toHaveLength(10);
    expect(retriedIds(q)).toEqual(["mid"]);
  });

  it("a ready list and an admitted list far past the cap: the sample reads the cap, and says it truncated", async () => {
    const queue = new DrillQueue(redis, `ws${++n}`);
    const readyLen = 50 * SAMPLE_LIST_SCAN_CAP;
    await fill(queue.keys.ready, "r", readyLen - 2);
    await redis.lpush(queue.keys.ready, job("recovered", 1)); // gate recovery: to the head
    await redis.rpush(queue.keys.ready, job("pushed", 1)); // a push: to the tail
    await redis.lset(queue.keys.ready, readyLen / 2, job("middle", 1)); // beyond both ends: not seen (approximate)
    await fill(queue.keys.admitted, "a", 3 * SAMPLE_LIST_SCAN_CAP);
    const q = await sample(queue);
    expect(q.queueLen).toBe(readyLen); // LLEN: exact at any size
    expect(q.scan).toEqual({ readyLen, readyScanned: SAMPLE_LIST_SCAN_CAP, admittedLen: 3 * SAMPLE_LIST_SCAN_CAP, admittedScanned: SAMPLE_LIST_SCAN_CAP });
    expect(q.admitted).toHaveLength(SAMPLE_LIST_SCAN_CAP);
    expect(JSON.parse(q.admitted[0]!.toString())).toMatchObject({ id: "a1" }); // the oldest first
    expect(retriedIds(q)).toEqual(["pushed", "recovered"]);
  });
  // QA: a wrong-typed key made the sample fail with a bare WRONGTYPE (which key?) under 'unreachable',
  // then failed the whole reading: every queue field went null for one key.
  it("a key of the wrong type: named with its type and read as empty, the other keys still read; a <q>:mode hash reads as its type", async () => {
    const queue = new DrillQueue(redis, `ws${++n}`);
    await fill(queue.keys.ready, "r", 3);
    await fill(queue.keys.admitted, "a", 2);
    await redis.hset(queue.keys.mode, "x", "1");
    expect((await sample(queue)).mode).toBe("(a hash)");
    await redis.set(queue.keys.stats, "hello");
    const stats = await sample(queue);
    expect(stats.wrongTyped).toEqual([{ role: "stats", key: queue.keys.stats, reason: `${queue.keys.stats} is a string, not a hash (drill never writes that there)` }]);
    expect(stats.queueLen).toBe(3);
    expect(stats.admitted).toHaveLength(2);
    await redis.del(queue.keys.stats, queue.keys.ready);
    await redis.hset(queue.keys.stats, "tokens_out", "7");
    await redis.set(queue.keys.ready, "hello");
    await redis.set(queue.keys.events, "x");
    const ready = await sample(queue);
    expect(ready.wrongTyped).toEqual([
      { role: "ready", key: queue.keys.ready, reason: `${queue.keys.ready} is a string, not a list (drill never writes that there)` },
      { role: "events", key: queue.keys.events, reason: `${queue.keys.events} is a string, not a stream (drill never writes that there)` },
    ]);
    expect(ready).toMatchObject({ queueLen: 0, head: null, stats: { tokens_out: "7" } });
    expect(ready.admitted).toHaveLength(2);
  });

  // QA: a <q>:working:<id> that is not a list was skipped in silence: that worker's jobs were not counted, and nothing said why.
  it("a worker's working list of the wrong type: named (role working) and read as empty, the other workers' lists still read", async () => {
    const queue = new DrillQueue(redis, `ws${++n}`);
    await fill(queue.keys.ready, "r", 3);
    await redis.set(queue.keys.working("w1"), "hello");
    await redis.hset(queue.keys.working("w3"), "x", "1");
    await redis.rpush(queue.keys.working("w2"), job("held", 1));
    const q = await sample(queue);
    expect([...q.wrongTyped].sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { role: "working", key: queue.keys.working("w1"), reason: `${queue.keys.working("w1")} is a string, not a list (drill never writes that there)` },
      { role: "working", key: queue.keys.working("w3"), reason: `${queue.keys.working("w3")} is a hash, not a list (drill never writes that there)` },
    ]);
    expect(q.working.map((p) => (JSON.parse(p.toString()) as { id: string }).id)).toEqual(["held"]);
    expect(retriedIds(q)).toEqual(["held"]);
    expect(q.queueLen).toBe(3);
    expect(q.workingScanned).toBe(true);

    // A keyspace too big to SCAN: the lists of the workers in the registry, named the same way.
    await redis.hset(workerKeys(queue.keys.queue).workers, { w1: "t", w2: "t" });
    const filler = `ws${n}-filler:`;
    await redis.eval(`for i = 1, tonumber(ARGV[2]) do redis.call('SET', ARGV[1] .. i, '1') end`, 0, filler, WORKING_SCAN_MAX_KEYS);
    try {
      const registry = await sample(queue);
      expect(registry.workingScanned).toBe(false);
      expect(registry.wrongTyped).toEqual([{ role: "working", key: queue.keys.working("w1"), reason: `${queue.keys.working("w1")} is a string, not a list (drill never writes that there)` }]);
      expect(retriedIds(registry)).toEqual(["held"]);
    } finally {
      await redis.eval(`for i = 1, tonumber(ARGV[2]) do redis.call('DEL', ARGV[1] .. i) end`, 0, filler, WORKING_SCAN_MAX_KEYS);
    }
  });

  // QA (scale): the sample script SCANned the whole keyspace inside Redis every sample while it was under
  // WORKING_SCAN_MAX_KEYS: 65 ms of every second with 99 003 unrelated keys, the gate's and worker's commands waiting.
  it("the sample script runs no SCAN (the working lists are looked for between samples, in pages); a crashed worker's list no registry names is still read", async () => {
    const queue = new DrillQueue(redis, `ws${++n}`);
    await fill(queue.keys.ready, "r", 3);
    await redis.hset(workerKeys(queue.keys.queue).workers, "w1", "t");
    await redis.rpush(queue.keys.working("w1"), job("registered", 0));
    await redis.rpush(queue.keys.working("crashed"), job("orphan", 1)); // its registry entry gone, its jobs not
    const filler = `ws${n}-other:`;
    const others = WORKING_SCAN_MAX_KEYS / 5;
    await redis.eval(`for i = 1, tonumber(ARGV[2]) do redis.call('SET', ARGV[1] .. i, 'v') end`, 0, filler, others);
    const monitor = await redis.monitor();
    try {
      const inScripts: string[][] = [];
      const outside: string[][] = [];
      monitor.on("monitor", (_time: string, args: string[], source: string) => (source === "lua" ? inScripts : outside).push(args));
      const r = new QueueReader(server.url, queue.keys, "shared-free", 5_000);
      readers.push(r);
      await r.connect();
      const samples: QueueRaw[] = [];
      for (let i = 0; i < 3; i++) {
        const reading = await r.read();
        if (!reading.ok) throw new Error(reading.reason);
        samples.push(reading.value);
      }
      // MONITOR lines come on their own connection: wait for a marker sent after the samples.
      const marker = `ws${n}-marker`;
      const seen = new Promise<void>((resolve) => monitor.on("monitor", (_time: string, args: string[]) => args[1] === marker && resolve()));
      await redis.echo(marker);
      await seen;
      const ids = (q: QueueRaw) => q.working.map((p) => (JSON.parse(p.toString()) as { id: string }).id).sort();
      for (const q of samples) {
        expect(ids(q)).toEqual(["orphan", "registered"]);
        expect(q.workingScanned).toBe(true);
      }
      expect(retriedIds(samples[0]!)).toEqual(["orphan"]);
      // Nothing in the script whose cost grows with the keyspace; the lists it read are the ones found and the registry's.
      expect(inScripts.filter(([command]) => ["scan", "dbsize", "keys"].includes(command!.toLowerCase()))).toEqual([]);
      expect(inScripts.filter(([command, key]) => command!.toLowerCase() === "lrange" && key === queue.keys.working("crashed"))).toHaveLength(3);
      expect(inScripts.filter(([command, key]) => command!.toLowerCase() === "lrange" && key === queue.keys.working("w1"))).toHaveLength(3);
      // The look outside the script: paged, so Redis answers others between pages.
      expect(outside.filter(([command]) => command!.toLowerCase() === "scan").length).toBeGreaterThan(1);
    } finally {
      monitor.disconnect();
      await redis.eval(`for i = 1, tonumber(ARGV[2]) do redis.call('DEL', ARGV[1] .. i) end`, 0, filler, others);
    }
  });
});
