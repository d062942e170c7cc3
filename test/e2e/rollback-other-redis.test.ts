import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA W 1, 2: `rollback --name X --redis U` (or DRILL_REDIS_URL exported for
// hand-run commands) rolled back U instead of the drill's recorded Redis: the
// lever and an empty export written there, the drill's own queue left
// admitting (another db) or its embedded Redis stopped with every job in it,
// and the rollback "complete", exit 0. A drill's rollback takes its own Redis;
// another one given is used only where the recorded one is gone and the given
// one holds the drill's queue (the Redis moved).

let server: RedisServer;
let root: string;
const dbs = new Map<number, Redis>();
const db = async (n: number): Promise<Redis> => {
  let r = dbs.get(n);
  if (r === undefined) {
    r = await connectRedis(`${server.url}/${n}`, { name: `test-rollback-given-${n}` });
    dbs.set(n, r);
  }
  return r;
};
const job = (id: string) => JSON.stringify({ id });

beforeAll(async () => {
  server = await startRedisServer();
  root = mkdtempSync(path.join(tmpdir(), "drill-rollback-given-"));
}, 60_000);
afterAll(async () => {
  for (const r of dbs.values()) await closeRedis(r);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe("a drill's rollback given a --redis that is not the drill's (built binary, own redis-server)", () => {
  it("another database of the same server: the drill's own db is flipped, drained and exported; the given one is left alone, said", async () => {
    const stateDir = path.join(root, "db");
    writeFakeDrill(stateDir, "gdb", "gq", `${server.url}/3`);
    const own = await db(3);
    await own.set("gq:mode", "admit");
    await own.rpush("gq", job("1"));
    await own.rpush("gq:admitted", job("2"));

    const r = await runDrill(["--state-dir", stateDir, "--redis", server.url, "rollback", "--name", "gdb"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`connect redis: drill gdb's Redis ${server.url}/3 (recorded in state.json); --redis ${server.url} is not its Redis: left alone`);
    expect(await own.get("gq:mode")).toBe("reject_all");
    expect((await own.lrange("gq_drain", 0, -1)).sort()).toEqual([job("1"), job("2")]);
    expect(await (await db(0)).dbsize()).toBe(0);
    // The re-admit hint names the drill's Redis, not the one given.
    expect(r.stdout).toContain(`gate mode admit --queue gq`);
    expect(r.stdout).toContain(`--redis ${server.url}/3 gate mode admit`);

    // Complete: a job pushed since is drained from the drill's db, also with DRILL_REDIS_URL set to another.
    await own.rpush("gq", job("3"));
    const again = await runDrill(["--state-dir", stateDir, "rollback", "--name", "gdb"], { timeout: 60_000, env: { DRILL_REDIS_URL: `${server.url}/5` } });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect((await own.lrange("gq_drain", 0, -1)).sort()).toEqual([job("1"), job("2"), job("3")]);
    expect(await (await db(5)).dbsize()).toBe(0);
  });

  it("its embedded Redis answers: that one is drained and exported before it is stopped; the given one is left alone", async () => {
    const embedded = await startRedisServer();
    try {
      const stateDir = path.join(root, "embedded");
      writeFakeDrill(stateDir, "gemb", "eq", embedded.url, { redis: { url: embedded.url, embedded: { dir: embedded.dir, port: embedded.port } } });
      const own = await connectRedis(embedded.url, { name: "test-rollback-given-embedded" });
      try {
        await own.rpush("eq:admitted", job("1"), job("2"));
        await own.rpush("eq:working:w1", job("3"));
      } finally {
        await closeRedis(own);
      }
      const r = await runDrill(["--state-dir", stateDir, "--redis", `${server.url}/7`, "rollback", "--name", "gemb"], { timeout: 60_000 });
      expect(r.exitCode, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toContain(`connect redis: its embedded Redis at ${embedded.url} (--redis ${server.url}/7 is not its Redis: left alone)`);
      expect(await (await db(7)).dbsize()).toBe(0);
      const exported = readdirSync(path.join(stateDir, "gemb")).filter((f) => /^final-.*\.jsonl$/.test(f));
      expect(exported).toHaveLength(1);
      const text = readFileSync(path.join(stateDir, "gemb", exported[0]!), "utf8");
      for (const id of ["1", "2", "3"]) expect(text).toContain(`\\"id\\":\\"${id}\\"`);
    } finally {
      await embedded.stop();
    }
  });

  it("its recorded Redis is gone and the given one holds its queue (the Redis moved): rolled back there, state.json records it", async () => {
    const stateDir = path.join(root, "moved");
    // Port 1: nothing listens, the connection is refused at once.
    writeFakeDrill(stateDir, "gmv", "mq", "redis://127.0.0.1:1");
    const moved = await db(4);
    await moved.rpush("mq", job("1"));
    await moved.set("mq:seq", "1");

    // DRILL_REDIS_URL is exported for the commands run by hand: a queue of that name there is no sign it moved.
    const fromEnv = await runDrill(["--state-dir", stateDir, "rollback", "--name", "gmv"], { timeout: 60_000, env: { DRILL_REDIS_URL: `${server.url}/4` } });
    expect(fromEnv.exitCode, fromEnv.stdout + fromEnv.stderr).toBe(4);
    expect(fromEnv.stdout).toContain(`DRILL_REDIS_URL ${server.url}/4 is not its Redis: left alone (if the drill's Redis moved there, give it as --redis)`);
    expect(await moved.llen("mq")).toBe(1);
    expect(await moved.exists("mq:mode")).toBe(0);

    const r = await runDrill(["--state-dir", stateDir, "--redis", `${server.url}/4`, "rollback", "--name", "gmv"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`connect redis: its Redis redis://127\\.0\\.0\\.1:1 does not answer; --redis ${server.url.replace(/\./g, "\\.")}/4 holds its queue mq: rolled back there`));
    expect(await moved.lrange("mq_drain", 0, -1)).toEqual([job("1")]);
    expect(readState(stateDir, "gmv")?.redis.url).toBe(`${server.url}/4`);
  });

  // QA W 4: `report --name X --redis <another db>` read as an empty run, without a word.
  it("report --name of a drill with a --redis that is not its Redis: read as asked, and said", async () => {
    const stateDir = path.join(root, "report");
    writeFakeDrill(stateDir, "grp", "rq", `${server.url}/8`);
    await (await db(8)).rpush("rq", job("1"));
    const r = await runDrill(["--state-dir", stateDir, "--redis", `${server.url}/9`, "report", "--name", "grp"], { timeout: 60_000 });
    expect(r.stdout + r.stderr).toContain(`--redis ${server.url}/9 is not drill grp's Redis (${server.url}/8, in its state.json): read as asked, every figure here is that Redis's; without --redis the report reads the drill's own`);
    const own = await runDrill(["--state-dir", stateDir, "report", "--name", "grp"], { timeout: 60_000 });
    expect(own.stdout + own.stderr).not.toContain("is not drill grp's Redis");
  });

  it("its recorded Redis is gone and the given one never held its queue: nothing written there, exit 4 naming both", async () => {
    const stateDir = path.join(root, "elsewhere");
    writeFakeDrill(stateDir, "gel", "nq", "redis://127.0.0.1:1");
    const r = await runDrill(["--state-dir", stateDir, "--redis", `${server.url}/6`, "rollback", "--name", "gel"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`--redis ${server.url}/6 holds no key of queue nq: not its Redis, left alone`);
    expect(await (await db(6)).dbsize()).toBe(0);
    expect(readState(stateDir, "gel")?.redis.url).toBe("redis://127.0.0.1:1");
    expect(existsSync(path.join(stateDir, "gel"))).toBe(true);
  });
});
