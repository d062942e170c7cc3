import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/drill/embeddedRedis.js";
import { shellWord } from "../../src/context.js";
import { runDir, writeState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { workerToken } from "../../src/worker/heartbeatToken.js";
import { runDrill } from "../helpers/cli.js";

// QA S 1: a second drill given the first one's embedded Redis (--redis) lost it
// at that drill's rollback, which stopped it: its jobs left in the other drill's
// AOF, while the rollback said "every key in" its export.

const RUN = "sharedA-20260101000000-abcdef";
let root = "";
let stateDir = "";
let embedded: EmbeddedRedis;
let redis: Redis;
let state: DrillState;
beforeAll(async () => {
  // A space in it: every command printed to paste names it quoted.
  root = mkdtempSync(path.join(tmpdir(), "drill-shared redis-"));
  stateDir = path.join(root, "state");
  // Drill sharedA's embedded redis-server, in the run dir up gives it, and the state up writes.
  const dir = path.join(runDir(stateDir, "sharedA", RUN), "redis");
  embedded = await startEmbeddedRedis({ dir });
  const stat = readProcessStat(new HostRoots(), embedded.pid);
  if (!stat.ok) throw new Error(`embedded redis-server ${embedded.pid}: ${stat.reason}`);
  state = {
    version: 1, name: "sharedA", runId: RUN, drillFile: "d.yaml", createdAt: new Date().toISOString(), phase: "stopped", queue: "qa",
    redis: { url: embedded.url, embedded: { dir, port: embedded.port } }, cgroup: null, fileDir: null, owner: { pid: 999_999_999, startTime: 1 },
    processes: [{ role: "redis", key: "redis", pid: embedded.pid, startTime: stat.value.startTime, files: [], intendedAt: new Date().toISOString() }],
  };
  writeState(stateDir, state);
  redis = await connectRedis(embedded.url, { name: "test-shared-redis" });
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  try {
    process.kill(embedded.pid, "SIGKILL");
  } catch {
    // stopped by the rollback, as it should be
  }
  rmSync(root, { recursive: true, force: true });
});

describe("another drill's embedded Redis (built binary)", () => {
  it("up given it with --redis: refused (exit 3) before anything is made, naming the drill it belongs to", async () => {
    const other = path.join(root, "other-state");
    const r = await runDrill(["--state-dir", other, "--redis", embedded.url, "up", "--parent", "self", "--name", "sharedcgB", "--queue", "qb"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout + r.stderr).toContain(`redis ${embedded.url} is the embedded redis-server of drill sharedA (run ${RUN}): that drill's rollback (drill --state-dir ${shellWord(stateDir)} rollback --name sharedA) stops it`);
    // The fix names what this up acts on, as typed (QA: "leave out --redis" alone).
    const otherWord = shellWord(other).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    expect(r.stdout + r.stderr).toMatch(new RegExp(`leave out --redis \\(this drill starts its own: drill --state-dir ${otherWord} up --drill /\\S+/smoke\\.yaml --name sharedcgB --parent self --queue qb\\)`));
    expect(existsSync(path.join(other, "smoke", "state.json"))).toBe(false);
    expect(await redis.keys("qb*")).toEqual([]);
  });

  // QA S re-check 2: it was stopped under a live worker run by hand on its queue; the next rollback, on the
  // Redis started again from the AOF, found no heartbeat and drained the jobs that worker still decoded.
  it("its rollback keeps it running while a worker run by hand on its queue holds jobs there (exit 4); gone, the next rollback ends it", async () => {
    const self = readProcessStat(new HostRoots(), "self");
    if (!self.ok) throw new Error(self.reason);
    await redis.set("qa:workers:byhand", workerToken(process.pid, self.value.startTime), "PX", 60_000);
    await redis.rpush("qa:working:byhand", JSON.stringify({ id: "5" }));
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "sharedA"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain("FAIL stop embedded redis: kept running: a gate or worker run by hand on it still holds jobs (above)");
    expect(await redis.ping()).toBe("PONG");
    expect(await redis.lrange("qa:working:byhand", 0, -1)).toEqual([JSON.stringify({ id: "5" })]);
    await redis.del("qa:workers:byhand");
  });

  it("its rollback stops it and says the keys of other queues it held, and where they stay", async () => {
    await redis.rpush("qa", JSON.stringify({ id: "1" }));
    await redis.rpush("hand", JSON.stringify({ id: "7" }), JSON.stringify({ id: "8" }));
    await redis.set("hand:seq", "8");
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "sharedA"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok {3}stop embedded redis: redis \d+: stopped/);
    expect(r.stdout).toContain(`ok   keys of other queues: it also held keys of queues run there by hand (hand: 2 keys): not this drill's, not exported; they stay in its AOF in ${state.redis.embedded!.dir} (redis-server --dir ${shellWord(state.redis.embedded!.dir)} --appendonly yes`);
    expect(r.stdout).toContain(`(queue qa's keys in ${path.join(stateDir, "sharedA")}`);
    expect(r.stdout).not.toContain("every key in");
  });
});
