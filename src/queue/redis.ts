import net from "node:net";
import { Redis, type RedisOptions } from "ioredis";
import { DrillError, ExitCode } from "../errors.js";
import { formatDuration } from "../units.js";
import type { LuaScript } from "./scripts.js";
import { passwordRefused, refusalText } from "./refusal.js";
// These live with the global --redis option (context.ts loads no client), so state-file code can use them.
import { DEFAULT_REDIS_URL, redactUrl, redisDatabase } from "../context.js";

export { DEFAULT_REDIS_URL, redactUrl };

/**
 * The server has no such database (an index past its `databases`): a bad URL,
 * exit 2. Named by the URL, not a flag: it may have come from --redis,
 * DRILL_REDIS_URL or the drill's state.json.
 */
export class DatabaseRefused extends DrillError {
  constructor(url: string, db: number, answer: Error) {
    super(`redis ${redactUrl(url)}: SELECT ${db} refused: ${answer.message}`, ExitCode.usage, { cause: answer });
    this.name = "DatabaseRefused";
  }
}

const refusals = new WeakMap<Redis, DatabaseRefused>();

/** Why the server refused this client's database, if it did (the reason a closed connection does not say). */
export function databaseRefusal(redis: Redis): DatabaseRefused | undefined {
  return refusals.get(redis);
}

/**
 * Every Redis client drill opens is made here. ioredis SELECTs the URL's
 * database on each (re)connect, but when the server refuses it (db 99 of the
 * default 16) it only emits an error and carries on in db 0, where our keys
 * would be read and written. The refusal is answered before the INFO of the
 * ready check, so dropping the connection here ends the socket before ioredis
 * flushes a queued command on it. Refused on the first connection, the
 * client ends (connectRedis() turns the refusal into the command's error; a
 * client left reconnecting would keep the process alive); refused after a
 * reconnect (the server restarted with fewer databases), it tries again and
 * fails again until the server has the database.
 */
export function openRedis(url: string, options: RedisOptions): Redis {
  const db = redisDatabase(url);
  // ioredis's 2 s disconnectTimeout kept a command alive 2 s after a refused
  // connection (a timer for a socket that never opened); a socket that did open
  // closes on loopback in well under this.
  // ioredis polls a loading server again after its own loading_eta_seconds (10 s at most): past our ready bound,
  // and its timer held the process that long after the command gave up. A short poll sees the load end.
  const redis = new Redis(url, { disconnectTimeout: 200, maxLoadingRetryTime: LOADING_POLL_MS, ...options });
  boundUntilReady(redis, options.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT_MS);
  hearRefusalAtConnect(redis);
  quietReadyCheck(redis);
  let everReady = false;
  redis.once("ready", () => (everReady = true));
  redis.on("error", (err: Error & { command?: { name?: string } }) => {
    if (err.command?.name !== "select") return;
    // A SELECT refused for want of a (right) password is an auth failure, not a database the server lacks (QA).
    if (passwordRefused(err.message)) return;
    refusals.set(redis, new DatabaseRefused(url, db, err));
    redis.disconnect(everReady);
  });
  return redis;
}

/** ioredis's own default connectTimeout. */
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** How often a client connected to a Redis still loading its data set asks it again (INFO). */
const LOADING_POLL_MS = 250;

/**
 * A server loading its data set (an AOF or RDB read at start) answers INFO
 * with loading:1 and refuses most commands with LOADING; these are its own
 * figures, null when INFO lacked them.
 */
interface LoadingProgress {
  /** loading_loaded_perc, e.g. 37.2. */
  percent: number | null;
  /** loading_eta_seconds: the server's own estimate. */
  etaSeconds: number | null;
}

/**
 * Whether an INFO reply says the server is loading, and how far: parses
 * `loading:1`, `loading_loaded_perc:37.20`, `loading_eta_seconds:12`; null
 * for a server not loading (loading:0) or a reply without the field.
 */
