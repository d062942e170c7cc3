import { statSync } from "node:fs";
import path from "node:path";
import { markPasteable } from "./charset.js";
import { writeErr } from "./closedStdout.js";
import { UsageError } from "./errors.js";
import { refuseNotUtf8 } from "./util/notUtf8.js";
import { HostRoots } from "./host/kernelFile.js";
import type { RedisWant } from "./drill/state.js";

export const DEFAULT_STATE_DIR = "/var/lib/drill";

export const DEFAULT_PROCFS = "/proc";
export const DEFAULT_SYSFS = "/sys";

/**
 * `drill`, with --state-dir (and the --sysfs/--procfs of `roots`) when not the
 * default: a command suggested to the operator works as typed, on the same tree.
 */
export function drillCommandFor(stateDir: string, roots?: { sysfs: string; procfs: string }): string {
  return drillCommandAt({ stateDir, sysfs: roots?.sysfs, procfs: roots?.procfs });
}

/**
 * `drill` with every global flag that selects what a suggested command acts
 * on, when not the default: --state-dir, --sysfs and --procfs (a fake tree, a
 * host mounted in a container), and --redis for a command that uses it. A
 * rerun hint without them, copied by the operator, acts on another place:
 * the real /sys instead of the tree the run was given. A Redis that came
 * from DRILL_REDIS_URL (`redisTyped` false) is left to it: pasted in that
 * shell the command reads it again, as that variable, never as a typed
 * --redis, which means more (a rollback takes it as where the drill's Redis
 * moved; a report reads it over the drill's own).
 */
export function drillCommandAt(where: { stateDir: string; sysfs?: string; procfs?: string; redisUrl?: string; redisTyped?: boolean }): string {
  const redis = printedRedis(where);
  const flags = [
    where.stateDir === DEFAULT_STATE_DIR ? [] : ["--state-dir", where.stateDir],
    where.sysfs === undefined || where.sysfs === DEFAULT_SYSFS ? [] : ["--sysfs", where.sysfs],
    where.procfs === undefined || where.procfs === DEFAULT_PROCFS ? [] : ["--procfs", where.procfs],
    redis === undefined ? [] : ["--redis", redactUrl(redis)],
  ].flat();
  return ["drill", ...flags.map(shellWord)].join(" ");
}

/** The Redis a printed command names as --redis (drillCommandAt): none when it came from DRILL_REDIS_URL. */
export function printedRedis(where: { redisUrl?: string; redisTyped?: boolean }): string | undefined {
  return where.redisTyped === false ? undefined : where.redisUrl;
}

/**
 * A word as a POSIX shell reads it back: quoted only when it has to be. It is
 * marked as a command's: under an ASCII-only locale one holding non-ASCII
 * prints as `$'…'` with its bytes escaped, not with `?` as prose (charset.ts).
 */
