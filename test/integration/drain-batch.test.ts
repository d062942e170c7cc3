import { spawn } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drainReady, drainUnheld } from "../../src/drill/drain.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { encodeJob } from "../../src/queue/job.js";
import { queueKeys, type QueueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis, runScript } from "../../src/queue/redis.js";
import { drainScript } from "../../src/queue/scripts.js";
import { repoRoot } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let n = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-drain-batch" });
  // Loaded ahead: each step is then one EVALSHA, with no NOSCRIPT and EVAL the first time.
  await redis.script("LOAD", drainScript.source);
});
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
});

/** A unique queue per test: keys never collide. */
const freshKeys = (): QueueKeys => queueKeys(`dq${++n}`);

const payload = (id: number) => encodeJob({ id: String(id), prompt_tokens: 10, completion_tokens: 1, files: 0, enqueue_ts: Date.now(), deadline_ms: 3_600_000, attempt: 0, host_class: "shared-free" });

/** Jobs 1..count at the end of `list`, pushed a thousand at a time. */
async function pushJobs(list: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let from = 1; from <= count; from += 1000) {
    const chunk = Array.from({ length: Math.min(1000, count - from + 1) }, (_, i) => from + i);
    await redis.rpush(list, ...chunk.map(payload));
    ids.push(...chunk.map(String));
  }
  return ids;
}

const idsIn = async (list: string): Promise<string[]> => (await redis.lrange(list, 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id);

/** Calls of each command since `CONFIG RESETSTAT` (scripts' commands included). */
async function commandCalls(): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const m of (await redis.info("commandstats")).matchAll(/^cmdstat_(\S+):calls=(\d+)/gm)) calls[m[1]!] = Number(m[2]);
  return calls;
}

describe("rollback's drain, a batch per step (QA: one LMOVE a job took 27 s for 50 000 jobs)", () => {
  it("moves the ready list in a few script calls, to the END of a drain already there, in order, saying how far it got", async () => {
    const keys = freshKeys();
    // An earlier rollback's drain: never replaced.
    await redis.rpush(keys.drain, payload(100001), payload(100002));
    const ids = await pushJobs(keys.ready, 2500);
    await redis.config("RESETSTAT");
    const said: Array<[number, number]> = [];
    const drained = await drainReady(redis, keys, { onProgress: (moved, ofAbout) => said.push([moved, ofAbout]), everyMs: 0 });
    const calls = await commandCalls();
    expect(drained).toEqual({ moved: 2500, from: { [keys.ready]: 2500 }, drainLength: 2502 });
    expect(await idsIn(keys.drain)).toEqual(["100001", "100002", ...ids]);
    expect(await redis.exists(keys.ready)).toBe(0);
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0), JSON.stringify(calls)).toBe(3);
    expect(calls.lmove, "a command per job").toBeUndefined();
    expect(said).toEqual([
      [1000, 2500],
      [2000, 2500],
      [2500, 2500],
    ]);
  });

  it("moves admitted and dead gates' and workers' lists in batches, releasing each job's packed tokens in the same step", async () => {
    const keys = freshKeys();
    const admitted = await pushJobs(keys.admitted, 1500);
    await redis.rpush(keys.processing("g1"), payload(9001), payload(9002));
    await redis.hset(keys.inflight, Object.fromEntries([...admitted, "9001", "9002"].map((id) => [id, "11"])));
    // Admitted by a gate after this drain (nothing of it drained): its tokens stay packed.
    await redis.hset(keys.inflight, "other", "5");
    await redis.config("RESETSTAT");
    const drained = await drainUnheld(redis, keys, new HostRoots());
    const calls = await commandCalls();
    expect(drained).toEqual({ moved: 1502, from: { [keys.admitted]: 1500, [keys.processing("g1")]: 2 }, drainLength: 1502, held: [] });
    expect(await idsIn(keys.drain)).toEqual([...admitted, "9001", "9002"]);
    expect(await redis.hgetall(keys.inflight)).toEqual({ other: "5" });
    expect((calls.evalsha ?? 0) + (calls.eval ?? 0), JSON.stringify(calls)).toBe(3);
    expect(calls.lmove, "a command per job").toBeUndefined();
  });

  it("a job no longer at the head when its batch runs is not moved twice: the batch stops there, the next one reads the list again", async () => {
    const keys = freshKeys();
    await pushJobs(keys.admitted, 3);
    // As if a worker took job 1 between the drain's read and its step: the head is job 2 now.
    const stale = [payload(1), "1", payload(2), "2"];
    await redis.lpop(keys.admitted);
    await redis.hset(keys.inflight, "2", "11");
    expect(await runScript(redis, drainScript, [keys.admitted, keys.drain, keys.inflight], ["2", ...stale])).toEqual([0, ""]);
    expect(await redis.llen(keys.admitted)).toBe(2);
    expect(await redis.hget(keys.inflight, "2")).toBe("11");
  });

  it("an inflight of another type is not written, and named: the jobs still go to the drain", async () => {
    const keys = freshKeys();
    const admitted = await pushJobs(keys.admitted, 2);
    await redis.set(keys.inflight, "not a hash");
    const drained = await drainUnheld(redis, keys, new HostRoots());
    expect(drained.moved).toBe(2);
    expect(drained.unreleased).toEqual([`${keys.inflight} is a string, not a hash (drill never writes that there)`]);
    expect(await idsIn(keys.drain)).toEqual(admitted);
    expect(await redis.get(keys.inflight)).toBe("not a hash");
  });

  it("a rollback SIGKILLed mid-drain has moved whole batches; the next drain moves the rest, each job once, in order", async () => {
    const keys = freshKeys();
    const ids = await pushJobs(keys.ready, 3000);
    // The built drain in a child that holds at its first progress line, where it is killed.
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `
        import { drainReady } from ${JSON.stringify(pathToFileURL(path.join(repoRoot, "dist/drill/drain.js")).href)};
        import { queueKeys } from ${JSON.stringify(pathToFileURL(path.join(repoRoot, "dist/queue/keys.js")).href)};
        import { Redis } from "ioredis";
        const redis = new Redis(${JSON.stringify(server.url)});
        await drainReady(redis, queueKeys(${JSON.stringify(keys.queue)}), {
          everyMs: 0,
          onProgress: (moved) => {
            process.stdout.write("moved " + moved + "\\n");
            Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60_000);
          },
        });
        process.stdout.write("finished\\n");
        process.exit(0);
        `,
      ],
      { cwd: repoRoot, stdio: ["ignore", "pipe", "inherit"] },
    );
    const first = await new Promise<string>((resolve) => child.stdout.once("data", (chunk: Buffer) => resolve(chunk.toString().trim())));
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(first).toBe("moved 1000");
    expect(await redis.llen(keys.drain)).toBe(1000);
    expect(await redis.llen(keys.ready)).toBe(2000);
    expect((await drainReady(redis, keys)).moved).toBe(2000);
    expect(await idsIn(keys.drain)).toEqual(ids);
  });
});
