import { constants, createReadStream, existsSync, openSync, readdirSync, readFileSync, statSync } from "node:fs";
import { stat } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import type { Redis } from "ioredis";
import { isEmbeddedRedis, reviveEmbeddedRedis } from "../drill/embeddedRedis.js";
import { drillCommandFor, reportAgain, rollbackAgain } from "../context.js";
import { unknownDrillProblem, type KnownDrill } from "../drill/rollback.js";
import { HostRoots } from "../host/kernelFile.js";
import { detectLayout } from "../cgroup/layout.js";
import { readOomKillCount } from "../cgroup/memoryFiles.js";
import { workerCgroupFromDirs } from "../cgroup/paths.js";
import { validateDrillName } from "../drill/names.js";
import { drillDir, isDrillUp, keptRunStatePath, listDrills, listKeptRuns, readState, readStateEntries, readStateFile, readUpEnded, runDir, upDiedUnrecorded, type DrillState, type StateEntry } from "../drill/state.js";
import { DrillError, ExitCode, RefusedError, UsageError } from "../errors.js";
import { foreignRecordRefusal, RecordReadError, recordReadError } from "../util/ownFiles.js";
import { queueKeys, type QueueKeys } from "../queue/keys.js";
import { closeRedis, connectRedis, redactUrl, sameRedis } from "../queue/redis.js";
import { scanKeys } from "../drill/drain.js";
import { holderExited, parseWorkerToken } from "../worker/heartbeatToken.js";
import { workerKeys } from "../worker/scripts.js";
import { parseExport, exportTimeMs, queueOfKey } from "./exportFile.js";
import { codeSpan, doneTime, streamDecisionsCounted } from "./build.js";
import {
  eventFromEntry,
  eventStreamFromXinfo,
  FIXED_JOB_LISTS,
  fixedJobListKey,
  firstTokenTimes,
  holderHeartbeatKey,
  jobIdOf,
  jobListRole,
  jobTimingOf,
  parseDoneEntry,
  seqOfText,
  readRecordingStream,
  sortJobLists,
  UNFINISHED_ROLES,
  type CgroupNow,
  type DecisionEvent,
  type DoneEntry,
  type DrillInfo,
  type EventStreamExtent,
  type JobList,
  type JobPlaces,
  type JobTiming,
  type Recording,
  type ReportInputs,
} from "./inputs.js";

/**
 * The I/O of `drill report`: which drill, which source, and reading it.
 * Source: the given --redis, else the drill state's Redis if it answers
 * (DRILL_REDIS_URL only where the state records none: givenRedis), else
 * the newest `final-*.jsonl` rollback exported (so a report still works after
 * rollback stopped the embedded Redis, or after the operator removed the
 * queue's keys from a given one); else an error naming what was tried.
 * An embedded Redis that exited by itself (the drill's duration plus 5
 * minutes) before any rollback is started again on its AOF for the read, and
 * stopped after.
 */

export interface GatherOptions {
  stateDir: string;
  /** --name; undefined: the only drill in the state dir. */
  name: string | undefined;
  /** --queue; undefined: the drill's queue, else `jobs`. */
  queue: string | undefined;
  /** --redis / DRILL_REDIS_URL. */
  redisUrl: string | undefined;
  /** false: redisUrl is DRILL_REDIS_URL's, not typed as --redis (givenRedis); undefined: typed. */
  redisTyped?: boolean;
  sinceMs: number;
  now?: () => number;
  /** Where /proc is: the drill lock and a restarted embedded Redis are checked there. */
  roots?: HostRoots;
  /** --recording: a `watch --record` file used instead of the drill's own (the step-by-step path has none in a run dir). */
  recordingFile?: string;
  /** --run: an earlier run of the drill, kept by the up that replaced it (runs/<id>/state.json); undefined: the current run. */
  runId?: string;
  /**
   * Told the stop of a redis-server restarted on the drill's AOF for this
   * report while it runs ("starting" while it starts, null once stopped or
   * failed): a report stopped by a signal stops it too (QA: left running, it
   * held the AOF and the rollback lock).
   */
  onRevived?: (stop: "starting" | (() => Promise<void>) | null) => void;
}

export interface Gathered {
  inputs: ReportInputs;
  /** The moment the figures describe: now for a live Redis, the export's time for a file. */
  nowMs: number;
}

/**
 * The sidecar recording, in the order looked for: `watch --record` to
 * watch.jsonl (the brief's name), else watch.out, which is where `drill up`
 * sends `watch --json` stdout today (the same one-sample-per-line JSON).
 */
export const RECORDING_FILES = ["watch.jsonl", "watch.out"] as const;
const EXPORT_FILE = /^final-.*\.jsonl$/;
/** Entries read per XRANGE / LRANGE call: a long drill must not come back as one giant reply. */
const BATCH = 5000;
const MAX_EVENTS = 200_000;

/** Drills in the state dir: a state.json (listDrills), or only rollback's export left behind. */
export function reportableDrills(stateDir: string): string[] {
  const names = new Set(listDrills(stateDir));
  try {
    for (const entry of readdirSync(stateDir, { withFileTypes: true })) {
      if (entry.isDirectory() && exportFiles(path.join(stateDir, entry.name)).length > 0) names.add(entry.name);
    }
  } catch {
    // no state dir: no drill
  }
  return [...names].sort();
}

/** `final-*.jsonl` in a drill dir, newest last (their names sort by time). */
export function exportFiles(dir: string): string[] {
  try {
    return readdirSync(dir)
      .filter((f) => EXPORT_FILE.test(f))
      .sort()
      .map((f) => path.join(dir, f));
  } catch {
    return [];
  }
}