function loadingProgress(info: string): LoadingProgress | null {
  const field = (name: string): string | undefined => new RegExp(`^${name}:(.*?)\\r?$`, "m").exec(info)?.[1];
  if (field("loading") !== "1") return null;
  const number = (name: string): number | null => {
    const value = Number(field(name) ?? Number.NaN);
    return Number.isFinite(value) ? value : null;
  };
  return { percent: number("loading_loaded_perc"), etaSeconds: number("loading_eta_seconds") };
}

/** "is loading its data set from disk (37.2% loaded, about 12 s left by its estimate): …". */
function loadingText(progress: LoadingProgress): string {
  const figures = [
    ...(progress.percent === null ? [] : [`${progress.percent}% loaded`]),
    ...(progress.etaSeconds === null ? [] : [`about ${progress.etaSeconds} s left by its estimate`]),
  ];
  return `is loading its data set from disk${figures.length === 0 ? "" : ` (${figures.join(", ")})`}: it answers commands once done (not paused, not gone)`;
}

/** What the ready check last read of a server still loading; cleared once ready or once the server is seen gone. */
const loadingSeen = new WeakMap<Redis, LoadingProgress>();

/**
 * `Redis at 127.0.0.1:6379 is loading its data set from disk (…)` when this
 * client's connection last read that its server was loading and it has not
 * been ready since; null otherwise.
 */
export function serverLoading(redis: Redis): string | null {
  const loading = loadingSeen.get(redis);
  return loading === undefined ? null : `Redis at ${redisAddress(redis)} ${loadingText(loading)}`;
}

/**
 * An error that says only that a command did not go out or was dropped with
 * its connection (ioredis: "Stream isn't writeable" with no offline queue; a
 * MaxRetriesPerRequestError as it flushes what it had sent when the
 * connection closes): nothing of why the connection is not there. The reason
 * heard before it (refused, loading, no reply) stays the reason (CI: a
 * loading server's watch sample said "Reached the max retries per request
 * limit" when its ready-check bound dropped the connection).
 */
export function saysNothingOfWhy(err: Error): boolean {
  return err.name === "MaxRetriesPerRequestError" || err.message.startsWith("Stream isn't writeable");
}

class NoReplyOnConnect extends Error {
  constructor(ms: number, loading: string | null) {
    super(loading === null ? `connected, but no reply within ${ms} ms (server paused, e.g. SIGSTOP, or not Redis)` : `${loading}; not ready within ${ms} ms`);
    this.name = "NoReplyOnConnect";
  }
}

/**
 * ioredis's connectTimeout ends at the TCP connect, but the kernel accepts TCP
 * for a paused (SIGSTOPped) server: the CLIENT SETNAME/SETINFO and the ready
 * check's INFO that follow then wait without limit on a client with no
 * commandTimeout, and connect() with them. So connectTimeout bounds the
 * connection until it is ready; past it the socket is dropped as one that
 * timed out connecting is, and the client's retryStrategy decides.
 */
function boundUntilReady(redis: Redis, ms: number): void {
  if (!(ms > 0)) return; // 0: no limit, as ioredis reads it
  redis.on("connect", () => {
    const stream = redis.stream;
    const timer = setTimeout(() => {
      redis.emit("error", new NoReplyOnConnect(ms, serverLoading(redis)));
      stream.destroy();
    }, ms);
    const settled = () => {
      clearTimeout(timer);
      redis.off("ready", settled);
      redis.off("close", settled);
    };
    redis.once("ready", settled);
    redis.once("close", settled);
  });
}

