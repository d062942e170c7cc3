// QA: a worker run by hand on queue q6, its cgroup torn down, while its Redis never held a key of q6.
// The teardown said q6's "admission is still open" and sent the operator to `rollback --queue q6`,
// which found no key ("nothing to do"), wrote no lever, and still printed "Re-enable admission ...
// gate mode admit --queue q6" for a queue it never closed.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueClosingLines } from "../../src/commands/rollback.run.js";
import type { GlobalOptions } from "../../src/context.js";
import { rollbackQueue } from "../../src/drill/rollback.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { queuesLeftOpenLines, readServedQueues } from "../../src/worker/served.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let stateDir = "";

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-keyless-"));
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-keyless" });
});

afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

describe("a served queue whose Redis holds no key of it", () => {
  it("the teardown's note does not say its admission is open, nor send a rollback to it; a queue with a key still is", async () => {
    await redis.rpush(queueKeys("held").admitted, "x");
    const served = [{ queue: "q6", url: server.url }, { queue: "held", url: server.url }];
    const read = await readServedQueues(served, { stateDir });
    expect(read.open.map((q) => q.queue)).toEqual(["held"]);
    expect(read.keyless).toEqual([{ queue: "q6", url: server.url }]);
    const lines = queuesLeftOpenLines(read.open, served, read.keyless);
    const q6 = lines.filter((l) => l.startsWith("queue q6 "));
    expect(q6).toEqual([`queue q6 on ${server.url}: its worker is gone; that Redis holds no key of queue q6 (nothing was queued or admitted there, no lever set): nothing to close or drain`]);
    expect(lines.find((l) => l.startsWith("queue held "))).toContain("but its admission is still open");
  });

  it("its rollback --queue wrote no lever: no 'Re-enable admission' nor gate mode admit for it", async () => {
    const result = await rollbackQueue(server.url, "q6", "drill rollback --queue q6", new HostRoots(), () => {});
    expect(await redis.exists(queueKeys("q6").mode)).toBe(0);
    const at: GlobalOptions = { redisUrl: server.url, redisTyped: true, stateDir, procfs: "/proc", sysfs: "/sys", json: false, color: false };
    const lines = queueClosingLines(result, server.url, "unused", at);
    expect(lines.join("\n")).not.toMatch(/Re-enable admission|gate mode admit|report --queue/);
    expect(lines).toEqual(["queue q6: LLEN 0 in q6_drain", `Nothing to re-admit: ${server.url} held no key of queue q6 when this rollback looked, so it set no lever there`]);
  });

  it("a queue it closed still gets the re-admit hint", async () => {
    await redis.rpush("closing", "x");
    const result = await rollbackQueue(server.url, "closing", "drill rollback --queue closing", new HostRoots(), () => {});
    expect(await redis.get(queueKeys("closing").mode)).toBe("reject_all");
    const at: GlobalOptions = { redisUrl: server.url, redisTyped: true, stateDir, procfs: "/proc", sysfs: "/sys", json: false, color: false };
    expect(queueClosingLines(result, server.url, "unused", at).join("\n")).toContain("Re-enable admission only once");
  });
});
