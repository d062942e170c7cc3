import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: a gate started during reclaim decided its first interval on avg10
// alone (one sample: no stall rate, no p99) and admitted the backlog; avg10
// lags and may never cross its limit. Here avg10 stays at 0.50 while the
// `total` counter says the host stalls 30 % of the time.

const root = path.resolve(import.meta.dirname, "../..");
let server: RedisServer;
let redis: Redis;
let tmp: string;
let procfs: string;
let stalling: NodeJS.Timeout | undefined;

beforeAll(async () => {
  expect(existsSync(path.join(root, "dist", "commands", "gate.js"))).toBe(true);
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-e2e-cold-start" });
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-cold-start-"));
  procfs = path.join(tmp, "proc");
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  // A 30 % stall, as the kernel's counter shows it (µs of stall per µs of time), rewritten whole every 20 ms.
  const file = path.join(procfs, "pressure", "memory");
  const start = performance.now();
  const write = () => {
    const total = Math.round((performance.now() - start) * 1000 * 0.3);
    writeFileSync(`${file}.tmp`, `some avg10=0.50 avg60=0.10 avg300=0.02 total=${total}\nfull avg10=0.20 avg60=0.05 avg300=0.01 total=${Math.round(total / 2)}\n`);
    renameSync(`${file}.tmp`, file);
  };
  write();
  stalling = setInterval(write, 20);
}, 120_000);
afterAll(async () => {
  clearInterval(stalling);
  await closeRedis(redis);
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function job(id: string): string {
  return JSON.stringify({ id, prompt_tokens: 10, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt: 0, host_class: "shared-free" });
}

async function gate(queue: string, extra: string[]): Promise<string[]> {
  const args = ["--state-dir", path.join(tmp, "state"), "--procfs", procfs, "gate", "--queue", queue, "--interval", "200ms", ...extra];
  const result = await execa("node", ["bin/drill.js", ...args], { cwd: root, reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", DRILL_REDIS_URL: server.url } });
  expect(result.exitCode, String(result.stderr)).toBe(0);
  return String(result.stdout).split("\n").filter((l) => l !== "");
}

describe("a gate started while the host stalls (built binary, fake PSI)", () => {
  it("rejects its first jobs on the stall rate, not admits them on avg10 alone", async () => {
    await redis.rpush("cold", job("1"), job("2"), job("3"));
    const lines = await gate("cold", ["--max-jobs", "3"]);
    expect(lines.length, lines.join("\n")).toBe(3);
    for (const line of lines) expect(line).toMatch(/^reject_host_pressure job=\d psi=0\.50 .*stall_rate=\d+\.\d+/);
  });

  it("--dry-run predicts the same", async () => {
    await redis.rpush("colddry", job("1"));
    const lines = await gate("colddry", ["--dry-run"]);
    expect(lines, lines.join("\n")).toEqual([expect.stringMatching(/^reject_host_pressure job=1 psi=0\.50 .*stall_rate=\d+\.\d+.* dry_run=1$/)]);
  });
});