/** Where a client connects, as redis-cli's -h/-p name it: `127.0.0.1:6379`, `[::1]:6379`, or its socket path. */
export function redisAddress(redis: Redis): string {
  const { path, host = "localhost", port = 6379 } = redis.options;
  if (path) return path;
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** Redis wrote an error as it accepted the connection, then closed it: `-ERR max number of clients reached`. */
export class RefusedConnection extends Error {
  constructor(address: string, said: string) {
    // Its fix is refusalHint's, as for any refusal (refusalText).
    super(`Redis at ${address} refused the connection: ${said.replace(/^ERR /, "")}`);
    this.name = "RefusedConnection";
  }
}

/** How long a look at what a server says on accept waits (loopback answers in well under 1 ms). */
const GREETING_MS = 300;

const refusedAtConnect = new WeakMap<Redis, Promise<RefusedConnection | null>>();

/** Why the server dropped this client's last connection before it was ready, if it said (null: it said nothing). */
export function connectionRefusal(redis: Redis): Promise<RefusedConnection | null> {
  return refusedAtConnect.get(redis) ?? Promise.resolve(null);
}

/**
 * Redis refuses a connection it cannot take (maxclients, protected mode) by
 * writing its error as it accepts, then closing. ioredis has written CLIENT
 * SETNAME or INFO by then, and either the closed socket fails that write
 * (EPIPE, ECONNRESET) or the close comes before the error is read: all it
 * says is "write EPIPE", or nothing ("Connection is closed."). So a
 * connection that opened and closed before it was ready, with no other
 * reason heard (a timeout, a refused password or database, not Redis), is
 * looked at once more, only reading: what the server says first. Not
 * through TLS, whose handshake comes first.
 */
function hearRefusalAtConnect(redis: Redis): void {
  let opened = false;
  let reasonHeard = false;
  redis.on("connect", () => {
    opened = true;
    reasonHeard = false;
  });
  redis.on("ready", () => {
    opened = false;
    refusedAtConnect.delete(redis);
  });
  redis.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code !== "EPIPE" && err.code !== "ECONNRESET") reasonHeard = true;
  });
  redis.on("close", () => {
    if (!opened || reasonHeard || redis.options.tls) return;
    opened = false;
    refusedAtConnect.set(redis, firstLine(redis, GREETING_MS).then((said) => (said?.startsWith("-") ? new RefusedConnection(redisAddress(redis), said.slice(1)) : null)));
  });
}

/** The first line a server sends on a fresh connection, sending nothing; null when none within `ms`. */
function firstLine(redis: Redis, ms: number): Promise<string | null> {
  const { path, host = "localhost", port = 6379 } = redis.options;
  return new Promise((resolve) => {
    const socket = path ? net.connect(path) : net.connect(port, host);
    let text = "";
    const done = (line: string | null): void => {
      socket.destroy();
      resolve(line);
    };
    socket.setTimeout(ms, () => done(null));
    socket.on("error", () => done(null));
    socket.on("close", () => done(text === "" ? null : text));
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      const end = text.indexOf("\r\n");
      if (end >= 0) done(text.slice(0, end));
    });
  });
}

/**
 * ioredis's ready check sends INFO; a user the ACL denies INFO gets its
 * console.warn on every connect ("Skipping the ready check because INFO
 * command fails: …", with a link to its wiki) on the operator's stderr, and
 * goes on. Drill goes on too, quietly: nothing is wrong for the operator (a
 * Redis still loading then refuses the first commands with LOADING, said
 * as such). ioredis's _readyCheck calls this.info at once, so an own
 * `info` for that one call sees the refusal first, and a reply saying the
 * server is loading (ioredis then asks again later), kept so that the bound
 * on the connection says so rather than "no reply". A later ask whose
 * connection has closed since is dropped: that wait ended with it.
 */
function quietReadyCheck(redis: Redis): void {
  type Reply = (err: Error | null, info?: unknown) => void;
  const internals = redis as unknown as { _readyCheck: (callback: Reply) => void; info: (callback: Reply) => unknown };
  const readyCheck = internals._readyCheck;
  const checkedOn = new WeakMap<Reply, unknown>();
  redis.on("ready", () => loadingSeen.delete(redis));
  redis.on("error", (err: Error) => {
    // The bound's own error keeps it, and so does a command dropped with that connection (it says nothing of the server).
    if (!(err instanceof NoReplyOnConnect) && !saysNothingOfWhy(err)) loadingSeen.delete(redis);
  });
  internals._readyCheck = function (callback) {
    if (!checkedOn.has(callback)) checkedOn.set(callback, redis.stream);
    else if (checkedOn.get(callback) !== redis.stream || redis.status !== "connect") return;
    const info = Redis.prototype.info as unknown as (this: Redis, callback: Reply) => unknown;
    internals.info = (reply) =>
      info.call(redis, (err, res) => {
        if (err !== null && /\bNOPERM\b/.test(err.message)) return reply(null, "");
        const loading = typeof res === "string" ? loadingProgress(res) : null;
        if (loading !== null) loadingSeen.set(redis, loading);
        reply(err, res);
      });
    try {
      readyCheck.call(redis, callback);
    } finally {
      delete (internals as { info?: unknown }).info;
    }
  };
}