export function shellWord(word: string): string {
  if (/^[\w@%+=:,./-]+$/.test(word)) return word;
  const quoted = `'${word.replace(/'/g, `'\\''`)}'`;
  markPasteable(quoted, word);
  return quoted;
}

/** Where a Redis command goes with no --redis, no DRILL_REDIS_URL and no drill at all up in the state dir. */
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";

/** Global flags of DESIGN.md, resolved once (flag, then env, then default). */
export interface GlobalOptions {
  redisUrl: string | undefined;
  /** redisUrl typed as --redis, not read from DRILL_REDIS_URL (exported for other commands, it may not mean this one). */
  redisTyped?: boolean;
  procfs: string;
  sysfs: string;
  stateDir: string;
  json: boolean;
  color: boolean;
}

export function resolveGlobalOptions(raw: {
  redis?: string;
  /** Commander's source of `redis`: "env" when its .env() read DRILL_REDIS_URL into the flag. */
  redisSource?: string;
  procfs?: string;
  sysfs?: string;
  stateDir?: string;
  /** Commander's sources of the three dirs: "env" when its .env() read the variable into the flag. */
  procfsSource?: string;
  sysfsSource?: string;
  stateDirSource?: string;
  json?: boolean;
  color?: boolean;
}, env: NodeJS.ProcessEnv = process.env): GlobalOptions {
  const redisUrl = raw.redis ?? env.DRILL_REDIS_URL ?? undefined;
  // The operator fixes what the message names: the variable when the flag was not typed.
  if (redisUrl !== undefined) checkRedisUrl(redisUrl, raw.redis !== undefined && raw.redisSource !== "env" ? "--redis" : "DRILL_REDIS_URL");
  // Absolute from here on: up's children, the embedded redis-server's --dir
  // and a rollback run from another directory all read these paths.
  const dir = (given: string | undefined, givenSource: string | undefined, fromEnv: string | undefined, flag: string, variable: string, fallback: string, mustExist = false): string => {
    const value = given ?? fromEnv ?? fallback;
    // The operator fixes what the message names: the variable when commander read it into the flag (QA: DRILL_SYSFS blamed on --sysfs).
    const source = given !== undefined && givenSource !== "env" ? flag : variable;
    if (value === "") throw new UsageError(`${source}: empty path`);
    // The variable too when read here, not by commander (its flags are checked before any action: cli.ts).
    refuseNotUtf8(source, value);
    const resolved = path.resolve(value);
    // A file where a dir belongs fails later as ENOTDIR deep in whatever reads it (or as "nothing to roll back"):
    // said here, naming the flag. A dir not there yet is fine: the state dir is made on first use.
    let isDirectory = true;
    try {
      isDirectory = statSync(resolved).isDirectory();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // A procfs or sysfs root that is not there reads every signal as missing and exits 0 (QA): a typo, said here.
      if (code === "ENOTDIR" || (mustExist && code === "ENOENT")) isDirectory = false;
    }
    if (!isDirectory) throw new UsageError(`${source}: ${resolved} is not a directory${mustExist ? ` (the ${flag === "--procfs" ? "/proc" : "/sys"} tree every kernel file is read under)` : ""}`);
    return resolved;
  };
  return {
    redisUrl,
    redisTyped: raw.redis !== undefined && raw.redisSource !== "env",
    procfs: dir(raw.procfs, raw.procfsSource, env.DRILL_PROCFS, "--procfs", "DRILL_PROCFS", DEFAULT_PROCFS, true),
    sysfs: dir(raw.sysfs, raw.sysfsSource, env.DRILL_SYSFS, "--sysfs", "DRILL_SYSFS", DEFAULT_SYSFS, true),
    stateDir: dir(raw.stateDir, raw.stateDirSource, env.DRILL_STATE_DIR, "--state-dir", "DRILL_STATE_DIR", DEFAULT_STATE_DIR),
    json: raw.json ?? false,
    color: raw.color !== false && env.NO_COLOR === undefined && env.FORCE_COLOR !== "0",
  };
}

/**
 * `redis://:secret@host` → `redis://:***@host`, for messages. Up to the last
 * `@`: a password typed with an `@` or `/` in it (not percent-encoded) is
 * hidden whole; an `@` in a path is over-redacted, never a password shown.
 */
export function redactUrl(url: string): string {
  // ioredis takes a password from the query too (`?password=`), socket paths included (QA: shown in clear everywhere).
  const hidden = url.replace(/([?&]password=)[^&#]*/g, "$1***");
  const start = hidden.indexOf("//");
  const at = hidden.lastIndexOf("@");
  if (start < 0 || at < start) return hidden;
  const auth = hidden.slice(start + 2, at);
  const colon = auth.indexOf(":");
  return `${hidden.slice(0, start + 2)}${colon < 0 ? "***" : `${auth.slice(0, colon)}:***`}${hidden.slice(at)}`;
}

/**
 * Said under printed commands that name a Redis whose password redactUrl hid:
 * `***` does not paste, and the password stays out of the output (QA). null
 * when no URL among `urls` has one.
 */
export function hiddenPasswordNote(urls: ReadonlyArray<string | undefined>): string | null {
  if (!urls.some((url) => url !== undefined && redactUrl(url) !== url)) return null;
  return "(the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL)";
}

/** hiddenPasswordNote at the end of the line that names the command: "", or a space and the note. */
export function hiddenPasswordNoteAfter(urls: ReadonlyArray<string | undefined>): string {
  const note = hiddenPasswordNote(urls);
  return note === null ? "" : ` ${note}`;
}

/**
 * The Redis of a command that uses one (pack, gate, gate mode, watch,
 * worker): --redis / DRILL_REDIS_URL, silently; else the Redis of the one
 * drill up in the state dir on this queue (and cgroup), said once on stderr,
 * as `report` and `rollback` read it from state.json; else, only when no
 * drill is up there, the default. `up` starts its Redis on a free port, so
 * while a drill runs the default is somebody else's: a command on another
 * queue or cgroup is exit 2 naming the drills up (chooseDrillRedis), before
 * any connection.
 */
export async function commandRedisUrl(
  g: Pick<GlobalOptions, "redisUrl" | "stateDir">,
  want: RedisWant,
  note: (line: string) => void = (line) => writeErr(`${line}\n`),
): Promise<string> {
  return (await commandRedis(g, want, note)).url;
}

/** commandRedisUrl, with the drills whose state named it (none: --redis, DRILL_REDIS_URL or the default). */
export async function commandRedis(
  g: Pick<GlobalOptions, "redisUrl" | "stateDir">,
  want: RedisWant,
  note: (line: string) => void = (line) => writeErr(`${line}\n`),
): Promise<{ url: string; drills: string[] }> {
  if (g.redisUrl !== undefined) return { url: g.redisUrl, drills: [] };
  // Loaded here, not at start-up: `drill --help` loads no drill code.
  const { chooseDrillRedis, listDrills, readStateEntries, statePath } = await import("./drill/state.js");
  const chosen = chooseDrillRedis(readStateEntries(g.stateDir, listDrills(g.stateDir)), want, g.stateDir);
  if (chosen === null) {
    // Said, as the drill's Redis is: a pack with no drill up pushed onto the host's own Redis without a word (QA).
    note(`redis: no drill is up in ${g.stateDir}: ${DEFAULT_REDIS_URL}, the default (--redis or DRILL_REDIS_URL for another)`);
    return { url: DEFAULT_REDIS_URL, drills: [] };
  }
  const from = chosen.names.map((name) => statePath(g.stateDir, name)).join(", ");
  note(`redis: drill ${chosen.names.join(", ")}'s redis at ${redactUrl(chosen.url)} (from ${from})`);
  return { url: chosen.url, drills: chosen.names };
}

/** ioredis takes redis:// and rediss:// URLs (or a unix socket path); anything else would crash deep inside it. */
function checkRedisUrl(url: string, source: string): void {
  if (!url.startsWith("/")) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new UsageError(`${source}: not a URL: "${redactUrl(url)}" (e.g. redis://127.0.0.1:6379)`);
    }
    if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
      throw new UsageError(`${source}: "${parsed.protocol}" is not redis: or rediss: (e.g. redis://127.0.0.1:6379)`);
    }
    // QA W 10: read as database "tmp/r.sock", "not a whole number".
    if (parsed.hostname === "" && parsed.pathname.lastIndexOf("/") > 0) {
      throw new UsageError(`${source}: "${redactUrl(url)}" names no host: for a unix socket give its path itself (${parsed.pathname}, with ?db=N for a database)`);
    }
    // ioredis decodes them and threw a bare URIError (QA: `%ZZ` in a password).
    for (const [part, text] of [["user", parsed.username], ["password", parsed.password]] as const) {
      try {
        decodeURIComponent(text);
      } catch {
        throw new UsageError(`${source}: not a URL: "${redactUrl(url)}" (a malformed %-escape in its ${part}: write % as %25)`);
      }
    }
  }
  redisDatabase(url, source);
}

