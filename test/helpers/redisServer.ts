import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import net from "node:net";
import path from "node:path";
import type { Redis } from "ioredis";
import { freePort } from "../../src/drill/embeddedRedis.js";

/**
 * A real redis-server for one test file, on a free port, with the durability
 * the drill's "nothing lost" claims need (AOF, fsync on every write) and its
 * data in a temp dir, so it can be SIGKILLed and restarted on the same data.
 */
export interface RedisServer {
  url: string;
  port: number;
  dir: string;
  pid(): number | undefined;
  /** Sends a signal (SIGKILL, SIGSTOP, SIGCONT…) to the server. */
  kill(signal: NodeJS.Signals): void;
  /** Starts it again on the same port and dir (after a kill). */
  restart(): Promise<void>;
  /** Kills it and removes its dir; safe to call twice. */
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

export { freePort };

/** `port`: a given one (e.g. a port another server just left), else a free one. */
export async function startRedisServer(port?: number): Promise<RedisServer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "drill-redis-"));
  port ??= await freePort();
  let child: ChildProcess | null = null;
  let stderr = "";

  const launch = async () => {
    stderr = "";
    const proc = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir, "--daemonize", "no", "--loglevel", "warning"],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    proc.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    live.add(proc);
    proc.once("exit", () => live.delete(proc));
    child = proc;
    await waitForPing(port, 10_000, () => (proc.exitCode !== null ? `redis-server exited ${proc.exitCode}: ${stderr}` : null));
  };

  const waitExit = async (proc: ChildProcess) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  };

  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    pid: () => child?.pid,
    kill: (signal) => {
      child?.kill(signal);
    },
    restart: async () => {
      if (child) {
        child.kill("SIGCONT");
        child.kill("SIGKILL");
        await waitExit(child);
      }
      await launch();
    },
    stop: async () => {
      if (child) {
        const proc = child;
        child = null;
        proc.kill("SIGCONT");
        proc.kill("SIGKILL");
        await waitExit(proc);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** PING over a raw socket until +PONG: no client library state to reset. */
export async function waitForPing(port: number, timeoutMs: number, failed: () => string | null = () => null): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const why = failed();
    if (why !== null) throw new Error(why);
    if (await ping(port)) return;
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    let reply = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once("error", () => done(false));
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk) => {
      reply += chunk.toString();
      if (reply.includes("\r\n")) done(reply.startsWith("+PONG"));
    });
  });
}

/**
 * Until `count` clients (those named `name`, when given) sit in BLMOVE, per
 * CLIENT LIST; throws naming `what` after `timeoutMs`.
 */
export async function untilBlockedInBlmove(redis: Redis, what: string, { name, count = 1, timeoutMs = 10_000 }: { name?: string; count?: number; timeoutMs?: number } = {}): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const blocked = async () =>
    String(await redis.client("LIST"))
      .split("\n")
      .filter((line) => line.includes(" cmd=blmove ") && (name === undefined || line.includes(` name=${name} `))).length;
  while ((await blocked()) < count) {
    if (Date.now() > deadline) throw new Error(`${what} never blocked in BLMOVE`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Until no client named `name` is left in CLIENT LIST: a stopped take's
 * connection closed while the server was paused is dropped only once it runs
 * again, and until then its BLMOVE still waits and would take the next job.
 */
export async function untilClientGone(redis: Redis, what: string, name: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (String(await redis.client("LIST")).split("\n").some((line) => line.includes(` name=${name} `))) {
    if (Date.now() > deadline) throw new Error(`${what}'s connection ${name} is still open`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