/** Which drill a report is about: its name (null: the queue alone), and what the reader should know of the choice. */
export interface DrillChoice {
  name: string | null;
  notes: string[];
}

/** The drill a suggested --name names: one that is up, else the one created last (QA: the first by name, long rolled back). */
function likeliestDrill(stateDir: string, drills: readonly string[]): string {
  const states = readStateEntries(stateDir, drills).flatMap((e) => ("state" in e ? [e.state] : []));
  const up = states.filter(isDrillUp);
  const pool = up.length > 0 ? up : states;
  const latest = pool.reduce<DrillState | null>((best, s) => (best === null || Date.parse(s.createdAt) > Date.parse(best.createdAt) ? s : best), null);
  return latest?.name ?? drills[0]!;
}

/**
 * The drill to report on. --name: that drill, or exit 2 naming the drills
 * there (as rollback does), never a report on the default queue under a typo.
 * --redis and --queue without --name (the command up's "queue in use"
 * refusal prints): the drill in the state dir that ran on that queue of that
 * Redis, else the queue alone, with no run to clip to and no export; however
 * many other drills the state dir holds. Else the only drill there. A
 * DRILL_REDIS_URL (`at.redisTyped` false) no drill there ran on leaves the
 * only drill there its report, on its own Redis (givenRedis). `at`: the
 * tree the suggested report runs on.
 */
export function resolveDrillName(stateDir: string, name: string | undefined, redisUrl: string | undefined, queue?: string, at: { redisTyped?: boolean; roots?: HostRoots } = {}): DrillChoice {
  if (name !== undefined) {
    validateDrillName(name);
    if (!existsSync(drillDir(stateDir, name))) throw new UsageError(unknownReportDrill(name, stateDir));
    return { name, notes: [] };
  }
  const drills = reportableDrills(stateDir);
  const entries = redisUrl === undefined ? [] : readStateEntries(stateDir, drills);
  const unreadable = entries.find((e): e is Extract<StateEntry, { unreadable: string }> => "unreadable" in e);
  if (redisUrl !== undefined && unreadable !== undefined) throw drillUnreadableFor(unreadable.name, unreadable.error, redisUrl);
  if (redisUrl !== undefined && queue !== undefined) {
    const on = entries.flatMap((e) => ("state" in e && e.state.queue === queue && sameRedis(e.state.redis.url, redisUrl) ? [e.name] : []));
    if (on.length === 1) return { name: on[0]!, notes: [] };
    const notes =
      on.length > 1 ? [`drills ${on.join(", ")} in ${stateDir} all ran on queue ${queue} of this Redis: reported as the queue, not as one run (give --name for one)`] : [];
    return { name: null, notes };
  }
  if (redisUrl !== undefined && drills.length > 0) {
    // --redis alone: a drill of the state dir only if it ran on that Redis. The only
    // drill there, run on another, put its header and recording over this Redis's figures (QA).
    const on = entries.flatMap((e) => ("state" in e && sameRedis(e.state.redis.url, redisUrl) ? [e.name] : []));
    if (on.length === 1) return { name: on[0]!, notes: [] };
    if (on.length === 0 && (at.redisTyped !== false || drills.length > 1)) return { name: null, notes: [`no drill of ${stateDir} ran on ${redactUrl(redisUrl)} (${drills.join(", ")} did not): reported as its queue alone; give --name to report a drill`] };
  }
  if (drills.length === 1) return { name: drills[0]!, notes: [] };
  if (drills.length > 1) {
    throw new UsageError(
      `several drills in ${stateDir}: ${drills.join(", ")}; pick one with --name (${reportAgain(drillCommandFor(stateDir, at.roots), likeliestDrill(stateDir, drills))})${redisUrl === undefined || queue !== undefined ? "" : ", or give --queue to report on a queue of that Redis directly"}`,
    );
  }
  if (redisUrl !== undefined) return { name: null, notes: [] };
  // Like a --name that is not there: pointed at the wrong place, bad input (exit 2).
  // A mistyped --state-dir reads as "no such directory", not as an empty one (QA).
  const holds = existsSync(stateDir) ? "holds no <name>/state.json or <name>/final-*.jsonl" : "does not exist";
  throw new UsageError(`there is no drill to report on: ${stateDir} ${holds}, and no --redis (or DRILL_REDIS_URL) was given`);
}

/**
 * --redis, and a drill of the state dir whose state does not read (root's
 * 0700 drill dir, read by another user): it may be the drill that ran on that
 * Redis, and its run would frame the figures (header, window, recording), so
 * the report stops as it does without --redis, with that error's exit code (1
 * for EACCES, 2 for a record drill did not write), rather than say the drill
 * did not run there (QA: "(no drill state)" and "smoke did not", from a state
 * never read). A user who is not root is told how to report the queue alone.
 */
function drillUnreadableFor(name: string, error: unknown, redisUrl: string): DrillError {
  const alone = "give --state-dir an empty directory of your own to report that Redis's queue alone, without the drill";
  const said = error instanceof RecordReadError ? recordReadError(error.file, error.cause, alone) : foreignRecordRefusal(error, "report");
  const reason = said instanceof Error ? said.message : String(said);
  return new DrillError(`cannot tell whether drill ${name} ran on ${redactUrl(redisUrl)}: ${reason}`, said instanceof DrillError ? said.exitCode : ExitCode.failed, { cause: error });
}