/**
 * The database a Redis URL selects: its path (`redis://host:6379/2`), else
 * its `?db=` (ioredis reads both), else 0. ioredis parseInt()s whatever is
 * there: `/abc` became SELECT NaN and `/1.5` db 1, so anything but a whole
 * number is exit 2 naming `source`, before any connection.
 */
export function redisDatabase(url: string, source = "--redis"): number {
  let parsed: URL;
  try {
    // A socket path takes its database from the query, as ioredis reads it.
    parsed = new URL(url.startsWith("/") ? `redis://${url}` : url);
  } catch {
    throw new UsageError(`${source}: not a URL: "${redactUrl(url)}" (e.g. redis://127.0.0.1:6379)`);
  }
  const fromPath = url.startsWith("/") || parsed.pathname === "" || parsed.pathname === "/" ? null : parsed.pathname.slice(1);
  const given = fromPath ?? parsed.searchParams.get("db");
  if (given === null) return 0;
  const db = /^\d+$/.test(given) ? Number(given) : NaN;
  if (!Number.isSafeInteger(db)) {
    throw new UsageError(`${source}: database "${given}" in ${redactUrl(url)} is not a whole number (e.g. redis://127.0.0.1:6379/2, or no path for db 0)`);
  }
  return db;
}

/** The deny-all lever as an operator types it elsewhere: the drill's Redis named, its queue when not the default. */
export function leverCommand(url: string, queue: string, mode: "reject_all" | "admit", at?: { stateDir: string; sysfs?: string; procfs?: string }): string {
  // `at`: the flags of the command that names it; `admit` reads host PSI, so a --procfs given there matters (QA).
  // Every word quoted as the shell reads it back (QA: a socket path with a space, a queue `x$Q`).
  // The lever's Redis (a drill's own, no longer up): named as --redis wherever the naming command's came from.
  const drill = drillCommandAt({ ...(at ?? { stateDir: DEFAULT_STATE_DIR }), redisUrl: url, redisTyped: undefined });
  return `${drill} gate mode ${mode}${queue === "jobs" ? "" : ` --queue ${shellWord(queue)}`}`;
}

