import os from "node:os";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { workerToken } from "../../src/worker/heartbeatToken.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA S 4: a drill's rollback moved the jobs of a worker run by hand on its
// queue (outside the drill's cgroup, heartbeat live) to the drain, and the
// worker went on decoding them: a job it finished then would be both done and
// drained. What a live gate or worker holds stays, named; what a killed one's
// heartbeat still counts down over is drained.

let server: RedisServer;
let redis: Redis;
let root: string;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-rollback-held" });
  root = mkdtempSync(path.join(tmpdir(), "drill-rollback-held-"));
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const job = (id: string) => JSON.stringify({ id });

describe("a drill's rollback beside a gate and a worker run by hand on its queue (built binary, own redis-server)", () => {
  it("the live worker's list and admitted stay, named, exit 4; a killed gate's processing list is drained; once the worker is gone, all of it", async () => {
    const stateDir = path.join(root, "state");
    writeFakeDrill(stateDir, "held", "hq", server.url);
    // The hand-run worker: this test process, live on this host.
    const self = readProcessStat(new HostRoots(), "self");
    if (!self.ok) throw new Error(self.reason);
    await redis.set("hq:workers:hand", workerToken(process.pid, self.value.startTime), "PX", 60_000);
    await redis.rpush("hq:working:hand", job("1"), job("2"));
    await redis.rpush("hq:admitted", job("3"));
    // A gate killed a moment ago (a process of this host that is gone): its heartbeat counts down still.
    await redis.set("hq:gates:g0", JSON.stringify({ pid: 999_999_999, start_time: 1, host: os.hostname(), started: Date.now() }), "PX", 60_000);
    await redis.rpush("hq:processing:g0", job("4"));

    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "held"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toMatch(/FAIL re-drain: .*; left 1 in hq:admitted, 2 in hq:working:hand \(held by a live gate or worker\)/);
    expect(r.stderr).toContain("2 job(s) in hq:working:hand held by hq:workers:hand (a gate or worker run by hand on queue hq, not this drill's: rollback does not stop it)");
    expect(r.stderr).toContain("1 job(s) in hq:admitted, which live worker(s) hq:workers:hand take from");
    expect(await redis.lrange("hq:working:hand", 0, -1)).toEqual([job("1"), job("2")]);
    expect(await redis.lrange("hq:admitted", 0, -1)).toEqual([job("3")]);
    expect(await redis.lrange("hq_drain", 0, -1)).toEqual([job("4")]);

    // The worker stopped (its heartbeat gone): the rollback run again drains what it held.
    await redis.del("hq:workers:hand");
    const again = await runDrill(["--state-dir", stateDir, "rollback", "--name", "held"], { timeout: 60_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect((await redis.lrange("hq_drain", 0, -1)).sort()).toEqual([job("1"), job("2"), job("3"), job("4")].sort());
    expect(await redis.exists("hq:working:hand", "hq:admitted", "hq:processing:g0")).toBe(0);
  });
});