/** `--name` naming no drill dir: the drills there (rollback's message), or that there is none. */
function unknownReportDrill(name: string, stateDir: string): string {
  const names = reportableDrills(stateDir);
  const states = readStateEntries(stateDir, names);
  const known: KnownDrill[] = names.map((n) => states.find((e) => e.name === n) ?? { name: n, exportOnly: true });
  if (known.length > 0) return unknownDrillProblem(name, stateDir, known, drillCommandFor(stateDir), "report");
  return `--name: no drill "${name}" in ${stateDir} (no drill there); give the --state-dir that drill up had, or --redis <url> --queue <q> without --name to report on a queue directly`;
}

/**
 * Where the run's logs and recording are: its own run dir, or, for a state
 * written before runs had one (no `runs/` in the drill dir), the drill dir.
 * Without a state there is no run to name: the drill dir, as before.
 */
export function runLogDir(stateDir: string, name: string, state: DrillState | null): string {
  const home = drillDir(stateDir, name);
  if (state === null) return home;
  const own = runDir(stateDir, name, state.runId);
  return existsSync(own) || existsSync(path.join(home, "runs")) ? own : home;
}

/**
 * Rollback's exports that belong to the state's run: written after the run
 * was created (the time in the name, else the file's mtime). An earlier
 * run's export holds that run's figures, never this one's. Without a state
 * (or a createdAt to compare), every export.
 */
export function runExportFiles(dir: string, state: DrillState | null): { own: string[]; earlier: string[] } {
  const all = exportFiles(dir);
  const createdMs = state ? Date.parse(state.createdAt) : NaN;
  if (!Number.isFinite(createdMs)) return { own: all, earlier: [] };
  const at = (file: string) => {
    const named = exportTimeMs(path.basename(file));
    if (named !== null) return named;
    try {
      return statSync(file).mtimeMs;
    } catch {
      return -Infinity;
    }
  };
  return { own: all.filter((f) => at(f) >= createdMs), earlier: all.filter((f) => at(f) < createdMs) };
}

/**
 * up's counts of what it packed, when a rollback stopped it (runs/<id>/up-ended.json):
 * read only where the report's end line gives them (a rollback recorded, no
 * end of up's own). One drill did not write, or that is no end record, is
 * named in a note and not taken on its word: its counts are n/a.
 */
function upEndedAtRollback(state: DrillState | null, logDir: string | null, notes: string[]): Pick<DrillInfo, "upEndedAtRollback" | "upEndedNotTaken"> {
  if (state === null || state.ended || state.rollback === undefined || logDir === null) return { upEndedAtRollback: null };
  const read = readUpEnded(logDir);
  if (read.ok) return { upEndedAtRollback: read.value };
  notes.push(`pushed and not packed at the run's end are n/a: ${read.reason}`);
  return { upEndedAtRollback: null, upEndedNotTaken: true };
}

function drillInfo(name: string, state: DrillState | null, roots: HostRoots, upEnded: Pick<DrillInfo, "upEndedAtRollback" | "upEndedNotTaken">, stateDir: string): DrillInfo {
  return {
    name,
    runId: state?.runId ?? null,
    drillFile: state?.drillFile ?? null,
    createdAt: state?.createdAt ?? null,
    scheduleStartedAt: state?.scheduleStartedAt ?? null,
    phase: state?.phase ?? null,
    queue: state?.queue ?? null,
    ended: state?.ended ?? null,
    rollbackAt: state?.rollback?.at ?? null,
    rollbackStartedAt: state?.rollbackStartedAt ?? null,
    lastRollbackAt: state?.rollback?.lastAt ?? null,
    redrains: (state?.rollback?.redrains ?? []).map((r) => ({ at: r.at, drained: r.drained })),
    upGone: state !== null && upDiedUnrecorded(roots, state) ? { pid: state.owner.pid } : null,
    ...upEnded,
    rollbackCommand: rollbackAgain(drillCommandFor(stateDir, roots), {}, name),
  };
}


/**
 * A recording, read a line at a time (readRecordingStream). A FIFO (`mkfifo`,
 * or `--recording <(zcat watch.jsonl.gz)`) is read on the event loop, not in a
 * read that blocks: one nobody writes yet waits for its writer, and Ctrl-C or
 * SIGTERM still stops the report (QA: a synchronous read heard neither, and a
 * thread-pool read kept process.exit waiting for it).
 */
async function readRecordingFile(file: string): Promise<Recording> {
  if (!(await stat(file)).isFIFO()) return readRecordingStream(file, createReadStream(file));
  const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
  return readRecordingStream(file, new net.Socket({ fd, readable: true, writable: false }));
}

/**
 * --recording: the operator named it, so a file that cannot be read or holds
 * no sample is bad input (exit 2 naming the flag), never a silent "n/a".
 */
async function givenRecording(file: string): Promise<Recording> {
  let recording: Recording;
  try {
    recording = await readRecordingFile(file);
  } catch (err) {
    throw new UsageError(`--recording: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? message(err)}`);
  }
  if (recording.samples.length === 0) {
    const skipped = recording.badLines > 0 ? ` (${recording.badLines} line(s), none a sample)` : " (it is empty)";
    throw new UsageError(`--recording: ${file} holds no watch sample${skipped}; give the file \`drill watch --record\` wrote`);
  }
  return recording;
}

async function readRecording(file: string, notes: string[]): Promise<Recording | null> {
  try {
    return await readRecordingFile(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "ENOENT") notes.push(`cannot read ${file}: ${code ?? (err as Error).message}`);
    return null;
  }
}

/**
 * The drill's worker cgroup's oom_kill now, when the cgroup up recorded is
 * still there and not rolled back: the recording's last sample can precede
 * the kill that ended the drill. null: nothing to read (no cgroup recorded,
 * removed, or a layout that does not fit the recorded dirs).
 */