export interface ConnectOptions {
  /** CLIENT SETNAME, so `CLIENT LIST` shows which drill part holds a connection. */
  name: string;
  /** Bounds every non-blocking command: a paused (SIGSTOPped) server must not wedge us. */
  commandTimeoutMs?: number;
}

/**
 * The command connection. Commands issued while reconnecting wait in the
 * offline queue for a couple of reconnect attempts, then fail so the caller's
 * loop decides (it backs off and retries). Unfulfilled commands are NOT resent
 * after a reconnect (ioredis#610, #1285): our callers re-issue explicitly, and
 * every script is a no-op when re-run.
 */
export function createRedis(url: string, options: ConnectOptions): Redis {
  const redis = openRedis(url, {
    lazyConnect: true,
    connectionName: options.name,
    enableOfflineQueue: true,
    maxRetriesPerRequest: 2,
    autoResendUnfulfilledCommands: false,
    commandTimeout: options.commandTimeoutMs ?? 5000,
    connectTimeout: 5000,
    retryStrategy: (times) => Math.min(100 * times, 1000),
  });
  // Without a listener ioredis prints "Unhandled error event" on every reconnect.
  redis.on("error", () => {});
  redis.on("reconnecting", () => rejectUnanswered(redis));
  return redis;
}

/** The command-queue entry ioredis keeps for a command sent and not yet answered. */
interface SentCommand {
  command?: { reject?: (err: Error) => void };
}

/**
 * The commands in flight when the connection closed fail at once, as lost:
 * with autoResendUnfulfilledCommands off, ioredis 5.11 and 6.0 stash them at
 * the close and drop the stash at the next ready without settling them
 * (ioredis#2193, fixed by #2194 after 6.0.0), so each waited out the whole
 * command timeout (5 s) after every blip: a gate stood 5 s with Redis back.
 * The stash is ioredis's internal `prevCommandQueue`, filled just before the
 * "reconnecting" event; a promise settled twice keeps its first settlement,
 * so this is harmless once ioredis rejects them itself.
 */
const LOST_BEFORE_REPLY = "connection to redis lost before its reply";

function rejectUnanswered(redis: Redis): void {
  const stash = (redis as unknown as { prevCommandQueue?: { shift(): SentCommand | undefined; length: number } | null }).prevCommandQueue;
  if (stash === null || stash === undefined) return;
  const lost = new Error(LOST_BEFORE_REPLY);
  for (let item = stash.shift(); item !== undefined; item = stash.shift()) item.command?.reject?.(lost);
}

/** How long a stopping process waits for each Redis reply (a loopback reply takes well under 1 ms). */
export const STOP_REPLY_MS = 1000;

/**
 * A command sent that got no reply before a stop gave up on it: it may still
 * run when the server answers (a paused one, once resumed).
 */
export class NoReplyAtStop extends Error {
  constructor(ms: number) {
    super(`no reply within ${ms} ms of the stop: redis paused (SIGSTOP?) or overloaded`);
    this.name = "NoReplyAtStop";
  }
}

/** A command a stop gave up on before it was sent (the client was reconnecting): it did not run. */
export class NotSentAtStop extends Error {
  constructor(ms: number) {
    super(`not sent within ${ms} ms of the stop: not connected to redis (down or restarting)`);
    this.name = "NotSentAtStop";
  }
}

/** ioredis's commandTimeout fired: the command got no reply in time (sent, or held while reconnecting). */
const timedOut = (err: Error): boolean => err.message === "Command timed out";

/** The command got no reply: ioredis's timeout or a stop's. Sent again to the same server, it would wait as long. */
export function gotNoReply(err: unknown): boolean {
  return err instanceof NoReplyAtStop || (err instanceof Error && timedOut(err));
}

