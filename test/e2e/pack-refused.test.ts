import path from "node:path";
import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const root = path.resolve(import.meta.dirname, "../..");

let server: RedisServer;
let redis: Redis;
let n = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-e2e" });
}, 60_000);
afterEach(async () => {
  await redis.config("SET", "maxmemory", "0");
});
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
});

const lines = (text: unknown) => String(text).split("\n").filter((l) => l !== "");

/**
 * A pack of 10 at 2/s whose Redis refuses every write from its 3rd push on:
 * maxmemory 1 under noeviction ("OOM command not allowed"), set once job=2 is out.
 */
async function packOntoFullRedis(queue: string, json: boolean) {
  const pack = execa("node", ["bin/drill.js", ...(json ? ["--json"] : []), "pack", "--jobs", "10", "--rate", "2/s", "--prompt-tokens", "1000", "--queue", queue], {
    cwd: root,
    reject: false,
    timeout: 30_000,
    env: { FORCE_COLOR: "0", DRILL_REDIS_URL: server.url },
  });
  await new Promise<void>((resolve) => pack.stdout.on("data", (chunk: Buffer) => /"id":"2"|push job=2 /.test(String(chunk)) && resolve()));
  await redis.config("SET", "maxmemory", "1");
  return pack;
}

const OOM = /^drill: pack: could not push the 3rd of 10 jobs in 10 send\(s\): OOM command not allowed when used memory > 'maxmemory'/;

// QA: a pack that gave up on a Redis refusing its pushes printed only the error, no summary of what it had packed.
describe("drill pack on a Redis that refuses its pushes (built binary)", () => {
  it("gives up after its sends with the summary of what was packed on stdout, then the error naming the 3rd of 10 jobs, exit 1", async () => {
    const queue = `full${++n}`;
    const result = await packOntoFullRedis(queue, false);
    expect(result.exitCode, result.stderr).toBe(1);
    expect(lines(result.stdout).at(-1)).toBe(`packed 2 job(s) onto ${queue} (job=1..2), 2000 prompt tokens; 8 of 10 not packed`);
    expect(lines(result.stderr).at(-1)).toMatch(OOM);
    expect(result.stderr).toContain("pack: push of the 3rd of 10 jobs failed: ");
    await assertNoJobLost(redis, queue, ["1", "2"]);
  }, 40_000);

  it("--json: the packed document with not_packed before the error", async () => {
    const queue = `full${++n}`;
    const result = await packOntoFullRedis(queue, true);
    expect(result.exitCode, result.stderr).toBe(1);
    const docs = lines(result.stdout).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(docs.map((d) => d.event)).toEqual(["push", "push", "packed"]);
    expect(docs.at(-1)).toEqual({ event: "packed", queue, jobs: ["1", "2"], prompt_tokens_total: 2000, not_packed: 8 });
    expect(lines(result.stderr).at(-1)).toMatch(OOM);
  }, 40_000);
});
