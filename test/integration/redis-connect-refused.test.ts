// A Redis that refuses drill at the connection (maxclients, an ACL denying
// INFO) or does not answer (CLIENT PAUSE): said in drill's words, naming the
// address and the fix, never ioredis's "write EPIPE", "Command timed out" or
// its console advice.
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { closeRedis, connectRedis, redisErrorText } from "../../src/queue/redis.js";
import { QueueReader } from "../../src/sampler/read.js";
import { queueKeys } from "../../src/queue/keys.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  admin = await connectRedis(server.url, { name: "test-connect-refused-admin" });
});
afterEach(async () => {
  await admin.config("SET", "maxclients", "10000");
});
afterAll(async () => {
  await closeRedis(admin);
  await server?.stop();
});

describe("a Redis at its maxclients", () => {
  it("a command's connect names the refusal, the address and the fix, not 'write EPIPE'", async () => {
    await admin.config("SET", "maxclients", "1"); // admin holds the one slot
    const refused = await connectRedis(server.url, { name: "test-maxclients" }).then(
      () => null,
      (err: Error) => err,
    );
    expect(refused?.message).toBe(
      `Redis at 127.0.0.1:${server.port} refused the connection: max number of clients reached (redis is at its maxclients: raise it (CONFIG SET maxclients, from a connection already open) or close idle clients (CLIENT LIST shows them))`,
    );
  });

  it("watch's reader says it as the reason its queue fields are null", async () => {
    await admin.config("SET", "maxclients", "1");
    const reader = new QueueReader(server.url, queueKeys("maxq"), "dedicated", 300);
    try {
      await reader.connect();
      const reading = await reader.read();
      expect(reading.ok ? null : reading.reason).toMatch(new RegExp(`Redis at 127\\.0\\.0\\.1:${server.port} refused the connection: max number of clients reached$`));
    } finally {
      reader.close();
    }
  });
});

describe("a Redis user the ACL denies INFO (ioredis's ready check)", () => {
  it("connects without ioredis's console advice on stderr", async () => {
    await admin.call("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info");
    const warn = vi.spyOn(console, "warn");
    const redis = await connectRedis(`redis://noinfo:pw@127.0.0.1:${server.port}`, { name: "test-noinfo" });
    try {
      expect(await redis.ping()).toBe("PONG");
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
      await closeRedis(redis);
    }
  });
});

describe("a paused Redis (CLIENT PAUSE)", () => {
  it("a command that times out is said as the address not answering within the command timeout, with what to check", async () => {
    const redis = await connectRedis(server.url, { name: "test-paused", commandTimeoutMs: 200 });
    try {
      // Short: a pause holds every client, the one that would unpause it too.
      await admin.client("PAUSE", "1000", "ALL");
      const err = await redis.set("paused:k", "v").then(
        () => null,
        (e: Error) => e,
      );
      expect(redisErrorText(err, redis)).toBe(`Redis at 127.0.0.1:${server.port} did not answer within 200ms: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded`);
    } finally {
      await closeRedis(redis);
    }
  });
});

describe("a Redis that does not answer the connection's ready check in time", () => {
  it("watch's reader keeps the bound's reason (no reply within its timeout), not ioredis's 'max retries' for the commands dropped with the connection", async () => {
    // CI: a loading server's watch sample said "Reached the max retries per request limit (which is 0)" instead.
    const reader = new QueueReader(server.url, queueKeys("pausedq"), "dedicated", 300);
    try {
      await admin.client("PAUSE", "1500", "ALL");
      await reader.connect();
      const reading = await reader.read();
      const reason = reading.ok ? null : reading.reason;
      expect(reason).toMatch(/connected, but no reply within 300 ms \(server paused, e\.g\. SIGSTOP, or not Redis\)$/);
      expect(reason).not.toMatch(/max retries/);
    } finally {
      reader.close();
      await admin.client("UNPAUSE");
    }
  });
});