/**
 * Whether a failed command may have run all the same: it was sent and its
 * reply never came (a paused server runs it when it wakes; a dropped
 * connection may have run it first). False when it was never sent (held
 * while reconnecting) or the server answered with an error. A command that
 * is not idempotent (HINCRBY) and may have run must not be sent again.
 */
export function mayHaveRun(err: unknown, redis: Redis): boolean {
  if (err instanceof NoReplyAtStop) return true;
  if (!(err instanceof Error)) return false;
  if (err.message === LOST_BEFORE_REPLY) return true;
  // A timeout while not connected is a command held for the reconnect; one sent before the drop failed as lost.
  return timedOut(err) && redis.status === "ready";
}

/** A command waiting in one of ioredis's queues: sent and unanswered, or held until the connection is ready. */
interface QueuedCommand {
  command?: { reject?: (err: Error) => void };
}

/**
 * Once `signal` aborts, no Redis reply holds the stop more than `ms`: the
 * commands sent from then on wait `ms` (ioredis reads commandTimeout as each
 * is sent), and those already waiting are given up `ms` after the stop, as
 * ioredis's own command timeout gives one up (the reply, if it comes, settles
 * nothing). Without it a Ctrl-C with the server paused waited out the 5 s
 * command timeout, then again for the give-back. The waiting commands are
 * read from ioredis's internal queues (`commandQueue`, sent; `offlineQueue`,
 * held while reconnecting): the client has no other way to end one.
 */
export function hurryOnStop(redis: Redis, signal: AbortSignal, ms = STOP_REPLY_MS): void {
  const onStop = (): void => {
    if (!(typeof redis.options.commandTimeout === "number" && redis.options.commandTimeout <= ms)) redis.options.commandTimeout = ms;
    const queues = redis as unknown as { commandQueue?: { toArray(): QueuedCommand[] }; offlineQueue?: { toArray(): QueuedCommand[] } };
    const waiting = [...(queues.commandQueue?.toArray() ?? []), ...(queues.offlineQueue?.toArray() ?? [])];
    if (waiting.length === 0) return;
    // A promise settled already keeps its settlement: only the unanswered fail, each as sent or not
    // as it stands then (one held for a reconnect at the stop may have been sent since).
    setTimeout(() => {
      const unsent = new Set(queues.offlineQueue?.toArray() ?? []);
      for (const item of waiting) item.command?.reject?.(unsent.has(item) ? new NotSentAtStop(ms) : new NoReplyAtStop(ms));
    }, ms).unref();
  };
  if (signal.aborted) onStop();
  else signal.addEventListener("abort", onStop, { once: true });
}

/**
 * An error as an operator reads it: ioredis's own texts for a command that
 * timed out or ran out of reconnect attempts said plainly; any other as is.
 * With the client that sent it, a timeout while it was not connected (the
 * command waited for a reconnect) is not called a pause.
 */
export function redisErrorText(err: unknown, redis?: Redis): string {
  if (!(err instanceof Error)) return String(err);
  if (timedOut(err)) {
    if (redis === undefined) return "no reply in time: redis paused (SIGSTOP?) or overloaded";
    const within = `Redis at ${redisAddress(redis)} did not answer within ${formatDuration(Number(redis.options.commandTimeout))}`;
    if (redis.status === "ready") return `${within}: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded`;
    const loading = loadingSeen.get(redis);
    return loading === undefined ? `${within}: not connected (down or restarting)` : `${within}: it ${loadingText(loading)}`;
  }
  if (err.name === "MaxRetriesPerRequestError") return "the connection dropped and reconnecting failed";
  if (err.message === "Connection is closed.") return "the connection to redis is closed";
  return refusalText(err);
}

/**
 * ioredis's parse error for a server that does not speak RESP ("Protocol
 * error, got "<" as reply type byte. Please report this."), said as what it
 * means here, without sending the operator to ioredis's tracker; null for any
 * other error.
 */
