import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DrillState } from "../../src/drill/state.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: rollback printed "FAIL deny-all" and exited 0 with the re-admit
// command: a gate still running kept admitting. Here the server refuses SET
// (an ACL), so the lever cannot be pulled while everything else works.

let server: RedisServer;
let redis: Redis;
let root: string;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-deny-all-failed" });
  root = mkdtempSync(path.join(tmpdir(), "drill-deny-all-failed-"));
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

function drillOn(stateDir: string, name: string, queue: string, phase: DrillState["phase"]): void {
  writeFakeDrill(stateDir, name, queue, server.url, { phase, ...(phase === "complete" ? { completedAt: new Date(Date.now() - 30_000).toISOString() } : {}) });
}

describe("rollback whose deny-all fails (built binary, own redis-server refusing SET)", () => {
  it.each([
    ["a drill's rollback", "stopped"],
    ["the re-drain of a complete drill on a given Redis", "complete"],
  ] as const)("%s: exit 4, 'not rolled back yet', no re-admit; the jobs still drained", async (_what, phase) => {
    const stateDir = path.join(root, phase);
    const queue = `da${phase}`;
    drillOn(stateDir, "dadrill", queue, phase);
    await redis.rpush(queue, JSON.stringify({ id: "1" }), JSON.stringify({ id: "2" }));
    await redis.call("ACL", "SETUSER", "default", "-set");
    try {
      const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "dadrill"], { timeout: 60_000 });
      expect(r.exitCode, r.stdout + r.stderr).toBe(4);
      expect(r.stdout).toMatch(/FAIL deny-all: .*can't run this command/);
      expect(r.stdout).not.toMatch(/Re-enable admission/);
      expect(r.stderr).toMatch(new RegExp(`deny-all failed .*${queue}:mode is not reject_all`));
    } finally {
      await redis.call("ACL", "SETUSER", "default", "+set");
    }
    expect(await redis.llen(`${queue}_drain`)).toBe(2);
  });
});
