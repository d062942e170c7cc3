import { spawn } from "node:child_process";
import { mkdirSync, openSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import { Redis } from "ioredis";
import { DrillError } from "../errors.js";

/**
 * The drill's own redis-server: 127.0.0.1 on a free port, data in the state
 * dir, AOF with appendfsync always and no RDB snapshots. A server started
 * without a config snapshots rarely and has no AOF: a SIGKILL would lose every
 * job since the last snapshot, and "nothing lost" would be a lie.
 */
export interface EmbeddedRedisSpec {
  dir: string;
  port?: number;
  env?: NodeJS.ProcessEnv;
  /** Keep running after the parent exits (drill up --detach). */
  detached?: boolean;
  startTimeoutMs?: number;
}

export interface EmbeddedRedis {
  pid: number;
  port: number;
  url: string;
  dir: string;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error("no free port"))));
    });
  });
}

export function redisServerArgs(dir: string, port: number): string[] {
  return [
    "--bind", "127.0.0.1",
    "--port", String(port),
    "--dir", dir,
    "--appendonly", "yes",
    "--appendfsync", "always",
    "--save", "",
    "--maxmemory-policy", "noeviction",
    "--daemonize", "no",
    "--protected-mode", "yes",
    "--logfile", path.join(dir, "redis.log"),
  ];
}

export async function startEmbeddedRedis(spec: EmbeddedRedisSpec): Promise<EmbeddedRedis> {
  mkdirSync(spec.dir, { recursive: true, mode: 0o700 });
  const port = spec.port ?? (await freePort());
  const log = openSync(path.join(spec.dir, "redis.stderr"), "a");
  const child = spawn("redis-server", redisServerArgs(spec.dir, port), {
    detached: spec.detached ?? false,
    stdio: ["ignore", "ignore", log],
    env: spec.env ?? process.env,
  });
  closeSync(log);
  const spawnError = new Promise<never>((_, reject) =>
    child.once("error", (err) =>
      reject(new DrillError(`cannot start redis-server: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "not on PATH (install redis-server, or give --redis <url>)" : err.message}`)),
    ),
  );
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code, signal) =>
      reject(new DrillError(`redis-server exited at start (${signal ?? `code ${code}`}); see ${path.join(spec.dir, "redis.log")}`)),
    ),
  );
  if (spec.detached) child.unref();
  const url = `redis://127.0.0.1:${port}`;
  await Promise.race([waitForPing(url, spec.startTimeoutMs ?? 10_000), spawnError, exited]);
  child.removeAllListeners("exit");
  if (child.pid === undefined) throw new DrillError("redis-server started without a pid");
  return { pid: child.pid, port, url, dir: spec.dir };
}

export async function waitForPing(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "no answer";
  while (Date.now() < deadline) {
    const redis = new Redis(url, { lazyConnect: true, connectTimeout: 500, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
    redis.on("error", () => {});
    try {
      await redis.connect();
      if ((await redis.ping()) === "PONG") return;
    } catch (err) {
      lastError = (err as Error).message;
    } finally {
      redis.disconnect();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new DrillError(`redis at ${url} did not answer PING within ${timeoutMs}ms: ${lastError}`);
}