export function notRedisReply(err: Error): string | null {
  const got = /^Protocol error, got (.+) as reply type byte/.exec(err.message);
  return got ? `not a Redis server: its reply began with ${got[1]}, not a Redis reply` : null;
}


export async function connectRedis(url: string, options: ConnectOptions): Promise<Redis> {
  const redis = createRedis(url, options);
  // ioredis rejects connect() with "Connection is closed."; the reason
  // (ECONNREFUSED, ENOTFOUND, a TLS or auth error) came as an error event first.
  let cause: Error | null = null;
  const onError = (err: Error) => {
    cause ??= err;
    // Not Redis at all (an HTTP server on that port), or a password it refuses: no reconnect will change that.
    if (notRedisReply(err) !== null || passwordRefused(err.message)) redis.disconnect();
  };
  redis.on("error", onError);
  try {
    await redis.connect();
    const refused = databaseRefusal(redis);
    if (refused) throw refused;
    // Once more, explicitly: the command learns the server's answer from this reply, not from an event.
    const db = redisDatabase(url);
    if (db !== 0) {
      await redis.select(db).catch((err: unknown) => {
        throw databaseRefusal(redis) ?? new DatabaseRefused(url, db, err instanceof Error ? err : new Error(String(err)));
      });
    }
    return redis;
  } catch (err) {
    redis.disconnect();
    const refused = databaseRefusal(redis) ?? (err instanceof DatabaseRefused ? err : undefined);
    if (refused) throw refused;
    // Dropped before it was ready: maxclients says why only on a socket that reads before it writes.
    const said = await connectionRefusal(redis);
    if (said) throw new DrillError(refusalText(said), ExitCode.failed, { cause: said });
    const reason = cause ?? (err instanceof Error ? err : new Error(String(err)));
    // A server that answered its refusal (BUSY, LOADING: the ready check's INFO refused) says so, with the fix.
    const detail = notRedisReply(reason) ?? refusalText(reason);
    // Where the URL came from is the caller's to know: name only the default, the one URL nobody may have meant.
    const hint =
      url === DEFAULT_REDIS_URL ? ` (${DEFAULT_REDIS_URL} is the default when no --redis, DRILL_REDIS_URL or drill up in the state dir names one)`
      : tlsHint(url);
    throw new DrillError(`cannot connect to redis at ${redactUrl(url)}: ${detail}${hint}`, ExitCode.failed, { cause: cause ?? err });
  } finally {
    redis.off("error", onError);
  }
}

/** QUIT politely, then drop the socket; safe to call twice and never throws. */
export async function closeRedis(redis: Redis | null | undefined, graceMs = 1000): Promise<void> {
  if (!redis || redis.status === "end") return;
  try {
    if (redis.status === "ready") {
      await Promise.race([redis.quit(), new Promise((resolve) => setTimeout(resolve, graceMs).unref())]);
    }
  } catch {
    // fall through: disconnect below always runs
  }
  redis.disconnect();
}

/** EVALSHA, falling back to EVAL after a restart emptied the script cache. */
export async function runScript(redis: Redis, script: LuaScript, keys: string[], args: (string | Buffer | number)[]): Promise<unknown> {
  if (keys.length !== script.numberOfKeys) throw new Error(`script ${script.name}: ${keys.length} keys given, ${script.numberOfKeys} expected`);
  try {
    return await redis.call("EVALSHA", script.sha1, keys.length, ...keys, ...args);
  } catch (err) {
    if (err instanceof Error && err.message.startsWith("NOSCRIPT")) {
      return await redis.call("EVAL", script.source, keys.length, ...keys, ...args);
    }
    throw err;
  }
}

/** How long a stopped take waits for the server to answer its unblock (loopback answers in well under 1 ms). */
const STOP_GRACE_MS = 500;

/**
 * A watchdog that fires this much past its time was not run: this process
 * was stopped (SIGSTOP, a frozen cgroup) or starved, and a reply may be
 * waiting in the socket unread. It looks once more after the pending I/O.
 */
const WATCHDOG_LATE_MS = 1000;

