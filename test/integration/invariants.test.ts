import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DrillQueue } from "../../src/queue/queue.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { assertNoJobLost, assertNoJobLostInExport } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// The checker itself: a job key it cannot read must fail the check, not be skipped.
describe("assertNoJobLost on a real Redis", () => {
  let server: RedisServer;
  let redis: Redis;
  beforeAll(async () => {
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-invariants" });
  });
  afterAll(async () => {
    await closeRedis(redis);
    await server?.stop();
  });

  it("fails on a job key that is not a list, naming the key and its type", async () => {
    const queue = new DrillQueue(redis, "inv1");
    const job = await queue.push({ promptTokens: 10, completionTokens: 1, files: 1, deadlineMs: 8000, hostClass: "shared-free" });
    await assertNoJobLost(redis, "inv1", [job.id]);
    await redis.set("inv1:working:w1", "x");
    await expect(assertNoJobLost(redis, "inv1", [job.id])).rejects.toThrow(/inv1:working:w1 is a string, not a list/);
    await redis.del("inv1:working:w1");
    await redis.hset("inv1_drain", "f", "v");
    await expect(assertNoJobLost(redis, "inv1", [job.id])).rejects.toThrow(/inv1_drain is a hash, not a list/);
  });

  it("passes over keys that do not exist and the queue's keys of other types", async () => {
    const queue = new DrillQueue(redis, "inv2");
    const job = await queue.push({ promptTokens: 10, completionTokens: 1, files: 1, deadlineMs: 8000, hostClass: "shared-free" });
    // seq (string), stats (hash), a gate heartbeat (string): not job lists, never matched.
    await redis.hset("inv2:stats", "retry_count", "1");
    await redis.set("inv2:gates:g1", "alive");
    await assertNoJobLost(redis, "inv2", [job.id]);
  });
});

describe("assertNoJobLostInExport", () => {
  it("fails on a job key exported as another type, naming it", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "drill-inv-"));
    try {
      const file = path.join(dir, "final.jsonl");
      const job = { key: "jobs", type: "list", ttl_ms: null, value: [{ utf8: JSON.stringify({ id: "1" }) }] };
      const seq = { key: "jobs:seq", type: "string", ttl_ms: null, value: { utf8: "1" } };
      writeFileSync(file, [job, seq].map((e) => JSON.stringify(e)).join("\n") + "\n");
      assertNoJobLostInExport(file, "jobs", ["1"]);
      const odd = { key: "jobs:retry:dedicated", type: "hash", ttl_ms: null, value: { f: { utf8: "v" } } };
      writeFileSync(file, [job, seq, odd].map((e) => JSON.stringify(e)).join("\n") + "\n");
      expect(() => assertNoJobLostInExport(file, "jobs", ["1"])).toThrow(/jobs:retry:dedicated is a hash, not a list/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
