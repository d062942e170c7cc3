import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, closeSync, existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import type { Redis } from "ioredis";
import { notRedisReply, openRedis, redactUrl, tlsHint } from "../queue/redis.js";
import { DrillError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readProcessStat } from "../host/process.js";
import { signalVerified } from "../cgroup/tasks.js";
import { findOnPath } from "../util/findOnPath.js";
import { acquireDrillLock } from "./lock.js";
import { stopRecordedProcess } from "./processes.js";
import { findByCwd, realDir } from "./strays.js";
import { makeDirs } from "../util/makeDirs.js";
import { stateDirError } from "../cgroup/stateFiles.js";
import { openOwnFile } from "../util/ownFiles.js";

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
  /**
   * Exit by itself after this long (DESIGN: detached children exit at the
   * drill's duration plus 5 minutes). coreutils `timeout` sends SIGTERM:
   * Redis shuts down cleanly, and with appendfsync always its AOF already
   * holds every write, so rollback and report restart it on that AOF.
   */
  lifetimeMs?: number;
  /**
   * The caller stops the server itself, at its end and on its own
   * interruption (stopRestartedBeforeExit): `lifetimeMs` then only bounds a
   * server whose caller was SIGKILLed, through `timeout` where coreutils is
   * on PATH; without it the server runs bare (QA: rollback on a host without
   * coreutils left the drain pending, exit 4, for a wrapper it can do without).
   */
  callerStops?: boolean;
}

export interface EmbeddedRedis {
  /** redis-server's own pid (from INFO), not its `timeout` wrapper's. */
  pid: number;
  /** It exits by itself at `lifetimeMs` (under `timeout`); false: only when stopped. */
  selfExits: boolean;
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
  makeDirs(spec.dir);
  const port = spec.port ?? (await freePort());
  const log = openOwnFile(path.join(spec.dir, "redis.stderr"), "a");
  const serverArgs = redisServerArgs(spec.dir, port);
  const env = spec.env ?? process.env;
  const wrapped = spec.lifetimeMs !== undefined && (!spec.callerStops || findOnPath("timeout", env.PATH ?? "") !== null);
  // The wrapper must not carry DRILL_RUN_ID: rollback's sweep for the run's
  // strays would SIGTERM it, and timeout passes the signal on, stopping Redis
  // before the drain is exported. Redis itself is found by its cwd.
  const [command, args, childEnv] = wrapped
    ? ["timeout", ["--signal=TERM", "--kill-after=30s", `${Math.ceil(spec.lifetimeMs! / 1000)}s`, "redis-server", ...serverArgs], withoutRunId(env)]
    : ["redis-server", serverArgs, env];
  const child = spawn(command, args, { detached: spec.detached ?? false, stdio: ["ignore", "ignore", log], env: childEnv });
  closeSync(log);
  const notOnPath = "not on PATH (install redis-server, or give --redis <url>)";
  const spawnError = new Promise<never>((_, reject) =>
    child.once("error", (err) =>
      reject(new DrillError(`cannot start redis-server: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? (wrapped ? "timeout (coreutils) not on PATH" : notOnPath) : err.message}`)),
    ),
  );
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code, signal) =>
      reject(wrapped && code === 127 ? new DrillError(`cannot start redis-server: ${notOnPath}`) : exitedAtStart(spec.dir, signal ?? `code ${code}`)),
    ),
  );
  if (spec.detached) child.unref();
  const url = `redis://127.0.0.1:${port}`;
  // A server gone at start settles the race at once: its pings stop with it, or they held the caller's exit for the whole bound (10 s).
  const pinging = new AbortController();
  const pid = await Promise.race([waitForPing(url, spec.startTimeoutMs ?? 10_000, pinging.signal).then(() => serverPid(url)), spawnError, exited]).catch((err: unknown) => {
    pinging.abort();
    stopFailedStart(child);
    throw err;
  });
  child.removeAllListeners("exit");
  return { pid, port, url, dir: spec.dir, selfExits: wrapped };
}

/**
 * A start that failed with the server still there (no answer in time, a refusal, something else on its port): killed,
 * with its `timeout` wrapper (their process group: both are in the one the wrapper leads, or that `detached` made), so
 * a failed start leaves nothing running that its caller never learnt the pid of.
 */
function stopFailedStart(child: ChildProcess): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    child.kill("SIGKILL"); // not a group leader (bare redis-server, not detached)
  }
}

/** errno names of the messages redis-server logs (strerror) for a dir that refuses its files: a state dir refusal. */
const REFUSED_BY_MESSAGE: ReadonlyArray<[RegExp, string]> = [
  [/No space left on device/, "ENOSPC"],
  [/Disk quota exceeded/, "EDQUOT"],
  [/Read-only file system/, "EROFS"],
];