export class WatchdogTimeout extends Error {
  constructor(ms: number, stalledMs: number | null = null) {
    super(
      stalledMs === null
        ? `watchdog: no reply to BLMOVE within ${ms} ms (server paused or connection half-open)`
        : `watchdog: no reply to BLMOVE within ${ms} ms, while this process itself did not run for ${(stalledMs / 1000).toFixed(1)} s (stopped: SIGSTOP or a frozen cgroup; or starved): its own stall, not only the server's`,
    );
    this.name = "WatchdogTimeout";
  }
}

export interface BlockingOptions {
  name: string;
  /** Added to the block timeout before the watchdog gives up on a reply. */
  watchdogMarginMs?: number;
  /**
   * Ends a take at once when `signal` aborts, instead of waiting out the
   * block: CLIENT UNBLOCK … TIMEOUT through `via` (the caller's command
   * connection; the blocked one cannot send). The server answers the BLMOVE
   * as a timeout, so nothing is moved that nobody will decide; one it moved
   * before the unblock arrives is returned as usual. A take the server leaves
   * unanswered STOP_GRACE_MS after the stop (paused, its reply slow, or no
   * unblock could go out) resolves null with its connection dropped, instead
   * of waiting for the watchdog: a job the server moved before then sits in the
   * destination list, where the caller's give-back, sent through `via` after
   * the unblock and so run by the server after it, finds it.
   */
  stop?: { signal: AbortSignal; via: Redis };
}

/**
 * When Redis answered a take that came back empty: only once its block was
 * over, so it was answering by the block's start, or by the send if later.
 * The gate and the worker end an outage here, not at the reply (QA).
 */
export function emptyTakeAnsweredAt(sentAt: number, repliedAt: number, blockMs: number): number {
  return Math.max(sentAt, repliedAt - blockMs);
}

/**
 * A dedicated connection for BLMOVE with a client-side watchdog. The server's
 * block timeout does not bound a half-open socket or a paused server, and
 * ioredis would re-send the blocked command after a reconnect; so when no
 * reply arrives within timeout + margin the connection is thrown away and the
 * next call opens a fresh one. A job the server moved before the reply was
 * lost stays in the processing list; the caller must look there first.
 */
export class BlockingMover {
  private connection: Redis | null = null;
  /** The blocking connection's CLIENT ID, asked for ahead of its first BLMOVE (null: not known). */
  private clientId: Promise<string | null> | null = null;
  private closed = false;
  watchdogFires = 0;
  /**
   * The last take ended at a stop with its BLMOVE unanswered (STOP_GRACE_MS
   * after the stop): the server may have moved a job, or may yet, into
   * the destination list. False after a take that was answered.
   */
  lastTakeUnanswered = false;

  constructor(
    private readonly url: string,
    private readonly options: BlockingOptions,
  ) {}

  /** LEFT of `source` → RIGHT of `destination`, as Buffers (payloads may not be UTF-8). */
  move(source: string, destination: string, blockMs: number): Promise<Buffer | null> {
    if (this.closed) return Promise.reject(new Error("blocking connection closed"));
    const stop = this.options.stop;
    // Stopped between takes: a BLMOVE now would only make the stop wait.
    if (stop?.signal.aborted) return Promise.resolve(null);
    const connection = (this.connection ??= this.open());
    this.lastTakeUnanswered = false;
    const watchdogMs = blockMs + (this.options.watchdogMarginMs ?? 2000);
    return new Promise<Buffer | null>((resolve, reject) => {
      let settled = false;
      let graceTimer: NodeJS.Timeout | undefined;
      const unblock = (): void => {
        // Bounded whether or not the unblock goes out: a connection still waiting to be
        // ready (a paused server) has no client id to unblock, and would hold the stop
        // until its watchdog.
        graceTimer = setTimeout(() => {
          settle();
          this.lastTakeUnanswered = true;
          this.drop(connection);
          resolve(null);
        }, STOP_GRACE_MS);
        void this.unblock(connection);
      };
      const settle = (): void => {
        settled = true;
        clearTimeout(timer);
        clearTimeout(graceTimer);
        stop?.signal.removeEventListener("abort", unblock);
      };
      const armedAt = performance.now();
      let stalledMs: number | null = null;
      const fire = (): void => {
        const late = performance.now() - armedAt - watchdogMs;
        // QA: SIGSTOPped for 14 s, the worker woke to its overdue watchdog before the reply in its socket, and blamed the server.
        if (stalledMs === null && late > WATCHDOG_LATE_MS) {
          stalledMs = late;
          timer = setTimeout(fire, 100);
          return;
        }
        settle();
        this.watchdogFires++;
        this.drop(connection);
        reject(new WatchdogTimeout(watchdogMs, stalledMs));
      };
      let timer = setTimeout(fire, watchdogMs);
      stop?.signal.addEventListener("abort", unblock, { once: true });
      connection.blmoveBuffer(source, destination, "LEFT", "RIGHT", (blockMs / 1000).toFixed(3)).then(
        (value) => {
          if (settled) return;
          settle();
          resolve(value);
        },
        (err: unknown) => {
          if (settled) return;
          settle();
          this.drop(connection);
          // "Connection is closed." alone would hide a refused database.
          reject(databaseRefusal(connection) ?? (err instanceof Error ? err : new Error(String(err))));
        },
      );
    });
  }

