import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { CALM_PSI } from "../helpers/psiText.js";

// QA: `gate --dry-run` counted an identical second copy of a job as a second
// admit (its tokens twice, later packed figures off) where the gate re-applies
// the stored decision. The dry run must print what the gate then does.

const root = path.resolve(import.meta.dirname, "../..");

let server: RedisServer;
let redis: Redis;
let tmp: string;
let procfs: string;
let n = 0;

beforeAll(async () => {
  // The binary runs dist/, built by test/globalSetup.ts.
  expect(existsSync(path.join(root, "dist", "commands", "gate.js"))).toBe(true);
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-e2e-dry-run" });
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-dry-run-"));
  procfs = path.join(tmp, "proc");
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  writeFileSync(path.join(procfs, "pressure", "memory"), CALM_PSI);
}, 120_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** A job in DESIGN.md's format; a deadline far enough that slack never decides here. */
function job(id: string, promptTokens: number, attempt = 0): string {
  return JSON.stringify({ id, prompt_tokens: promptTokens, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 600_000, attempt, host_class: "shared-free" });
}

async function gate(queue: string, extra: string[], json = false): Promise<string[]> {
  const args = ["--state-dir", path.join(tmp, "state"), "--procfs", procfs, ...(json ? ["--json"] : []), "gate", "--queue", queue, "--interval", "200ms", ...extra];
  const result = await execa("node", ["bin/drill.js", ...args], { cwd: root, reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", DRILL_REDIS_URL: server.url } });
  expect(result.exitCode, String(result.stderr)).toBe(0);
  return String(result.stdout).split("\n").filter((l) => l !== "");
}

/** Everything the gate reads or writes for a queue, to show the dry run moved nothing. */
async function snapshot(queue: string): Promise<unknown> {
  return {
    ready: await redis.lrange(queue, 0, -1),
    decisions: await redis.hgetall(`${queue}:decisions`),
    inflight: await redis.hgetall(`${queue}:inflight`),
    admitted: await redis.lrange(`${queue}:admitted`, 0, -1),
    dead: await redis.llen(`${queue}:dead`),
  };
}

/** The dry run on the queue as it stands, then the real gate on the same queue. */
async function dryRunThenGate(queue: string): Promise<{ dry: string[]; real: string[] }> {
  const before = await snapshot(queue);
  const dry = await gate(queue, ["--dry-run"]);
  expect(await snapshot(queue)).toEqual(before);
  expect(dry.every((l) => l.endsWith(" dry_run=1")), dry.join("\n")).toBe(true);
  const real = await gate(queue, ["--idle-exit", "1s"]);
  expect(await redis.llen(queue)).toBe(0);
  return { dry, real };
}

const undry = (lines: string[]) => lines.map((l) => l.replace(/ dry_run=1$/, ""));

describe("gate --dry-run predicts the gate's decisions (built binary)", () => {
  it("two identical copies of a job: one admit, then a redelivery of it; its tokens counted once", async () => {
    const queue = `d${++n}`;
    const copy = job("50", 100);
    await redis.rpush(queue, copy, copy, job("51", 100));
    const json = (await gate(queue, ["--dry-run"], true)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(json.map((d) => [d.decision, d.job, d.redelivery ?? false, d.dry_run])).toEqual([
      ["admit", "50", false, true],
      ["admit", "50", true, true],
      ["admit", "51", false, true],
    ]);
    const { dry, real } = await dryRunThenGate(queue);
    expect(real).toEqual(["admit job=50 packed=100 limit=32000", "admit job=50 packed=100 limit=32000 redelivery=1", "admit job=51 packed=200 limit=32000"]);
    expect(undry(dry)).toEqual(real);
  });

  it("an id reused with a different payload: dead, naming the first decision", async () => {
    const queue = `d${++n}`;
    await redis.rpush(queue, job("60", 100), job("60", 300), job("61", 100));
    const { dry, real } = await dryRunThenGate(queue);
    expect(real).toEqual([
      "admit job=60 packed=100 limit=32000",
      'dead job=60 reason=id_reused_with_different_payload detail="first=admit"',
      "admit job=61 packed=200 limit=32000",
    ]);
    expect(undry(dry)).toEqual(real);
    // --json: the cause in `reason`, its figures in `detail`, the text line in `line` (QA: folded into `reason`).
    await redis.rpush(queue, job("60", 300));
    const json = (await gate(queue, ["--dry-run"], true)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(json).toEqual([expect.objectContaining({ event: "dead", job: "60", reason: "id_reused_with_different_payload", detail: "first=admit", line: 'dead job=60 reason=id_reused_with_different_payload detail="first=admit" dry_run=1', dry_run: true })]);
  });

  it("records an earlier gate run left: a stored admit re-applied at any attempt, a stored reject at its attempt, a new attempt of a reject decided afresh, a different payload dead", async () => {
    const queue = `d${++n}`;
    const small = job("70", 100);
    const big = job("71", 40_000);
    await redis.rpush(queue, small, big);
    expect(await gate(queue, ["--idle-exit", "1s"])).toEqual(["admit job=70 packed=100 limit=32000", "reject_packed_tokens job=71 packed=40100 limit=32000 route=retry"]);

    // The same jobs again, as a redelivery, a recovered copy (attempt bumped) and a retry would bring them.
    const bigRetry = JSON.stringify({ ...(JSON.parse(big) as object), attempt: 1 });
    const smallRecovered = JSON.stringify({ ...(JSON.parse(small) as object), attempt: 1 });
    await redis.rpush(queue, small, smallRecovered, job("70", 500), big, bigRetry, job("72", 100));
    const { dry, real } = await dryRunThenGate(queue);
    expect(real).toEqual([
      "admit job=70 packed=100 limit=32000 redelivery=1",
      // The recovered copy's attempt, as a fresh line of it has it (the two lines were the same without it).
      "admit job=70 packed=100 limit=32000 attempt=1 redelivery=1",
      'dead job=70 reason=id_reused_with_different_payload detail="first=admit"',
      "reject_packed_tokens job=71 packed=40100 limit=32000 redelivery=1",
      "reject_packed_tokens job=71 packed=40100 limit=32000 attempt=1 route=retry",
      "admit job=72 packed=200 limit=32000",
    ]);
    expect(undry(dry)).toEqual(real);
  });

  it("a reject says where the gate routes it, route=dead (past the retry budget, or already on the retry class) or route=retry, in the dry run too", async () => {
    const queue = `d${++n}`;
    const onRetryClass = JSON.stringify({ ...(JSON.parse(job("80", 40_000)) as object), host_class: "dedicated" });
    await redis.rpush(queue, onRetryClass, job("81", 40_000, 5), job("82", 40_000));
    const { dry, real } = await dryRunThenGate(queue);
    expect(real).toEqual([
      "reject_packed_tokens job=80 packed=40000 limit=32000 route=dead",
      "reject_packed_tokens job=81 packed=40000 limit=32000 attempt=5 route=dead",
      "reject_packed_tokens job=82 packed=40000 limit=32000 route=retry",
    ]);
    expect(undry(dry)).toEqual(real);
    // --json: the route is a field of its own for both (QA: only route=dead was there).
    const twin = `d${++n}`;
    await redis.rpush(twin, onRetryClass, job("81", 40_000, 5), job("82", 40_000));
    const objects = (await gate(twin, ["--idle-exit", "1s"], true)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(objects.map((o) => [o.job, o.route])).toEqual([["80", "dead"], ["81", "dead"], ["82", "retry"]]);
  });

  // QA T 6: `line` left out mode_value, mode_type and dry_run=1 (README: the gate's objects carry the text line).
  it.each([
    ["a lever that is not a mode (a string)", async (q: string) => void (await redis.set(`${q}:mode`, "banana"))],
    ["a lever that is not a mode (a hash)", async (q: string) => void (await redis.hset(`${q}:mode`, "mode", "admit"))],
    ["an admitting lever", async () => {}],
  ])("--json: each object's line is the text line, every k=v of it: %s", async (_what, lever) => {
    const queue = `d${++n}`;
    const late = JSON.stringify({ ...(JSON.parse(job("92", 100)) as object), enqueue_ts: Date.now() - 599_500 });
    const copy = job("90", 100);
    await redis.rpush(queue, copy, copy, job("91", 40_000, 5), late, "not json");
    await lever(queue);
    // The slack moves between two runs; every other figure is the same.
    const lines = (out: unknown[]) => out.map((l) => String(l).replace(/slack_ms=-?\d+/, "slack_ms=N"));
    const text = await gate(queue, ["--dry-run"]);
    const json = (await gate(queue, ["--dry-run"], true)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines(json.map((o) => o.line))).toEqual(lines(text));
    expect(text).toHaveLength(5);
    // The lever's words stay fields of their own too.
    if (text[0]!.includes("mode_value=")) expect(json[0]).toMatchObject({ mode_value: "banana", dry_run: true });
    if (text[0]!.includes("mode_type=")) expect(json[0]).toMatchObject({ mode_type: "hash", dry_run: true });
    // Applied, without --dry-run: the same on a copy of the queue.
    const twin = `d${++n}`;
    await redis.rpush(twin, ...(await redis.lrange(queue, 0, -1)));
    await lever(twin);
    const real = await gate(queue, ["--idle-exit", "1s"]);
    const realJson = (await gate(twin, ["--idle-exit", "1s"], true)).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines(realJson.map((o) => o.line))).toEqual(lines(real));
  });
});
