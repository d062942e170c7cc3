// `drill worker … | head -1`, `drill pack … | head -1`: the reader of the
// output goes away after the first line. Both change state (a job mid-decode
// in the worker's working list, half the jobs pushed): they run to their own
// end, not to the first write that finds the pipe closed. The built binary,
// a real redis-server on a free port, a real cgroup under the test's own.
import { mkdtempSync, rmSync } from "node:fs";
import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { encodeJob, type Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { forceCleanup, realDrillSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { drillBin } from "../helpers/cli.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const reason = realDrillSkipReason();
if (reason) console.warn(`skipping closed-output tests: ${reason}`);

let server: RedisServer;
let redis: Redis;
let stateDir = "";
let weightsDir = "";
let cg: WorkerCgroup;

beforeAll(async () => {
  if (reason) return;
  stateDir = tempStateDir();
  weightsDir = mkdtempSync("/var/tmp/drill-closed-output-");
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-closed-output" });
  cg = realWorkerCgroup(`closedout${process.pid}`);
  setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 128 * 1024 * 1024, swapMax: 0 });
});

afterAll(async () => {
  if (reason) return;
  try {
    await forceCleanup(cg, stateDir);
  } finally {
    await closeRedis(redis);
    await server?.stop();
    rmSync(weightsDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
});

/** Runs `drill <args>` and closes its stdout and stderr once the first line is out, as `2>&1 | head -1` does. */
async function withReaderGone(args: string[]): Promise<{ exitCode: number | undefined; firstLine: string }> {
  const child = execa("node", [drillBin, ...args], { reject: false, timeout: 60_000, env: { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir } });
  const firstLine = await new Promise<string>((resolve) => child.stdout!.once("data", (chunk: Buffer) => resolve(chunk.toString())));
  child.stdout!.destroy();
  child.stderr!.destroy();
  const result = await child;
  return { exitCode: result.exitCode, firstLine };
}

describe.skipIf(reason)("a command that changes state outlives the reader of its output", () => {
  it("worker: every job it takes is finished (none left in its working list), exit 0", async () => {
    const queue = "closedw";
    const k = queueKeys(queue);
    // One quick job prints the first line; the others finish one after another (10, 20, 30 tokens at 20/s),
    // so a worker that ends at its next write leaves the last ones mid-decode.
    const jobs: Job[] = Array.from({ length: 4 }, (_, i) => ({
      id: String(i + 1), prompt_tokens: 1000, completion_tokens: i === 0 ? 1 : 10 * i, files: 1,
      enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free",
    }));
    for (const j of jobs) {
      await redis.hset(k.inflight, j.id, j.prompt_tokens);
      await redis.rpush(k.admitted, encodeJob(j));
    }
    const r = await withReaderGone([
      "--json", "--redis", server.url, "worker", "--name", cg.name, "--parent", "self", "--queue", queue, "--worker-id", "closed",
      "--weights", "16M", "--weights-dir", weightsDir, "--kv-bytes-per-token", "64", "--decode-tokens-per-s", "20", "--max-jobs", String(jobs.length),
    ]);
    expect(r.firstLine).toMatch(/"event":"done"/);
    expect(r.exitCode).toBe(0);
    expect(await redis.llen(k.working("closed"))).toBe(0);
    expect((await redis.lrange(k.done, 0, -1)).map((d) => (JSON.parse(d) as { id: string }).id).sort()).toEqual(["1", "2", "3", "4"]);
    await assertNoJobLost(redis, queue, jobs.map((j) => j.id));
  });

  it("pack: every job is pushed, exit 0", async () => {
    const queue = "closedp";
    const r = await withReaderGone(["--redis", server.url, "pack", "--queue", queue, "--jobs", "6", "--rate", "10/s", "--prompt-tokens", "100", "--completion-tokens", "1"]);
    expect(r.firstLine).toMatch(/^push job=1 /);
    expect(r.exitCode).toBe(0);
    expect(await redis.llen(queueKeys(queue).ready)).toBe(6);
  });

  // QA: up's sidecar, its stdout an immutable file, died with a stack trace, and up quoted "Node.js v20" as why.
  describe("stdout a file that refuses writes (/dev/full: ENOSPC)", () => {
    const toFull = async (args: string[]) => {
      // The shell's redirect: drill's own fd 1 is the file (execa's `file` target would put a pipe between).
      const r = await execa("bash", ["-c", 'exec node "$0" "$@" > /dev/full', drillBin, ...args], { reject: false, timeout: 60_000, env: { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir } });
      return { exitCode: r.exitCode, stderr: String(r.stderr) };
    };
    it("a command that changes state says it once and goes on: pack pushes every job, exit 0", async () => {
      const queue = "fullp";
      const r = await toFull(["--redis", server.url, "pack", "--queue", queue, "--jobs", "4", "--rate", "20/s", "--prompt-tokens", "100", "--completion-tokens", "1"]);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stderr.match(/^drill: cannot write to stdout/gm)).toEqual(["drill: cannot write to stdout"]);
      expect(r.stderr).toContain("drill: cannot write to stdout (/dev/full): ENOSPC; what it prints there is dropped from here, the command goes on");
      expect(await redis.llen(queueKeys(queue).ready)).toBe(4);
    });
    it("stderr refusing under --json: nothing but JSON on stdout, the command goes on (QA: the notice broke the JSON)", async () => {
      // The gate says its start and stop on stderr, its decisions on stdout.
      const queue = "fullj";
      await redis.rpush(queue, JSON.stringify({ id: "1", prompt_tokens: 100, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" }));
      const r = await execa("bash", ["-c", 'exec node "$0" "$@" 2> /dev/full', drillBin, "--redis", server.url, "--json", "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "1", "--psi-limit", "100", "--psi-rate-limit", "100"], { reject: false, timeout: 60_000, env: { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir } });
      expect(r.exitCode).toBe(0);
      const lines = String(r.stdout).split("\n").filter((l) => l !== "");
      expect(lines.length).toBe(1);
      for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
      expect(await redis.llen(queue)).toBe(0);
    });
    it("a command that only reads ends: watch exits 1 naming the file, no stack trace", async () => {
      const r = await toFull(["--redis", server.url, "--json", "watch", "--count", "3", "--interval", "100ms"]);
      expect(r.exitCode, r.stderr).toBe(1);
      expect(r.stderr.split("\n")).toContain("drill: cannot write to stdout (/dev/full): ENOSPC");
      expect(r.stderr).not.toMatch(/^\s+at |Node\.js v/m);
    });
  });
});
