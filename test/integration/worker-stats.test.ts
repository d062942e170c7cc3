import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis, runScript } from "../../src/queue/redis.js";
import { doneScript } from "../../src/worker/scripts.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-worker-stats" });
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
});

// QA: after on-time, never-retried jobs `HGETALL jobs:stats` had no jobs_late
// and no retry_count (DESIGN lists both): a script's HGET got nil, not 0.
describe("the worker's done script (real redis)", () => {
  it("leaves every stats field of DESIGN's table, 0 when nothing was late or retried", async () => {
    const keys = ["s1:working:w", "s1:done", "s1:stats", "s1:inflight", "s1:first_token"];
    await redis.rpush(keys[0]!, "payload-7");
    await redis.hset(keys[3]!, "7", "100");
    expect(await runScript(redis, doneScript, keys, ["payload-7", '{"id":"7"}', "7", "0", "0"])).toBe(1);
    expect(await redis.hgetall(keys[2]!)).toEqual({ jobs_done: "1", jobs_late: "0", retry_count: "0" });
    await redis.rpush(keys[0]!, "payload-8");
    expect(await runScript(redis, doneScript, keys, ["payload-8", '{"id":"8"}', "8", "1", "1"])).toBe(1);
    expect(await redis.hgetall(keys[2]!)).toEqual({ jobs_done: "2", jobs_late: "1", retry_count: "1" });
    expect(await redis.hlen(keys[3]!)).toBe(0);
  });
});