export function readCgroupNow(roots: HostRoots, state: DrillState | null, nowMs: number): CgroupNow | null {
  const cg = state?.cgroup ?? null;
  if (state === null || cg === null || cg.dirs.length === 0) return null;
  // Removed by rollback: what it read just before.
  const atTeardown = (): CgroupNow | null =>
    cg.oomKillAtTeardown ? { tsMs: cg.oomKillAtTeardown.tsMs, file: `${cg.dirs[0]} (read by rollback before it removed the cgroup)`, oomKill: cg.oomKillAtTeardown.count, reason: null } : null;
  if (state.phase === "complete") return atTeardown();
  const layout = detectLayout(roots);
  if (!layout.ok) return null;
  const cgroup = workerCgroupFromDirs(layout.value, cg.name, cg.dirs);
  if (cgroup === null || !existsSync(cgroup.limits.dir)) return atTeardown();
  const reading = readOomKillCount(cgroup.limits);
  const file = path.join(cgroup.limits.dir, cgroup.limits.version === 2 ? "memory.events" : "memory.oom_control");
  return reading.ok ? { tsMs: nowMs, file, oomKill: reading.value, reason: null } : { tsMs: nowMs, file: reading.file, oomKill: null, reason: reading.reason };
}

/** How long the drill's own Redis gets to accept a connection before the export is used. */
const PROBE_TIMEOUT_MS = 1000;

/**
 * A quick TCP connect to a redis:// URL: ioredis takes seconds of retries to
 * give up on a refused port, and a rolled-back drill's Redis is simply gone.
 * URLs this cannot read (unix sockets, say) are left to the client.
 */
function probeTcp(url: string, timeoutMs: number): Promise<void> {
  let host: string;
  let port: number;
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") return Promise.resolve();
    host = parsed.hostname.replace(/^\[|\]$/g, "") || "127.0.0.1";
    port = parsed.port === "" ? 6379 : Number(parsed.port);
  } catch {
    return Promise.resolve();
  }
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const done = (err: Error | null) => {
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    socket.setTimeout(timeoutMs, () => done(new Error(`no answer on ${host}:${port} within ${timeoutMs} ms`)));
    socket.once("error", (err) => {
      const code = (err as NodeJS.ErrnoException).code;
      done(Object.assign(new Error(`${host}:${port}: ${code ?? err.message}`), { code }));
    });
    socket.once("connect", () => done(null));
  });
}

const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * `--run <id>`: an earlier run of the drill, as the up that replaced it kept
 * it (runs/<id>/state.json). Unknown: bad usage, naming the runs there are.
 */
function readKeptRun(stateDir: string, name: string, runId: string, current: DrillState | null): DrillState {
  const file = keptRunStatePath(stateDir, name, runId);
  const kept = readStateFile(file);
  // A run dir copied or renamed by hand: its state says which run it is, and the report must not put one run's figures under another's id.
  if (kept !== null && kept.runId !== runId) throw new DrillError(`--run ${runId}: ${file} holds run ${kept.runId} of drill ${kept.name}, not run ${runId}; move it back to runs/${kept.runId}/ or report it as --run ${kept.runId}`);
  if (kept !== null) return kept;
  const runs = listKeptRuns(stateDir, name).map((k) => (k.state === null ? `${k.id} (unreadable: ${k.unreadable})` : `${k.id} (created ${k.state.createdAt})`));
  const now = current === null ? "" : `; the current run is ${current.runId}`;
  throw new UsageError(`--run: no run ${runId} of drill ${name} kept in ${path.join(drillDir(stateDir, name), "runs")} (${runs.length === 0 ? "none kept: runs are kept from the up that replaces them on" : `kept: ${runs.join(", ")}`})${now}`);
}

/**
 * A kept run's own exports: its rollback's, and those of drains after it;
 * none of a later run's. Found by name in the drill dir of the state dir
 * given (QA: a state dir copied elsewhere read the original's files).
 */
function keptRunExports(dir: string, state: DrillState): string[] {
  const names = [...(state.rollback?.redrains ?? []).map((r) => r.exported), state.rollback?.exported ?? null].flatMap((f) => (typeof f === "string" ? [path.basename(f)] : []));
  return names.map((n) => path.join(dir, n)).filter((f) => existsSync(f)).sort((a, b) => (exportTimeMs(path.basename(a)) ?? 0) - (exportTimeMs(path.basename(b)) ?? 0));
}

/** gatherSources; a record drill did not write is bad input to a report, which only reads (foreignRecordRefusal). */
export async function gatherReport(options: GatherOptions): Promise<Gathered> {
  try {
    return await gatherSources(options);
  } catch (err) {
    throw foreignRecordRefusal(err, "report");
  }
}

