import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { waitForPing } from "../../src/drill/embeddedRedis.js";
import { ExitCode } from "../../src/errors.js";
import { BlockingMover, closeRedis, connectRedis, DatabaseRefused } from "../../src/queue/redis.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// ioredis SELECTs the URL's database on each connect; refused, it only emits
// an error and goes on in db 0, where the drill's keys would then be written.
let server: RedisServer | null = null;
let small: ChildProcess | null = null;
const dirs: string[] = [];

afterEach(async () => {
  await server?.stop();
  server = null;
  small?.kill("SIGKILL");
  small = null;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A redis-server with only `databases` databases on `port`. */
async function startSmallServer(port: number, databases: number): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "drill-redis-small-"));
  dirs.push(dir);
  small = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--databases", String(databases), "--dir", dir], { stdio: "ignore" });
  await waitForPing(`redis://127.0.0.1:${port}`, 10_000);
}

describe("a database the server does not have", () => {
  it("connectRedis: exit 2 naming --redis and the server's answer, the password hidden", async () => {
    server = await startRedisServer();
    const failure = connectRedis(`redis://:hunter2@127.0.0.1:${server.port}/99`, { name: "test-db" });
    await expect(failure).rejects.toThrow(DatabaseRefused);
    const err = (await failure.catch((e: unknown) => e)) as DatabaseRefused;
    expect(err.message).toBe(`redis redis://:***@127.0.0.1:${server.port}/99: SELECT 99 refused: ERR DB index is out of range`);
    expect(err.exitCode).toBe(ExitCode.usage);
  });

  it("BlockingMover: the move fails with the refusal and takes nothing from db 0", async () => {
    server = await startRedisServer();
    const db0 = await connectRedis(server.url, { name: "test-db0" });
    try {
      await db0.rpush("q", "job");
      const mover = new BlockingMover(`${server.url}/99`, { name: "test-mover" });
      await expect(mover.move("q", "q:taken", 100)).rejects.toThrow("SELECT 99 refused: ERR DB index is out of range");
      mover.close();
      expect(await db0.lrange("q", 0, -1)).toEqual(["job"]);
      expect(await db0.exists("q:taken")).toBe(0);
    } finally {
      await closeRedis(db0);
    }
  });

  it("after a reconnect to a server restarted with fewer databases: no command lands in db 0", async () => {
    server = await startRedisServer();
    const port = server.port;
    const redis = await connectRedis(`${server.url}/5`, { name: "test-reconnect" });
    try {
      await redis.rpush("q", "before");
      await server.stop();
      server = null;
      // Queued while the server is away, sent by ioredis once it is ready again.
      const during = redis.rpush("q", "during");
      during.catch(() => {});
      await startSmallServer(port, 2);
      await expect(during).rejects.toThrow();
      const db0 = await connectRedis(`redis://127.0.0.1:${port}`, { name: "test-db0" });
      try {
        expect(await db0.dbsize()).toBe(0);
        // Still refused while the server lacks db 5, never served from db 0.
        await expect(redis.rpush("q", "after")).rejects.toThrow();
        expect(await db0.dbsize()).toBe(0);
      } finally {
        await closeRedis(db0);
      }
    } finally {
      await closeRedis(redis);
    }
  });
});
