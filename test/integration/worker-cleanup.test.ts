// runWorker's stop against a real redis-server (a fake weights coprocess): every
// cleanup step runs even when one of them fails.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { defaultWorkerConfig } from "../../src/worker/plan.js";
import { runWorker, type Weights } from "../../src/worker/run.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let client: Redis;
let weightsDir = "";
beforeAll(async () => {
  server = await startRedisServer();
  client = new Redis(server.url);
  weightsDir = mkdtempSync(path.join(tmpdir(), "drill-worker-cleanup-"));
});
afterAll(async () => {
  client.disconnect();
  await server.stop();
  rmSync(weightsDir, { recursive: true, force: true });
});

async function clientNames(): Promise<string[]> {
  const list = (await client.client("LIST")) as string;
  return list.split("\n").map((line) => /\bname=(\S*)/.exec(line)?.[1] ?? "").filter((name) => name !== "");
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`not true within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("runWorker's stop", () => {
  it("weights that cannot be unlinked (EACCES): said, and the signal listener and the Redis connection are still released", async () => {
    const stopped = new AbortController();
    stopped.abort(); // stops right after the weights are up
    const removeListener = vi.spyOn(stopped.signal, "removeEventListener");
    const file = path.join(weightsDir, "w1.weights");
    const weights: Weights = {
      pid: 1,
      file,
      fallback: false,
      pass: () => Promise.resolve(1),
      close: () => Promise.reject(new Error(`EACCES: permission denied, rm '${file}'`)),
    };
    const err: string[] = [];
    const summary = await runWorker(
      { queue: "cleanup", workerId: "w1", config: { ...defaultWorkerConfig, weightsBytes: 8192 }, weightsDir, maxJobs: null, idleExitMs: null, durationMs: null, json: false },
      { redisUrl: server.url, roots: new HostRoots(), where: "test", out: () => undefined, err: (line) => err.push(line), signal: stopped.signal, startWeights: () => Promise.resolve(weights) },
    );
    expect(summary.stoppedBy).toBe("signal");
    expect(err.join("\n")).toContain(`could not remove its weights ${file} (EACCES`);
    expect(removeListener).toHaveBeenCalledWith("abort", expect.any(Function));
    // closeRedis sent QUIT: the server drops the connection right after its reply.
    await waitFor(async () => !(await clientNames()).includes("drill-worker:w1"));
  });
});