async function gatherSources(options: GatherOptions): Promise<Gathered> {
  const now = options.now ?? Date.now;
  const chosen = resolveDrillName(options.stateDir, options.name, options.redisUrl, options.queue, { redisTyped: options.redisTyped, roots: options.roots });
  const name = chosen.name;
  if (name === null && options.runId !== undefined) throw new UsageError(`--run: needs a drill (--name, or the only one in ${options.stateDir}) whose run it is`);
  const current = name === null ? null : readState(options.stateDir, name);
  // An earlier run is read from its own export and logs only: the live Redis, if any, holds a later run's keys.
  const archived = name !== null && options.runId !== undefined && options.runId !== current?.runId ? readKeptRun(options.stateDir, name, options.runId, current) : null;
  const state = archived ?? current;
  let keys = queueKeys(options.queue ?? state?.queue ?? "jobs");
  /** The queue is the user's (another --queue, or the default with no drill state), not the drill's own. */
  const queueAsked = state === null || keys.queue !== state.queue;
  const notes: string[] = [...chosen.notes];
  // QA S 8: `--name e --queue q2` printed drill e's run ("ended: … all 9 jobs packed") over another queue's decisions.
  if (state !== null && queueAsked) {
    notes.push(`queue ${keys.queue} is not drill ${name}'s own (${state.queue}): the run's lines (when it ran, how it ended, what up packed) and its pressure figures (its recording) are that drill's; the decisions, first token and totals are queue ${keys.queue}'s`);
  }
  // After a rollback its figures are in its export (or the AOF): a --queue the source does not hold points there.
  const drillQueue: DrillQueue | null =
    state !== null && name !== null && queueAsked ? { name, queue: state.queue, report: reportAgain(drillCommandFor(options.stateDir, options.roots), name, { runId: archived?.runId }) } : null;
  const dir = name === null ? null : drillDir(options.stateDir, name);
  const given = givenRedis(options, state, name, notes);

  const logDir = name === null ? null : runLogDir(options.stateDir, name, state);
  const candidates = logDir === null ? [] : RECORDING_FILES.map((f) => path.join(logDir, f));
  const exports = dir === null ? { own: [], earlier: [] } : archived ? { own: keptRunExports(dir, archived), earlier: [] } : runExportFiles(dir, state);
  let recording: Recording | null = null;
  if (options.recordingFile !== undefined) {
    recording = await givenRecording(options.recordingFile);
  } else {
    for (const file of candidates) {
      recording = await readRecording(file, notes);
      if (recording !== null) break;
    }
  }
  const base = {
    queue: keys.queue,
    drill: name === null ? null : { ...drillInfo(name, state, options.roots ?? new HostRoots(), upEndedAtRollback(state, logDir, notes), options.stateDir), earlierRun: archived !== null },
    recording,
    recordingLooked: options.recordingFile !== undefined ? options.recordingFile : candidates.length === 0 ? null : candidates.join(" or "),
    gatherNotes: notes,
    cgroupAtSetup: queueAsked ? null : (state?.cgroup?.oomKillAtSetup ?? null),
  };

  // 1. live: the given Redis (its failure is the error), else the drill's own if it answers
  const tried: string[] = [];
  let redis: Redis | null = null;
  let url: string | null = null;
  let revived: { stop: () => Promise<void> } | null = null;
  try {
    if (archived) {
      const notRead = given === undefined ? "" : ` (--redis ${redactUrl(given)} is not read for it)`;
      tried.push(`run ${archived.runId} is an earlier run of drill ${name}: read from its own export, not a Redis that now holds a later run${notRead}`);
    } else if (given !== undefined) {
      url = given;
      // QA W 4: another database given, the drill's run read as empty without a word.
      if (state !== null && state.redis.url !== "" && !sameRedis(state.redis.url, url)) {
        notes.push(`--redis ${redactUrl(url)} is not drill ${name}'s Redis (${redactUrl(state.redis.url)}, in its state.json): read as asked, every figure here is that Redis's; without --redis the report reads the drill's own`);
      }
      redis = await connectRedis(url, { name: "drill-report" });
    } else if (state) {
      const exported = state.rollback?.exported;
      if (state.redis.url === "") {
        // `up` stopped before it had a Redis; never fall back to a default URL (somebody else's). A recorded end says why
        // (its embedded Redis failed to start): no job was packed (QA: "Redis no Redis recorded in ...").
        const why = state.ended?.reason ? `run ${state.runId} ended before it had one, no job packed: ${state.ended.reason}` : "up stopped before it had one";
        tried.push(`none recorded in ${path.join(dir!, "state.json")} (${why})`);
      } else if (state.redis.embedded && exported && existsSync(exported)) {
        // Rollback stopped this Redis after exporting: whatever answers on its port now is not the drill's.
        tried.push(`${redactUrl(state.redis.url)} (embedded, stopped by rollback)`);
      } else {
        try {
          await probeTcp(state.redis.url, PROBE_TIMEOUT_MS);
          redis = await connectRedis(state.redis.url, { name: "drill-report" });
          url = state.redis.url;
          if (state.redis.embedded && !(await isEmbeddedRedis(redis, state.redis.embedded.dir))) {
            throw new Error(`answers, but not from ${state.redis.embedded.dir}`);
          }
        } catch (err) {
          if (redis !== null) await closeRedis(redis);
          redis = null;
          url = null;
          const down = `${redactUrl(state.redis.url)} from ${path.join(dir!, "state.json")} (${message(err)})`;
          if (state.redis.embedded && exports.own.length === 0) {
            // Exited by itself (duration + 5 min) or died before any rollback
            // exported it: appendfsync always put every write in its AOF.
            const aofDir = state.redis.embedded.dir;
            try {
              options.onRevived?.("starting");
              let restarted;
              try {
                // On its recorded port when nothing listens there (its own exited): see reviveEmbeddedRedis.
                const freed = (err as NodeJS.ErrnoException).code === "ECONNREFUSED" ? state.redis.embedded.port : undefined;
                restarted = await reviveEmbeddedRedis(options.roots ?? new HostRoots(), dir!, aofDir, "report", freed);
              } catch (startErr) {
                options.onRevived?.(null);
                throw startErr;
              }
              revived = restarted;
              options.onRevived?.(restarted.stop);
              redis = await connectRedis(restarted.server.url, { name: "drill-report" });
              url = restarted.server.url;
              notes.push(`the drill's embedded Redis was not running at ${redactUrl(state.redis.url)} (${message(err)}): read from its AOF in ${aofDir} through a redis-server started for this report and stopped after`);
            } catch (reviveErr) {
              if (reviveErr instanceof RefusedError) throw reviveErr; // a rollback holds the drill: say so, do not guess
              tried.push(`${down}; restarting it on its AOF in ${aofDir} failed: ${message(reviveErr)}`);
            }
          } else {
            tried.push(down);
          }
        }
      }
    } else {
      tried.push("no --redis given and no state.json with a Redis URL");
    }

    if (redis !== null && url !== null) {
      try {
        if (!revived && !queueAsked && exports.own.length > 0 && !(await holdsQueue(redis, keys))) {
          // A Redis that outlives the drill (a given one): the operator removed the
          // queue's keys after rollback exported them; the export holds the figures.
          tried.push(`${redactUrl(url)} holds no key of queue ${keys.queue} any more`);
        } else {
          await checkQueueLive(redis, keys, url, notes, queueAsked, drillQueue);
          const nowMs = now();
          const roots = options.roots ?? new HostRoots();
          const runStartMs = queueAsked ? null : Date.parse(state!.createdAt);
          const live = await readLive(redis, keys, { nowMs, sinceMs: options.sinceMs, runStartMs }, notes, roots);
          const source: ReportInputs["source"] = revived ? { kind: "aof", url, aofDir: state!.redis.embedded!.dir } : { kind: "live", url };
          const cgroupNow = queueAsked ? null : readCgroupNow(roots, state, now());
          return { inputs: { ...base, source, ...live, cgroupNow }, nowMs };
        }
      } finally {
        await closeRedis(redis);
      }
    }
  } finally {
    await revived?.stop();
    if (revived) options.onRevived?.(null);
  }

  // 2. rollback's export of this run
  const file = exports.own.at(-1);
  if (file === undefined && archived) {
    // An earlier run has one source: its export (its Redis holds a later run, if any).
    const named = archived.rollback?.exported ? path.join(dir!, path.basename(archived.rollback.exported)) : null;
    throw new DrillError(`run ${archived.runId} of drill ${name} cannot be reported: ${named === null ? "it was never exported (no rollback recorded an export)" : `its export ${named} is gone`}; an earlier run is read from its export alone`);
  }
  if (file === undefined) {
    const looked =
      dir === null ? "no drill dir"
      : exports.earlier.length > 0 ? `no final-*.jsonl of run ${state!.runId} in ${dir} (${exports.earlier.map((f) => path.basename(f)).join(", ")} ${exports.earlier.length === 1 ? "is an earlier run's" : "are earlier runs'"}, written before this run was created at ${state!.createdAt})`
      : `no final-*.jsonl in ${dir}`;
    throw new DrillError(`no source to report on: Redis ${tried.join("; ")}; ${looked}. Give --redis <url> if the queue lives elsewhere`);
  }
  if (tried.length > 0) notes.push(`Redis not used: ${tried.join("; ")}`);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new DrillError(`cannot read ${file}: ${message(err)}`);
  }
  let exported = parseExport(text, keys);
  if (exported.queueKeyCount === 0 && options.queue === undefined && state === null && exported.queues.length === 1) {
    // No --queue and no state.json to name it: an export of one queue is that queue's.
    keys = queueKeys(exported.queues[0]!);
    base.queue = keys.queue;
    exported = parseExport(text, keys);
  }
  if (exported.queueKeyCount === 0) noQueueKey(keys.queue, `rollback's export ${file}`, exported.queues, notes, queueAsked, drillQueue);
  if (exported.badLines > 0) {
    notes.push(
      `${exported.badLines} line(s) of ${file} were not exported keys (the file is cut short or damaged; rollback writes it whole): skipped; ` +
        `a key not in it may have been on them, so its figures are n/a, not 0 (where the jobs are, ids issued, and each of ${keys.events}, ${keys.stats}, ${keys.done}, ${keys.ready}, ${keys.drain} not found)`,
    );
  }
  if (exported.badDone > 0) notes.push(`${exported.badDone} ${keys.done} record(s) were not JSON objects: skipped`);
  const atMs = exportTimeMs(path.basename(file));
  const nowMs = atMs ?? statSync(file).mtimeMs;
  return {
    inputs: {
      ...base,
      source: { kind: "export", file, atMs },
      events: exported.events,
      // The whole stream, and the stats beside it: no entries-added in an export.
      eventStream:
        exported.events === null || exported.events.length === 0
          ? null
          : { firstId: exported.events[0]!.id, lastId: exported.events.at(-1)!.id, length: exported.events.length, entriesAdded: null, decisionsAdded: exported.stats === null ? null : streamDecisionsCounted(exported.stats) },
      done: exported.done,
      stats: exported.stats,
      queueLen: exported.queueLen,
      queueHead: exported.queueHead,
      drainLen: exported.drainLen,
      jobPlaces: exported.jobPlaces,
      unfinished: exported.unfinished,
      firstTokens: exported.firstTokens,
      cgroupNow: queueAsked ? null : readCgroupNow(options.roots ?? new HostRoots(), state, Math.round(nowMs)),
    },
    nowMs: Math.round(nowMs),
  };
}