/** The last line redis-server wrote to `file`, without its log prefix ("123:M 05 Dec 2026 02:58:07.312 # "); null when none (or unreadable). */
export function lastRedisLine(text: string): string | null {
  const line = text.split("\n").map((l) => l.trim()).filter((l) => l !== "").at(-1);
  return line === undefined ? null : line.replace(/^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [.\-*#] /, "");
}

function readQuietly(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/**
 * redis-server gone before it answered: why, in its own words (the last line
 * of its log, else of its stderr: a config error). A dir that refuses its files
 * (full, read-only) is a state dir refusal (stateDirRefusal, its errno as the
 * cause): said by it, or, when it could write neither (a full disk takes its log
 * too), by the note that says so refused in its stderr file.
 */
function exitedAtStart(dir: string, how: string): DrillError {
  const logFile = path.join(dir, "redis.log");
  const stderrFile = path.join(dir, "redis.stderr");
  const logged = lastRedisLine(readQuietly(logFile));
  const said = logged ?? lastRedisLine(readQuietly(stderrFile));
  const exited = `redis-server exited at start (${how})`;
  let refused: NodeJS.ErrnoException | null = null;
  const code = said === null ? undefined : REFUSED_BY_MESSAGE.find(([re]) => re.test(said))?.[1];
  if (code !== undefined) refused = Object.assign(new Error(said!), { code, path: dir });
  else if (said === null) {
    try {
      appendFileSync(stderrFile, `drill: ${exited} and wrote nothing to ${logFile} or here\n`);
    } catch (err) {
      refused = err as NodeJS.ErrnoException;
    }
  }
  const words = said === null ? `${exited}, saying nothing (${logFile} and ${stderrFile} are empty)` : `${exited}: ${said}`;
  // The file it said it in (a config error goes to stderr, not the log).
  if (refused === null) return new DrillError(`${words}; see ${said === null ? `${logFile} and ${stderrFile}` : logged !== null ? logFile : stderrFile}`);
  return new DrillError(`${stateDirError("start the embedded Redis in", dir, refused).message}; ${words}`, undefined, { cause: refused });
}

/** Servers this process restarted that do not exit by themselves (no `timeout` on PATH), by data dir, until their caller is done with them. */
const restartedNow = new Map<string, { pid: number; startTime: number; dir: string }>();

/** A server started with `callerStops` and no self-exit: stopped by stopRestartedBeforeExit if its caller is stopped before releaseRestarted. */
export function stopIfInterrupted(server: { pid: number; startTime: number; dir: string }): void {
  restartedNow.set(server.dir, server);
}

/** Its caller is done with the server on `dir` (stopped it, or keeps it running on purpose and says so). */
export function releaseRestarted(dir: string): void {
  restartedNow.delete(dir);
}

/**
 * For a stop signal's handler (synchronous): SIGTERMs every server
 * stopIfInterrupted holds, so none outlives its caller without a bound.
 * Redis shuts down cleanly on SIGTERM, and with appendfsync always its AOF
 * already holds every write: the next rollback restarts it there. → notes.
 */
export function stopRestartedBeforeExit(roots: HostRoots): string[] {
  const notes: string[] = [];
  for (const server of restartedNow.values()) {
    restartedNow.delete(server.dir);
    try {
      if (signalVerified(roots, server, "SIGTERM") === "signalled") {
        notes.push(`stopped redis-server ${server.pid}, restarted on its AOF in ${server.dir} with no \`timeout\` (coreutils) to end it: its jobs stay in that AOF`);
      }
    } catch (err) {
      notes.push(`could not stop redis-server ${server.pid} (restarted on its AOF in ${server.dir}): ${(err as Error).message}; stop it by hand (kill ${server.pid})`);
    }
  }
  return notes;
}

function withoutRunId(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { DRILL_RUN_ID: _runId, ...rest } = env;
  return rest;
}

/** The pid of the server answering at `url`, as it reports it (`INFO server` process_id). */
async function serverPid(url: string): Promise<number> {
  const redis = probeClient(url, 1000);
  try {
    await redis.connect();
    const pid = Number(/^process_id:(\d+)\r?$/m.exec(await redis.info("server"))?.[1]);
    if (!Number.isSafeInteger(pid) || pid <= 0) throw new DrillError(`redis at ${redactUrl(url)} did not report its process_id`);
    return pid;
  } finally {
    redis.disconnect();
  }
}

/**
 * A client for one question to a server that may not be there, or paused
 * (SIGSTOP: it accepts TCP and never answers): no retries, no queueing, the
 * connection and each command bounded by `timeoutMs`, errors surface through the call.
 */
function probeClient(url: string, timeoutMs: number): Redis {
  const redis = openRedis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  redis.on("error", () => {});
  return redis;
}

/** `stop`: its caller no longer waits (the server exited): no further try. */
export async function waitForPing(url: string, timeoutMs: number, stop?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = "no answer";
  while (Date.now() < deadline && !stop?.aborted) {
    // Each try ends by the deadline: a paused server makes every try last its whole bound.
    const redis = probeClient(url, Math.max(50, Math.min(500, deadline - Date.now())));
    // connect() rejects with "Connection is closed."; why (refused, no reply) came as an error event first.
    let cause: Error | null = null;
    redis.on("error", (err: Error) => (cause ??= err));
    try {
      await redis.connect();
      if ((await redis.ping()) === "PONG") return;
    } catch (err) {
      const reason = cause ?? (err as Error);
      // Something else answers on that port: asking again will not make it Redis.
      const notRedis = notRedisReply(reason);
      if (notRedis !== null) throw new DrillError(`redis at ${redactUrl(url)}: ${notRedis}`);
      // It answered: a password or ACL it refuses is refused again at the next try (QA: "did not answer PING within 1500ms: WRONGPASS").
      if (/^(WRONGPASS|NOAUTH|NOPERM)\b/.test(reason.message)) throw new DrillError(`redis at ${redactUrl(url)} answered, but refused: ${reason.message}`);
      lastError = reason.message;
    } finally {
      redis.disconnect();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new DrillError(`redis at ${redactUrl(url)} did not answer PING within ${timeoutMs}ms: ${lastError}${tlsHint(url)}`);
}

/** How long a Redis restarted for one reader may outlive that reader if it dies. */
const REVIVED_LIFETIME_MS = 2 * 60_000;

/**
 * A stopped embedded Redis started again on its AOF dir for one reader
 * (`drill report` after the server exited by itself at the drill's duration
 * plus 5 minutes). Holds the drill's rollback lock until `stop`: two servers
 * on one AOF dir would corrupt it. The reader stops it (`stop`, also when a
 * signal stops the reader), as rollback does the one it restarts
 * (callerStops): under `timeout` where coreutils is on PATH, else bare (QA:
 * report failed without it). `port`: the one state.json records, when free:
 * a server a SIGKILLed reader leaves is where the next report and rollback
 * look for the drill's Redis, and rollback stops it.
 */
export async function reviveEmbeddedRedis(
  roots: HostRoots,
  drillDir: string,
  redisDir: string,
  holder: string,
  port?: number,
): Promise<{ server: EmbeddedRedis; stop: () => Promise<void> }> {
  requireRestartable(roots, redisDir);
  const lock = acquireDrillLock(drillDir, "rollback", holder);
  try {
    const server = await startEmbeddedRedis({ dir: redisDir, port, lifetimeMs: REVIVED_LIFETIME_MS, callerStops: true });
    const stat = readProcessStat(roots, server.pid);
    // Once, whoever asks first: the reader's end, or the signal that stops the reader (report).
    let stopping: Promise<void> | null = null;
    const stopOnce = async (): Promise<void> => {
      try {
        await stopRecordedProcess(roots, { pid: server.pid, startTime: stat.ok ? stat.value.startTime : null });
      } finally {
        lock.release();
      }
    };
    return { server, stop: () => (stopping ??= stopOnce()) };
  } catch (err) {
    lock.release();
    throw err;
  }
}

/**
 * Whether the server behind `redis` is the drill's embedded one: its working
 * dir is the drill's redis dir. Once that server has exited (by itself, at
 * the drill's duration plus 5 minutes), its port is free for anyone, and
 * draining or exporting whatever answers there would touch somebody else's data.
 */
export async function isEmbeddedRedis(redis: Redis, dir: string): Promise<boolean> {
  const reply = (await redis.config("GET", "dir")) as unknown;
  return Array.isArray(reply) && reply[1] === realDir(dir);
}

/**
 * Before restarting the drill's Redis on `dir`: the dir must exist (else an
 * empty server would report, or export, an empty queue as fact) and no
 * redis-server may still run in it (two servers on one AOF corrupt it; one
 * that runs but does not answer is for a human to look at, and a stopped one,
 * SIGSTOP, is named as such: it answers again once resumed).
 */
export function requireRestartable(roots: HostRoots, dir: string): void {
  if (!existsSync(dir)) throw new DrillError(`no Redis data dir ${dir} to restart from`);
  const running = findByCwd(roots, dir).filter((p) => p.comm.startsWith("redis-server"));
  const stopped = running.filter((p) => {
    const stat = readProcessStat(roots, p.pid);
    return stat.ok && (stat.value.state === "T" || stat.value.state === "t");
  });
  if (stopped.length > 0) {
    const pids = stopped.map((p) => p.pid);
    throw new DrillError(`redis-server pid ${pids.join(", ")} in ${dir} is stopped (SIGSTOP) and answers nothing: resume it (kill -CONT ${pids.join(" ")}); not starting a second server on its AOF`);
  }
  if (running.length > 0) {
    throw new DrillError(`redis-server pid ${running.map((p) => p.pid).join(", ")} still runs in ${dir} but is not the one answering: not starting a second server on its AOF`);
  }
}

/** The state dir and drill an embedded redis-server's --dir belongs to, by the layouts up makes; null for any other dir. */
export function embeddedRedisDrill(redisDir: string): { stateDir: string; drill: string } | null {
  if (path.basename(redisDir) !== "redis") return null;
  const parent = path.dirname(redisDir);
  const drillDirOf = path.basename(path.dirname(parent)) === "runs" ? path.dirname(path.dirname(parent)) : parent;
  return { stateDir: path.dirname(drillDirOf), drill: path.basename(drillDirOf) };
}
