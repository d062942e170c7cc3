import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const repoRoot = path.resolve(import.meta.dirname, "../..");

// QA: `--redis redis://host:port/99` (16 databases) exited 0 with the jobs in
// db 0, and `/abc` set the mode in db 0, then crashed on `select NaN`.
let server: RedisServer;
let db0: Redis;
let stateDir: string;

beforeAll(async () => {
  server = await startRedisServer();
  db0 = await connectRedis(server.url, { name: "test-redis-db" });
  stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-redis-db-"));
}, 60_000);
afterAll(async () => {
  await closeRedis(db0);
  await server?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

const drill = (args: string[], env: Record<string, string> = {}) => runDrill(["--state-dir", stateDir, ...args], { env });

describe("the database of a --redis URL", () => {
  it("a database the server does not have: exit 2 naming the URL and the server's answer, nothing pushed into db 0", async () => {
    const r = await drill(["--redis", `redis://:hunter2@127.0.0.1:${server.port}/99`, "pack", "--queue", "q99", "--prompt-tokens", "100"]);
    // (ioredis's own [WARN] about a password the server does not need may come first.)
    expect(r.stderr.split("\n").at(-1)).toBe(`drill: redis redis://:***@127.0.0.1:${server.port}/99: SELECT 99 refused: ERR DB index is out of range`);
    expect(r.stderr).not.toContain("hunter2");
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(r.exitCode).toBe(2);
    expect(await db0.llen(queueKeys("q99").ready)).toBe(0);
    expect(await db0.dbsize()).toBe(0);
  });

  it("the same refusal from DRILL_REDIS_URL names the URL, not a --redis nobody gave", async () => {
    const r = await drill(["pack", "--queue", "q99", "--prompt-tokens", "100"], { DRILL_REDIS_URL: `redis://127.0.0.1:${server.port}/99` });
    expect(r.exitCode).toBe(2);
    expect(r.stderr.split("\n").at(-1)).toBe(`drill: redis redis://127.0.0.1:${server.port}/99: SELECT 99 refused: ERR DB index is out of range`);
    expect(await db0.dbsize()).toBe(0);
  });

  it("drill up on a database the server does not have: exit 2 like every other command, before anything is set up", async () => {
    const drillFile = path.join(repoRoot, "drills", "smoke.yaml");
    const r = await drill(["--redis", `redis://127.0.0.1:${server.port}/99`, "up", "--drill", drillFile, "--parent", "self", "--name", `rdb${process.pid}`, "--file-dir", stateDir]);
    expect(r.stderr.split("\n").at(-1)).toBe(`drill: redis redis://127.0.0.1:${server.port}/99: SELECT 99 refused: ERR DB index is out of range`);
    expect(r.exitCode).toBe(2);
    expect(await db0.dbsize()).toBe(0);
  });

  it.each(["abc", "1.5", "-1", "1/2"])("/%s is not a whole number: exit 2 naming --redis before anything is set", async (db) => {
    const r = await drill(["--redis", `redis://127.0.0.1:${server.port}/${db}`, "gate", "mode", "reject_all", "--queue", "qx"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(`drill: --redis: database "${db}" in redis://127.0.0.1:${server.port}/${db} is not a whole number (e.g. redis://127.0.0.1:6379/2, or no path for db 0)`);
    expect(r.stdout).toBe("");
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(await db0.get(queueKeys("qx").mode)).toBeNull();
  });

  it("a database the server has: the jobs land there, not in db 0", async () => {
    const r = await drill(["--redis", `redis://127.0.0.1:${server.port}/3`, "pack", "--queue", "q3", "--prompt-tokens", "100", "--jobs", "2"]);
    // No gate runs: pack says so, naming the gate command on that same database.
    expect(r.stderr).toBe(
      `pack: no gate decides q3 now (no live gate heartbeat q3:gates:<id>): its jobs wait, their deadline slack running out, until \`drill --state-dir ${stateDir} --redis redis://127.0.0.1:${server.port}/3 gate --queue q3\` runs (with the --name and --parent of its worker's cgroup)`,
    );
    expect(r.exitCode).toBe(0);
    const db3 = await connectRedis(`${server.url}/3`, { name: "test-redis-db3" });
    try {
      expect(await db3.llen(queueKeys("q3").ready)).toBe(2);
    } finally {
      await closeRedis(db3);
    }
    expect(await db0.llen(queueKeys("q3").ready)).toBe(0);
  });

  it("names DRILL_REDIS_URL when the bad value came from the environment", async () => {
    const r = await drill(["pack", "--queue", "qenv", "--prompt-tokens", "100"], { DRILL_REDIS_URL: "notaurl" });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(`drill: DRILL_REDIS_URL: not a URL: "notaurl" (e.g. redis://127.0.0.1:6379)`);
  });
});