/**
 * The command that runs a rollback again, as pasted: on the same tree, state dir and Redis
 * (`drillCmd`, drillCommandAt of the run), for `drill` when it is about one, else --name as
 * asked (a plain rollback after `--name X` would reach every drill in the state dir), and
 * --queue as asked (its re-drain runs last), with --queue-only when asked (without it, every
 * drill there). A bare `drill rollback` runs on the default
 * state dir (QA: "nothing to roll back", exit 0, while the drain was pending).
 */
export function rollbackAgain(drillCmd: string, asked: { name?: string; queue?: string; queueOnly?: boolean }, drill?: string): string {
  const name = drill ?? asked.name;
  const flags = [...(name === undefined ? [] : ["--name", name]), ...(asked.queue === undefined ? [] : ["--queue", asked.queue]), ...(asked.queueOnly ? ["--queue-only"] : [])];
  return [drillCmd, "rollback", ...flags.map(shellWord)].join(" ");
}

/** `drill report` of a drill as pasted: on the state dir and tree the command read (`drillCmd`), by --name, an earlier run by --run, as --format (md: the incident note). */
export function reportAgain(drillCmd: string, drill: string, more: { runId?: string; format?: "md" } = {}): string {
  const flags = ["--name", drill, ...(more.runId === undefined ? [] : ["--run", more.runId]), ...(more.format === undefined ? [] : ["--format", more.format])];
  return [drillCmd, "report", ...flags.map(shellWord)].join(" ");
}

/**
 * `drill report` of a queue as md (the incident note), as pasted: on the state dir and tree of
 * `drillCmd` (drillCommandAt with no Redis), its Redis as `redisUrl` (queueReportRedis; none:
 * left to DRILL_REDIS_URL). Every word quoted as the shell reads it back.
 */
export function reportQueueAgain(drillCmd: string, queue: string, redisUrl?: string): string {
  const flags = [...(redisUrl === undefined ? [] : ["--redis", redactUrl(redisUrl)]), "report", "--queue", queue, "--format", "md"];
  return [drillCmd, ...flags.map(shellWord)].join(" ");
}

/**
 * The --redis of a queue's report (reportQueueAgain) after a command that acted on `url`: as
 * printedRedis names the command's own (typed: named; DRILL_REDIS_URL: left to it), and named
 * when it was the default: report has none (without --redis or the variable it reads only a
 * drill's state, "no drill to report on", or another drill's Redis).
 */
export function queueReportRedis(where: { redisUrl?: string; redisTyped?: boolean }, url: string): string | undefined {
  return where.redisUrl === undefined ? url : printedRedis(where);
}

export function hostRoots(options: Pick<GlobalOptions, "procfs" | "sysfs">): HostRoots {
  return new HostRoots(options.procfs, options.sysfs);
}

/**
 * Each command lives in src/commands/<name>.ts and exports a factory taking
 * `globals` (resolved lazily, after parsing) and returning its Command.
 * That file holds what --help needs (options, defaults, flag types); its
 * action imports src/commands/<name>.run.ts, the implementation, only when
 * the command runs, so start-up loads no Redis, YAML or zod.
 */
export type GlobalsFn = () => GlobalOptions;
