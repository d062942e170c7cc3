import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { evaluateChecks } from "../../src/doctor/checks.js";
import { gatherFacts } from "../../src/doctor/gather.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let host: FakeHost;
beforeAll(async () => {
  server = await startRedisServer();
  host = makeFakeHost("v2");
});
afterAll(async () => {
  host.cleanup();
  await server.stop();
});

const gatherRedis = async (redisUrl: string) =>
  (await gatherFacts({ roots: host.roots, parent: { kind: "self" }, redisUrl, hogDir: host.root, hogBytes: 1024, stateDir: host.stateDir })).redis;

describe("doctor's Redis settings", () => {
  it("a user without CONFIG: the settings are unread with the server's reason, not null (QA: read as evicting, appendonly no)", async () => {
    const admin = new Redis(server.url);
    try {
      await admin.call("ACL", "SETUSER", "qaR", "on", ">pw", "~*", "&*", "+@all", "-config");
    } finally {
      admin.disconnect();
    }
    const redis = await gatherRedis(`redis://qaR:pw@127.0.0.1:${server.port}`);
    expect(redis).toMatchObject({ given: true, reachable: true });
    if (!redis.given) throw new Error("no Redis in the facts");
    for (const reading of [redis.maxmemoryPolicy, redis.appendonly, redis.maxmemory]) {
      expect(reading).toMatchObject({ ok: false, reason: expect.stringMatching(/^NOPERM .*config.*\(CONFIG refused to this user, or renamed on a managed Redis\)$/) as unknown });
    }
  });

  it("the default user reads them (the helper's server: noeviction, AOF on, no maxmemory)", async () => {
    expect(await gatherRedis(server.url)).toMatchObject({
      maxmemoryPolicy: { ok: true, value: "noeviction" },
      appendonly: { ok: true, value: "yes" },
      maxmemory: { ok: true, value: "0" },
    });
  });

  // QA R re-check 7: doctor said "ready" beside a Redis that refuses every write drill makes.
  const writesRow = async (redisUrl: string) => {
    const facts = await gatherFacts({ roots: host.roots, parent: { kind: "self" }, redisUrl, hogDir: host.root, hogBytes: 1024, stateDir: host.stateDir });
    return evaluateChecks(facts).find((c) => c.name === "redis takes writes") ?? null;
  };

  it("a server that takes writes needs no row; a full one (used_memory at maxmemory, noeviction) fails, naming the fix", async () => {
    expect(await writesRow(server.url)).toBeNull();
    const admin = new Redis(server.url);
    try {
      await admin.config("SET", "maxmemory", "1");
      const row = await writesRow(server.url);
      expect(row).toMatchObject({ status: "fail", detail: expect.stringContaining("full: used_memory is at its maxmemory, so it refuses every write") as unknown });
    } finally {
      await admin.config("SET", "maxmemory", "0");
      admin.disconnect();
    }
  });

  it("a read-only replica fails: point --redis at its primary", async () => {
    const replica = await startRedisServer();
    const admin = new Redis(replica.url);
    try {
      await admin.call("REPLICAOF", "127.0.0.1", String(server.port));
      expect(await writesRow(replica.url)).toMatchObject({ status: "fail", value: "replica", detail: expect.stringContaining("point --redis at its primary") as unknown });
    } finally {
      admin.disconnect();
      await replica.stop();
    }
  });
});
