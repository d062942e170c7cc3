import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/**
 * QA: a second `drill gate` with a live gate's --gate-id was not refused
 * (a worker with a live worker's id is, exit 3): both took into one
 * processing list, and when either stopped it gave back the other's job.
 */
describe("gate --gate-id of a live gate (real redis)", () => {
  let server: RedisServer;
  let redis: Redis;
  beforeAll(async () => {
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-gate-duplicate-id" });
  });
  afterAll(async () => {
    await closeRedis(redis);
    await server?.stop();
  });

  const gateArgs = (queue: string, id: string) => [drillBin, "--redis", server.url, "gate", "--queue", queue, "--gate-id", id, "--duration", "30s"];
  const until = async (what: string, probe: () => Promise<boolean>): Promise<void> => {
    const deadline = Date.now() + 15_000;
    while (!(await probe())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };

  it("is refused (exit 3) naming the live gate, which keeps its heartbeat; one whose gate was SIGKILLed is taken over at once", async () => {
    const queue = `dupgate${process.pid}`;
    const k = queueKeys(queue);
    const first = execa("node", gateArgs(queue, "g1"), { reject: false, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    try {
      await until("the first gate's heartbeat", async () => (await redis.exists(k.gateHeartbeat("g1"))) === 1);
      const heartbeat = await redis.get(k.gateHeartbeat("g1"));
      const second = await runDrill(["--redis", server.url, "gate", "--queue", queue, "--gate-id", "g1", "--duration", "30s"], { timeout: 20_000 });
      expect(second.exitCode, second.stderr).toBe(3);
      expect(second.stderr).toContain(`gate id g1 is already running (pid ${first.pid}, heartbeat ${k.gateHeartbeat("g1")}); stop it or give another --gate-id`);
      // Its stop gave nothing back nor deleted the live gate's heartbeat.
      expect(await redis.get(k.gateHeartbeat("g1"))).toBe(heartbeat);
      expect(first.exitCode).toBeNull();
    } finally {
      first.kill("SIGKILL");
      await first;
    }
    // The SIGKILLed gate's heartbeat still counts down: its process is gone, so the id is free at once.
    expect(await redis.exists(k.gateHeartbeat("g1"))).toBe(1);
    const again = execa("node", gateArgs(queue, "g1"), { reject: false, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    try {
      await until("the restarted gate's heartbeat", async () => JSON.parse((await redis.get(k.gateHeartbeat("g1"))) ?? "{}").pid === again.pid);
    } finally {
      again.kill("SIGTERM");
    }
    const stopped = await again;
    expect(stopped.exitCode, String(stopped.stderr)).toBe(143);
  }, 60_000);
});