  /**
   * The BLMOVE on `connection` answers now, as a timeout. Best effort: with no
   * client id, or `via` not connected, the take ends at the stop's grace
   * (move's timer) all the same. An id is
   * unblocked only while its connection is the one in use: after a drop (or a
   * server restart) it could name somebody else's client.
   */
  private async unblock(connection: Redis): Promise<void> {
    const via = this.options.stop?.via;
    const id = await this.clientId;
    if (!via || id === null || this.connection !== connection || via.status !== "ready") return;
    via.client("UNBLOCK", id, "TIMEOUT").catch(() => {});
  }

  close(): void {
    this.closed = true;
    if (this.connection) this.drop(this.connection);
  }

  private open(): Redis {
    const redis = openRedis(this.url, {
      lazyConnect: true,
      connectionName: this.options.name,
      enableOfflineQueue: true,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      connectTimeout: 5000,
      // No reconnects on this one: a broken connection is replaced, not revived.
      retryStrategy: () => null,
    });
    redis.on("error", () => {});
    // Queued ahead of the first BLMOVE on this connection, so it is known before any stop.
    this.clientId = this.options.stop ? redis.client("ID").then((id) => String(id), () => null) : null;
    return redis;
  }

  private drop(connection: Redis): void {
    if (this.connection === connection) {
      this.connection = null;
      this.clientId = null;
    }
    connection.disconnect();
  }
}

/** QA W 9: a plain server never answers a TLS handshake, and "connect ETIMEDOUT" alone did not say why. */
export function tlsHint(url: string): string {
  return url.startsWith("rediss:") ? " (rediss:// is TLS: a Redis without TLS never answers its handshake; redis:// for a plain one)" : "";
}

/**
 * Whether two Redis URLs name the same server and database: a drill's
 * recorded URL and one typed again may differ in spelling (localhost, the
 * default port, the password). Unparsable ones compare as text.
 */
export function sameRedis(a: string, b: string): boolean {
  return redisKey(a, true) === redisKey(b, true);
}

/** Whether two Redis URLs name the same server, in any database (a server stopped is gone for all of them). */
export function sameRedisServer(a: string, b: string): boolean {
  return redisKey(a, false) === redisKey(b, false);
}

function redisKey(url: string, withDatabase: boolean): string {
  try {
    // The database as ioredis selects it: the path, else `?db=`, as a number (`/03` is db 3; QA: `?db=3` read as db 0).
    const db = withDatabase ? `/${redisDatabase(url)}` : "";
    // A socket path: the path is the server.
    if (url.startsWith("/")) return `unix:${url.split("?")[0]}${db}`;
    const u = new URL(url);
    if (u.protocol !== "redis:" && u.protocol !== "rediss:") return url;
    const host = u.hostname.replace(/^\[|\]$/g, "");
    return `${u.protocol}//${host === "localhost" || host === "" ? "127.0.0.1" : host}:${u.port || "6379"}${db}`;
  } catch {
    return url;
  }
}
