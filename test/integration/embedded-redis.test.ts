import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isEmbeddedRedis, requireRestartable, reviveEmbeddedRedis, startEmbeddedRedis } from "../../src/drill/embeddedRedis.js";
import { stopRecordedProcess } from "../../src/drill/processes.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { repoRoot } from "../helpers/cli.js";
import { processesNaming } from "../helpers/hostClean.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const roots = new HostRoots();

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

describe("the embedded redis-server's lifetime (DESIGN: detached children exit by themselves)", () => {
  let root: string;
  let other: RedisServer;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-embedded-"));
    other = await startRedisServer();
  });
  afterAll(async () => {
    await other.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it("exits by itself when its lifetime ends, keeps every write in its AOF, and a revived server has them", async () => {
    const dir = path.join(root, "redis");
    // 2.5 s: the writes below must land before it ends, also on a loaded host (1 s failed once beside three other vitests).
    const server = await startEmbeddedRedis({ dir, lifetimeMs: 2500, env: { ...process.env, DRILL_RUN_ID: "lifetime-test" } });
    const stat = readProcessStat(roots, server.pid);
    expect(stat.ok && stat.value.comm).toMatch(/^redis-server/); // the server's pid, not its wrapper's
    const startTime = stat.ok ? stat.value.startTime : 0;
    const client = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {});
    await client.rpush("jobs", "a", "b");
    expect(await isEmbeddedRedis(client, dir)).toBe(true);
    client.disconnect();

    // No signal from us: the wrapper's SIGTERM ends it, and the wrapper goes with it.
    expect(await waitUntil(() => !isSameProcess(roots, server.pid, startTime), 15_000), "redis-server outlived its lifetime").toBe(true);
    expect(await waitUntil(() => processesNaming(dir).length === 0, 5000), "a process naming the redis dir is left").toBe(true);

    const drillDir = path.join(root, "drill");
    const revived = await reviveEmbeddedRedis(roots, drillDir, dir, "report");
    try {
      // The revived server holds the rollback lock: a rollback meanwhile refuses instead of starting a second server on the AOF.
      expect(JSON.parse(readFileSync(path.join(drillDir, "rollback.lock"), "utf8"))).toMatchObject({ pid: process.pid, what: "report" });
      const again = new Redis(revived.server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      again.on("error", () => {});
      expect(await again.lrange("jobs", 0, -1)).toEqual(["a", "b"]);
      again.disconnect();
    } finally {
      await revived.stop();
    }
    expect(processesNaming(dir)).toEqual([]);
    expect(existsSync(path.join(drillDir, "rollback.lock")), "lock released").toBe(false);
  }, 30_000);

  it("a Redis answering on the port from another dir is not the drill's", async () => {
    const client = new Redis(other.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {});
    try {
      expect(await isEmbeddedRedis(client, path.join(root, "redis"))).toBe(false);
      expect(await isEmbeddedRedis(client, other.dir)).toBe(true);
    } finally {
      client.disconnect();
    }
  });

  it("a state dir reached through a symlink: its live server is still the drill's, and no second one is started on its AOF", async () => {
    const real = mkdtempSync(path.join(root, "real-"));
    const link = path.join(root, "link");
    symlinkSync(real, link);
    const dir = path.join(link, "redis");
    const server = await startEmbeddedRedis({ dir, lifetimeMs: 30_000 });
    const client = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {});
    try {
      expect(await isEmbeddedRedis(client, dir)).toBe(true);
      expect(() => requireRestartable(roots, dir)).toThrow(/still runs in .* not starting a second server/);
    } finally {
      client.disconnect();
      const stat = readProcessStat(roots, server.pid);
      await stopRecordedProcess(roots, { pid: server.pid, startTime: stat.ok ? stat.value.startTime : null });
    }
    expect(() => requireRestartable(roots, dir)).not.toThrow();
    expect(() => requireRestartable(roots, path.join(root, "never-made"))).toThrow(/no Redis data dir/);
  });

  // CI: `drill up` whose redis-server exited at start said so at once, then stayed 10 s: its pings went on to their bound.
  it("a redis-server gone at start: said at once, and nothing keeps the caller from exiting (its pings stop with it)", async () => {
    const bin = mkdtempSync(path.join(root, "bin-"));
    writeFileSync(path.join(bin, "redis-server"), "#!/bin/sh\necho 'fatal at start' >&2\nexit 1\n");
    chmodSync(path.join(bin, "redis-server"), 0o755);
    // A start bound longer than the child's own bound: a ping left running holds it past execa's timeout (exit code not 0).
    const script = `import { startEmbeddedRedis } from ${JSON.stringify(path.join(repoRoot, "dist/drill/embeddedRedis.js"))};
      await startEmbeddedRedis({ dir: ${JSON.stringify(path.join(root, "gone-at-start"))}, startTimeoutMs: 600000 }).catch((err) => console.log(err.message));`;
    const child = await execa(process.execPath, ["--input-type=module", "-e", script], { reject: false, timeout: 60_000, env: { PATH: `${bin}:${process.env.PATH ?? ""}` } });
    expect(child.exitCode, `${String(child.stdout)}${String(child.stderr)}`).toBe(0);
    expect(String(child.stdout)).toMatch(/^redis-server exited at start \(code 1\): fatal at start; see \S+redis\.stderr$/);
  }, 90_000);

  it("says redis-server is not on PATH when its wrapper cannot find it (timeout exits 127)", async () => {
    const bin = mkdtempSync(path.join(root, "bin-"));
    symlinkSync("/usr/bin/timeout", path.join(bin, "timeout"));
    await expect(startEmbeddedRedis({ dir: path.join(root, "nopath"), lifetimeMs: 5000, env: { ...process.env, PATH: bin } })).rejects.toThrow(
      /cannot start redis-server: not on PATH/,
    );
  });
});