/**
 * The Redis a report reads before the drill's own: --redis, the operator's
 * override, as typed; DRILL_REDIS_URL, exported for the commands run by hand
 * (or by up for its children), only where the drill's state records no Redis
 * (no drill, or an up stopped before it had one): it never takes a drill's
 * report off that drill's own Redis (QA: `drill report --name X`, as reportAgain
 * prints it, read the exported Redis, every figure another queue's), as it
 * never moves a rollback (rollback.ts givenRedis). Said when it is passed over.
 */
function givenRedis(options: GatherOptions, state: DrillState | null, name: string | null, notes: string[]): string | undefined {
  const url = options.redisUrl;
  if (url === undefined || options.redisTyped !== false || state === null || state.redis.url === "") return url;
  if (!sameRedis(state.redis.url, url)) {
    notes.push(`DRILL_REDIS_URL ${redactUrl(url)} is not drill ${name}'s Redis: read the drill's own (${redactUrl(state.redis.url)}, in its state.json); give --redis to read another`);
  }
  return undefined;
}

/** The drill a report with another --queue is about: the queue it ran on, and the report of it as pasted (reportAgain). */
interface DrillQueue {
  name: string;
  queue: string;
  report: string;
}

/**
 * A source that holds no key of the queue asked for: with other queues in it,
 * the queue name (or the source) is wrong: bad input, exit 2, naming the
 * queues it does hold. When the queue is the drill state's own (no --queue),
 * or the source holds no queue at all (nothing packed yet, an empty
 * export) the report goes on, saying so first, so all-zero figures are not
 * read as a clean run. A drill named beside another queue (`drill`) is
 * pointed to: the queue it ran on and the command that reports it (after a
 * rollback, "give --queue" named another queue of a shared Redis, never the
 * drill's, whose figures were in its export).
 */
