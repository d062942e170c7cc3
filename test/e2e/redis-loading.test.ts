// A Redis still loading its data set at connect (a big RDB or AOF read after
// a restart): drill said "connected, but no reply within 5000 ms (server
// paused, e.g. SIGSTOP, or not Redis)" and then stood ~10 s more on ioredis's
// loading timer, sending the operator after a paused or dead server. A real
// redis-server made to load slowly (key-load-delay, a debug config of 7.0,
// with events served every 1 KiB loaded so it answers while loading).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createRedis, redisErrorText } from "../../src/queue/redis.js";
import { runDrill } from "../helpers/cli.js";
import { freePort, waitForPing } from "../helpers/redisServer.js";

/** Keys in the RDB; at the delays below the load lasts about 1 s (fast) or well past the 5 s ready bound (slow). */
const KEYS = 8000;

describe("a Redis loading its data set at connect", () => {
  let dir: string;
  let port: number;
  let server: ChildProcess | null = null;

  const start = (extra: string[]): ChildProcess => {
    const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning", ...extra], { stdio: "ignore" });
    server = proc;
    return proc;
  };
  const stop = async (): Promise<void> => {
    const proc = server;
    server = null;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGKILL");
    await new Promise((resolve) => proc.once("exit", resolve));
  };
  /** Started loading: it takes connections (and answers INFO with loading:1). */
  const accepting = async (): Promise<void> => {
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 20))) {
      const open = await new Promise<boolean>((resolve) => {
        const socket = net.connect(port, "127.0.0.1", () => {
          socket.destroy();
          resolve(true);
        });
        socket.once("error", () => resolve(false));
      });
      if (open) return;
    }
    throw new Error(`redis-server on ${port} did not take connections`);
  };
  const loading = (keyLoadDelayUs: number) => start(["--key-load-delay", String(keyLoadDelayUs), "--loading-process-events-interval-bytes", "1024"]);

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-loading-"));
    port = await freePort();
    start(["--enable-debug-command", "local"]);
    await waitForPing(port, 10_000);
    const redis = new Redis(port, "127.0.0.1");
    await redis.call("DEBUG", "POPULATE", KEYS);
    await redis.call("SAVE");
    redis.disconnect();
    await stop();
  });
  afterEach(stop);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("still loading past the ready bound: exit 1 saying it is loading, and how far, not 'no reply'", async () => {
    loading(2000); // 8000 keys at 2 ms: ~16 s
    await accepting();
    const started = Date.now();
    const r = await runDrill(["--state-dir", path.join(dir, "state"), "--redis", `redis://127.0.0.1:${port}`, "report", "--queue", "lq"], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`cannot connect to redis at redis://127\\.0\\.0\\.1:${port}: Redis at 127\\.0\\.0\\.1:${port} is loading its data set from disk \\([\\d.]+% loaded`));
    expect(r.stderr).not.toMatch(/no reply|server paused|did not answer/);
    // The 5 s bound, then out: ioredis's own loading timer held the process ~10 s more (15-16 s in all).
    // A bound on that hang, with room for node's start-up on a loaded host, not a timing claim.
    expect(Date.now() - started, r.stderr).toBeLessThan(12_000);
  }, 40_000);

  it("done loading within the ready bound: the command waits for it and runs", async () => {
    loading(100); // 8000 keys at 0.1 ms: about a second
    await accepting();
    const r = await runDrill(["--state-dir", path.join(dir, "state"), "--redis", `redis://127.0.0.1:${port}`, "gate", "mode", "reject_all", "--queue", "lq"], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toContain("mode reject_all queue=lq");
  }, 40_000);

  it("a command that timed out waiting for the load says so, not 'not connected (down or restarting)'", async () => {
    loading(2000);
    await accepting();
    const redis = createRedis(`redis://127.0.0.1:${port}`, { name: "drill-test-loading", commandTimeoutMs: 1000 });
    try {
      const err = await redis.get("lq:mode").then(() => null, (e: unknown) => e);
      expect(redisErrorText(err, redis)).toMatch(new RegExp(`^Redis at 127\\.0\\.0\\.1:${port} did not answer within 1s: it is loading its data set from disk \\([\\d.]+% loaded`));
    } finally {
      redis.disconnect();
    }
  }, 20_000);

  it("watch --once: the queue fields null, the reason says it is loading (not ioredis's 'max retries per request')", async () => {
    loading(2000);
    await accepting();
    const r = await runDrill(["--json", "--state-dir", path.join(dir, "state"), "--redis", `redis://127.0.0.1:${port}`, "watch", "--once", "--queue", "lq", "--parent", "self", "--name", `loadw${process.pid}`], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(0);
    const sample = JSON.parse(r.stdout.trim()) as { queue_len: unknown; missing: Array<{ field: string; reason: string }> };
    expect(sample.queue_len).toBeNull();
    expect(sample.missing.find((m) => m.field === "queue_len")?.reason).toMatch(new RegExp(`: Redis at 127\\.0\\.0\\.1:${port} is loading its data set from disk \\([\\d.]+% loaded`));
  }, 20_000);
});