function noQueueKey(queue: string, where: string, others: string[], notes: string[], asked: boolean, drill: DrillQueue | null): void {
  const elsewhere = others.filter((q) => q !== queue);
  const ranOn = drill === null ? "" : `; drill ${drill.name} ran on queue ${drill.queue}: ${codeSpan(drill.report)} reports it`;
  if (elsewhere.length > 0 && asked) {
    const give = drill === null ? elsewhere[0] : elsewhere.includes(drill.queue) ? drill.queue : null;
    throw new UsageError(`--queue: ${where} holds no key of queue "${queue}"; it holds queue${elsewhere.length === 1 ? "" : "s"} ${elsewhere.join(", ")}${give === null ? "" : ` (give --queue ${give})`}${ranOn}`);
  }
  const other = elsewhere.length === 0 ? "nor of any other queue" : `it holds ${elsewhere.join(", ")}`;
  notes.unshift(`${where} holds no key of queue ${queue} (${other}): nothing was ever packed on it there; every figure in this report is empty, not a clean run${ranOn}`);
}

/** Keys examined when naming the queues a Redis holds (a shared Redis may be large). */
const QUEUE_SCAN_LIMIT = 100_000;

/** As noQueueKey, for a Redis: SCAN for the queue's keys, else name the queues there from their `:seq`/`:events`/`_drain` keys. */
async function checkQueueLive(redis: Redis, keys: QueueKeys, url: string, notes: string[], asked: boolean, drill: DrillQueue | null): Promise<void> {
  if (await holdsQueue(redis, keys)) return;
  const queues = new Set<string>();
  let examined = 0;
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, "COUNT", 1000);
    examined += batch.length;
    for (const key of batch) {
      if (/:(seq|events|stats|done|admitted)$/.test(key) || key.endsWith("_drain")) {
        const queue = queueOfKey(key);
        if (queue !== null) queues.add(queue);
      }
    }
    cursor = next;
  } while (cursor !== "0" && examined < QUEUE_SCAN_LIMIT);
  noQueueKey(keys.queue, `Redis ${redactUrl(url)}`, [...queues].sort(), notes, asked, drill);
}

/** Whether the Redis holds any key of the queue (`<q>`, `<q>_drain`, `<q>:*`). */
async function holdsQueue(redis: Redis, keys: QueueKeys): Promise<boolean> {
  if ((await redis.exists(keys.ready, keys.drain)) > 0) return true;
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, "MATCH", `${keys.queue}:*`, "COUNT", 1000);
    if (batch.length > 0) return true;
    cursor = next;
  } while (cursor !== "0");
  return false;
}

type LiveFigures = Pick<ReportInputs, "events" | "eventStream" | "done" | "stats" | "queueLen" | "queueHead" | "drainLen" | "jobPlaces" | "unfinished" | "firstTokens">;

/**
 * Where the live read of `<q>:events` starts: an export holds every event,
 * and a live read must give the same report. The window is never earlier
 * than `now − since` or the run's creation (without --since it ends at the
 * run's end, however long ago: from its creation on); and a finished job's
 * slot starts at its admit, which may precede the window (its enqueue_ts
 * bounds that).
 */
export function eventsReadFromMs(at: { nowMs: number; sinceMs: number; runStartMs: number | null }, done: readonly DoneEntry[] | null): number {
  const runStart = at.runStartMs !== null && Number.isFinite(at.runStartMs) ? at.runStartMs : Infinity;
  const earliest = Math.min(at.nowMs - at.sinceMs, runStart);
  // A loop, not Math.min(...): `<q>:done` may hold more entries than a call takes arguments.
  let from = earliest;
  for (const d of done ?? []) if (d.enqueueTs !== null && d.enqueueTs < from && (doneTime(d) ?? Infinity) >= earliest) from = d.enqueueTs;
  return Math.max(0, from);
}

/** Each read on its own: a key of the wrong type makes that figure null, not the report fail. */
async function readLive(redis: Redis, keys: QueueKeys, at: { nowMs: number; sinceMs: number; runStartMs: number | null }, notes: string[], roots: HostRoots): Promise<LiveFigures> {
  const attempt = async <T>(what: string, read: () => Promise<T>): Promise<T | null> => {
    try {
      return await read();
    } catch (err) {
      notes.push(`cannot read ${what}: ${message(err)}`);
      return null;
    }
  };
  const unfinished: JobTiming[] = [];
  const jobPlaces = await attempt("the job lists", () => readJobPlaces(redis, keys, roots, unfinished));
  const firstTokenKey = workerKeys(keys.queue).firstToken;
  const done = await attempt(keys.done, () => readDone(redis, keys.done, notes));
  return {
    jobPlaces,
    unfinished: jobPlaces === null ? null : unfinished,
    firstTokens: await attempt(firstTokenKey, async () => firstTokenTimes(await redis.hgetall(firstTokenKey))),
    // Before the entries, so the entries read hold every one the counters counted (a live gate's later ones are told apart by lastId).
    eventStream: await attempt(`XINFO STREAM ${keys.events}`, () => readEventStream(redis, keys)),
    events: await attempt(keys.events, () => readEvents(redis, keys.events, eventsReadFromMs(at, done))),
    done,
    stats: await attempt(keys.stats, () => redis.hgetall(keys.stats)),
    queueLen: await attempt(`LLEN ${keys.ready}`, () => redis.llen(keys.ready)),
    queueHead: await attempt(`LINDEX ${keys.ready} 0`, () => redis.lindexBuffer(keys.ready, 0)),
    drainLen: await attempt(`LLEN ${keys.drain}`, () => redis.llen(keys.drain)),
  };
}

/** Every job list of the queue (the fixed ones and the SCANned processing/working/retry lists), with each entry's id. */
async function readJobPlaces(redis: Redis, keys: QueueKeys, roots: HostRoots, unfinished: JobTiming[]): Promise<JobPlaces> {
  const names = new Set(FIXED_JOB_LISTS.map((role) => fixedJobListKey(keys.queue, role)));
  for (const pattern of [keys.processingPattern, keys.workingPattern, keys.retryPattern]) for (const key of await scanKeys(redis, pattern)) names.add(key);
  const lists: JobList[] = [];
  for (const key of names) {
    const where = jobListRole(keys.queue, key);
    if (where === null) continue;
    const type = await redis.type(key);
    const heartbeat = holderHeartbeatKey(keys.queue, where.role, where.holder);
    const token = heartbeat === null ? null : await redis.get(heartbeat);
    // A worker SIGKILLed (the OOM killer) leaves its heartbeat for up to its TTL: the process says it is gone first.
    const holder = where.role === "working" && token !== null ? parseWorkerToken(token) : null;
    const exited = holder !== null && holderExited(roots, holder);
    const holderAlive = heartbeat === null ? null : token !== null && !exited;
    const holderExitedPid = exited ? holder.pid : null;
    if (type !== "list" && type !== "none") {
      lists.push({ key, ...where, count: null, ids: null, holderAlive, holderExitedPid });
      continue;
    }
    const ids: Array<string | null> = [];
    const timed = UNFINISHED_ROLES.includes(where.role);
    for (let offset = 0; ; offset += BATCH) {
      const batch = await redis.lrangeBuffer(key, offset, offset + BATCH - 1);
      for (const entry of batch) {
        ids.push(jobIdOf(entry));
        const timing = timed ? jobTimingOf(entry, where.role) : null;
        if (timing) unfinished.push(timing);
      }
      if (batch.length < BATCH) break;
    }
    lists.push({ key, ...where, count: ids.length, ids, holderAlive, holderExitedPid });
  }
  // WRONGTYPE (a key drill never writes as a list or hash) makes it unreadable, not the report fail.
  const seq = await redis.get(keys.seq).then(seqOfText, (err: unknown) => ({ seq: null, seqProblem: `cannot be read (${message(err)})` }));
  return { lists: sortJobLists(lists), ...seq };
}

/**
 * XINFO STREAM with `<q>:stats` in one MULTI: where the stream starts, what it
 * ever took, and the decisions counted at that same moment. null: no stream
 * (never written; a key of another type is readEvents' to say).
 */
async function readEventStream(redis: Redis, keys: QueueKeys): Promise<EventStreamExtent | null> {
  if ((await redis.type(keys.events)) !== "stream") return null;
  const [info, stats] = (await redis.multi().xinfo("STREAM", keys.events).hgetall(keys.stats).exec()) ?? [];
  if (info?.[0]) throw info[0];
  // Stats of another type leave the count unknown (their own read says so), not the extent.
  const counted = !stats?.[0] && typeof stats?.[1] === "object" && stats[1] !== null ? streamDecisionsCounted(stats[1] as Record<string, string>) : null;
  return eventStreamFromXinfo(info?.[1], counted);
}

/** XRANGE from `fromMs` (stream ids carry the time), in batches. */
async function readEvents(redis: Redis, key: string, fromMs: number): Promise<DecisionEvent[]> {
  const events: DecisionEvent[] = [];
  let start = `${Math.max(0, Math.floor(fromMs))}-0`;
  for (;;) {
    const batch = await redis.xrange(key, start, "+", "COUNT", BATCH);
    for (const [id, flat] of batch) events.push(eventFromEntry(id, flat));
    const last = batch.at(-1);
    if (batch.length < BATCH || last === undefined || events.length >= MAX_EVENTS) break;
    start = `(${last[0]}`;
  }
  return events;
}

async function readDone(redis: Redis, key: string, notes: string[]): Promise<DoneEntry[]> {
  const done: DoneEntry[] = [];
  let bad = 0;
  for (let offset = 0; ; offset += BATCH) {
    const batch = await redis.lrange(key, offset, offset + BATCH - 1);
    for (const text of batch) {
      const entry = parseDoneEntry(text);
      if (entry) done.push(entry);
      else bad++;
    }
    if (batch.length < BATCH) break;
  }
  if (bad > 0) notes.push(`${bad} ${key} record(s) were not JSON objects: skipped`);
  return done;
}
