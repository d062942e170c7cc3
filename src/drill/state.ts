import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { stateDirError, writeJsonDurably } from "../cgroup/stateFiles.js";
import { DrillError, UsageError } from "../errors.js";
import { redactUrl, shellWord } from "../context.js";
import { sameRedisServer } from "../queue/redis.js";
import type { HostRoots, Reading } from "../host/kernelFile.js";
import { isSameProcess } from "../host/process.js";
import { ForeignRecordError, readOwnRecord, recordReadError } from "../util/ownFiles.js";
import { shownValue } from "../util/shownValue.js";

/**
 * `<state-dir>/<name>/state.json`: what `drill up` intends and what exists.
 * Intent is written (fsynced) BEFORE each mkdir or spawn, the pid with its
 * start time once it exists; so a SIGKILL between the act and the write
 * still leaves rollback enough to find what was made.
 */
export type ProcessRole = "redis" | "gate" | "worker" | "watch" | "hog" | "packer";

export interface ProcessRecord {
  role: ProcessRole;
  /** A stable label, e.g. `hog-2` for the third phase's hog. */
  key: string;
  pid: number | null;
  /** /proc/<pid>/stat field 22: with the pid, one process across pid reuse. */
  startTime: number | null;
  /** Files the process creates and rollback unlinks (hog and weights files). */
  files: string[];
  intendedAt: string;
}

export interface DrillState {
  version: 1;
  name: string;
  runId: string;
  drillFile: string;
  createdAt: string;
  /** When gate and worker were ready and the schedule's clock started (the phases' `at:` count from here); absent before. */
  scheduleStartedAt?: string;
  phase: "starting" | "running" | "stopped" | "rolling_back" | "complete";
  queue: string;
  redis: { url: string; embedded: { dir: string; port: number } | null };
  /**
   * `oomKillAtSetup`: the cgroup's oom_kill right after setup (absent: unread, or an
   * older up): the report's first reading, for a kill before watch's first sample.
   * `oomKillAtTeardown`: rollback's, just before it removed the cgroup: the last one,
   * for a kill after watch's last sample (the one that stopped the drill).
   */
  cgroup: { name: string; parent: string; dirs: string[]; oomKillAtSetup?: OomKillReading; oomKillAtTeardown?: OomKillReading } | null;
  processes: ProcessRecord[];
  /** `<file-dir>/drill-<runId>`: where the hog's and worker's files go; rollback empties and removes it. */
  fileDir: string | null;
  /** The `drill up` process itself, so rollback can stop a foreground up. */
  owner: { pid: number; startTime: number | null };
  completedAt?: string;
  /** How up's schedule ended, written when up decides its verdict; absent: up did not get there (a rollback stopped it, or it died). */
  ended?: DrillEnded;
  /** Rollback's notes: what it found, did, and left. */
  rollback?: RollbackRecord;
  /**
   * When the run's first rollback started (it takes the drill over at once:
   * deny-all, then the packer stopped). Written as it starts, so one that is
   * interrupted before it records leaves this: the report says a rollback is
   * unfinished, and the one that finishes it records this as the run's end.
   */
  rollbackStartedAt?: string;
}

/** A worker cgroup's oom_kill counter as read at a moment (ms since the epoch). */
export interface OomKillReading {
  tsMs: number;
  count: number;
}

/**
 * What rollbacks of the run recorded. `at` is the first one's (the rollback
 * that took the drill over: the report's end of a run up recorded no end for);
 * a later one (again after an exit 4, or a drain of jobs pushed after a
 * complete one) keeps it and records `lastAt`, a re-drain also in `redrains`.
 * `exported`, `drained` and `left` are the latest rollback's.
 */
export interface RollbackRecord {
  at: string;
  exported?: string;
  drained?: number;
  left: string[];
  /** When the latest rollback recorded; absent: only the first one ran. */
  lastAt?: string;
  /** Drains of jobs pushed after a complete rollback (a given Redis), oldest first; `drained`: the drain's length after it. */
  redrains?: Array<{ at: string; drained: number | null; exported: string | null }>;
}

/** up's verdict on the run, for the report's header: a drill cut short must not read as a clean run. */
const ENDED_VERDICTS: readonly DrillEnded["verdict"][] = ["ran", "stopped_early", "interrupted", "up_gone"];

export interface DrillEnded {
  /** up_gone: written by a rollback that found up gone with no end of its own recorded (SIGKILL, a reboot). */
  verdict: "ran" | "stopped_early" | "interrupted" | "up_gone";
  at: string;
  /** What stopped it (`gate exited (code 143)`); null for a run to its end. */
  reason: string | null;
  pushed: number | null;
  notPacked: number | null;
  /** Pushes that got no reply as the drill stopped, counted in notPacked: each is queued (under the next id) only if Redis ran it. Absent in older state files. */
  unansweredPushes?: number;
  /** Jobs of phases starting past the drill's end (--duration), skipped: not in notPacked. Absent in older state files. */
  skippedJobs?: number;
  /** The ids up's packer pushed: the report tells them from jobs pushed by others on the queue (a hand-run drill pack). Absent in older state files. */
  pushedIds?: string[];
}

export function drillDir(stateDir: string, name: string): string {
  return path.join(stateDir, name);
}

/**
 * `<state-dir>/<name>/runs/<runId>`: one run's embedded Redis dir and its
 * children's output. Each run starts from an empty dir: a new Redis on an
 * earlier run's AOF would go on with its job ids, counters and drain, and
 * logs appended to would mix two runs in one incident note. Earlier runs'
 * dirs stay as they are (their data is not all in the export: logs, AOF).
 */
export function runDir(stateDir: string, name: string, runId: string): string {
  return path.join(runsDir(stateDir, name), runId);
}

/** `<state-dir>/<name>/runs`: every run dir of a drill. */
export function runsDir(stateDir: string, name: string): string {
  return path.join(drillDir(stateDir, name), "runs");
}

export function statePath(stateDir: string, name: string): string {
  return path.join(drillDir(stateDir, name), "state.json");
}

/** Durable: write, fsync, rename, fsync the dir (one implementation for every state file). */
export function writeState(stateDir: string, state: DrillState): void {
  writeJsonDurably(statePath(stateDir, state.name), state);
}

export function readState(stateDir: string, name: string): DrillState | null {
  return readStateFile(statePath(stateDir, name));
}

/**
 * Where an earlier run's final state is kept once a later up replaced
 * state.json: in its own run dir, beside its logs and AOF, so `drill report
 * --run <id>` can still report it.
 */
export function keptRunStatePath(stateDir: string, name: string, runId: string): string {
  return path.join(runDir(stateDir, name, runId), "state.json");
}

/** A kept run's state, or why its run dir's state.json could not be read (listed, not dropped: QA). */
export type KeptRun = { id: string; state: DrillState } | { id: string; state: null; unreadable: string };

/** The runs of a drill kept this way, oldest first by creation; unreadable ones last. */
export function listKeptRuns(stateDir: string, name: string): KeptRun[] {
  let ids: string[];
  try {
    ids = readdirSync(path.join(drillDir(stateDir, name), "runs"));
  } catch {
    return [];
  }
  const created = (k: KeptRun): number => (k.state === null ? Infinity : Date.parse(k.state.createdAt));
  return ids
    .flatMap((id): KeptRun[] => {
      try {
        const state = readStateFile(keptRunStatePath(stateDir, name, id));
        return state ? [{ id, state }] : [];
      } catch (err) {
        return [{ id, state: null, unreadable: (err as Error).message }];
      }
    })
    .sort((a, b) => created(a) - created(b));
}

/**
 * up's end record when a rollback stopped it (the rollback owns state.json
 * then): in the run dir, for the report's counts of what was packed.
 */
export function upEndedPath(runDirPath: string): string {
  return path.join(runDirPath, "up-ended.json");
}

export function writeUpEnded(runDirPath: string, ended: DrillEnded): void {
  try {
    writeJsonDurably(upEndedPath(runDirPath), ended);
  } catch {
    // best effort: the report then says the counts are not known, as before
  }
}

/**
 * up's end record: null when there is none (up did not write one); not ok,
 * naming the file and why, when it is not drill's (readOwnRecord), cannot be
 * read, or is not an end record. Only the report reads it, for two counts:
 * QA: a forged or garbled one was dropped without a word.
 */
export function readUpEnded(runDirPath: string): Reading<DrillEnded | null> {
  const file = upEndedPath(runDirPath);
  let text: string | null;
  try {
    text = readOwnRecord(file);
  } catch (err) {
    if (err instanceof ForeignRecordError) return { ok: false, file, reason: err.message };
    return { ok: false, file, reason: `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
  if (text === null) return { ok: true, value: null };
  const ended = parseUpEnded(text);
  return typeof ended === "string" ? { ok: false, file, reason: `${file} is not up's end record (${ended}); move it aside` } : { ok: true, value: ended };
}

/**
 * An end record as up writes it (writeUpEnded), or why the text is not one:
 * each field it refuses, named with what was found there (QA: "no verdict
 * and at" for a verdict up never writes, "is not a count" for a missing count).
 */
function parseUpEnded(text: string): DrillEnded | string {
  let ended: unknown;
  try {
    ended = JSON.parse(text);
  } catch (err) {
    return `not JSON: ${(err as Error).message}`;
  }
  if (ended === null || typeof ended !== "object" || Array.isArray(ended)) return "not a JSON object";
  const record = ended as Record<keyof DrillEnded, unknown>;
  const problems: string[] = [];
  /** A field refused: missing (where it must be there), else what it holds and what it should. */
  const refuse = (field: keyof DrillEnded, should: string) =>
    problems.push(record[field] === undefined ? `\`${field}\` is missing` : `\`${field}\` is ${shownValue(record[field])}, ${should}`);
  if (!ENDED_VERDICTS.includes(record.verdict as DrillEnded["verdict"])) refuse("verdict", `not one up writes (${ENDED_VERDICTS.join(", ")})`);
  if (typeof record.at !== "string" || !Number.isFinite(Date.parse(record.at))) refuse("at", "not a time");
  // Its counts are printed as they stand (QA AE: "pushed":"lots","notPacked":-3 read "all lots-3 jobs packed").
  const count = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 0;
  // up writes null where it did not count; an older up wrote no unansweredPushes, skippedJobs or pushedIds.
  for (const field of ["pushed", "notPacked"] as const) if (record[field] !== null && !count(record[field])) refuse(field, "not a count");
  for (const field of ["unansweredPushes", "skippedJobs"] as const) if (record[field] !== undefined && !count(record[field])) refuse(field, "not a count");
  if (record.reason !== null && record.reason !== undefined && typeof record.reason !== "string") refuse("reason", "not text");
  if (record.pushedIds !== undefined && !(Array.isArray(record.pushedIds) && record.pushedIds.every((id) => typeof id === "string"))) refuse("pushedIds", "not a list of ids");
  return problems.length > 0 ? problems.join("; ") : (ended as DrillEnded);
}

/** ForeignRecordError when drill cannot have written it: a rollback must not stop, remove or unlink on its word. */
export function readStateFile(file: string): DrillState | null {
  let text: string | null;
  try {
    text = readOwnRecord(file);
    if (text === null) return null;
  } catch (err) {
    if (err instanceof ForeignRecordError) throw err;
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw recordReadError(file, err);
  }
  try {
    const state = JSON.parse(text) as DrillState;
    if (state.version !== 1 || typeof state.runId !== "string") throw new Error("unknown version");
    return state;
  } catch (err) {
    throw new DrillError(`${file} is not a drill state file (${(err as Error).message}); move it aside to continue`);
  }
}

/** Records the intent to start a process (before the spawn), returning the record to fill. */
export function intendProcess(state: DrillState, role: ProcessRole, key: string, files: string[] = []): ProcessRecord {
  const record: ProcessRecord = { role, key, pid: null, startTime: null, files, intendedAt: new Date().toISOString() };
  state.processes = state.processes.filter((p) => p.key !== key);
  state.processes.push(record);
  return record;
}

/** An intent whose process was never spawned (its write or its log refused), taken back: state.json then records only what was started. */
export function withdrawIntent(state: DrillState, record: ProcessRecord): void {
  state.processes = state.processes.filter((p) => p !== record);
}

/** What a Redis command was asked for: its --queue, and its --name when it takes one. */
export interface RedisWant {
  queue: string;
  /** The worker cgroup (--name) of commands that act on it; undefined for `pack` and `gate mode`. */
  cgroupName?: string;
}

/** One `<state-dir>/<name>/state.json` as read: the state, or why it could not be (`error`: what reading it threw, with its exit code). */
export type StateEntry = { name: string; state: DrillState } | { name: string; unreadable: string; error: unknown };

/**
 * A drill is up until its rollback completes, as `up` judges a second run of
 * it: whatever of it still runs (children and an embedded Redis stop by
 * themselves after the drill's end, and report and rollback restart that
 * Redis on its AOF), its queue lives in its Redis until then.
 */
export function isDrillUp(state: Pick<DrillState, "phase">): boolean {
  return state.phase !== "complete";
}

/** What of a run can be started: its processes (or only its embedded Redis), its cgroup. */
export type StartedPart = "processes" | "embedded Redis" | "cgroup";

/**
 * What a run had started, as its record says: its processes (or only its
 * embedded Redis) and its cgroup. Each act's intent is written before it, so
 * one with a pid (or a cgroup) was started; empty when nothing was.
 */
export function startedParts(state: Pick<DrillState, "processes" | "cgroup">): StartedPart[] {
  const started = state.processes.filter((p) => p.pid !== null);
  const processes = started.some((p) => p.role !== "redis") ? "processes" : started.length > 0 ? "embedded Redis" : null;
  return [processes, state.cgroup !== null ? "cgroup" : null].filter((p): p is StartedPart => p !== null);
}

/** A run that started nothing and had no Redis (its embedded one failed to start): up closes it itself, with nothing to roll back. */
export function startedNothing(state: Pick<DrillState, "processes" | "cgroup" | "redis">): boolean {
  return startedParts(state).length === 0 && state.redis.url === "";
}

/**
 * A run closed (complete) by its own up, not by a rollback: up recorded its end
 * and no rollback ever recorded anything, and it started nothing, so it never
 * needed one ("already rolled back" would be false).
 */
export function closedByUp(state: Pick<DrillState, "phase" | "processes" | "cgroup" | "redis" | "ended" | "rollback">): boolean {
  return state.phase === "complete" && state.ended !== undefined && state.rollback === undefined && startedNothing(state);
}

/**
 * Which drill's Redis a command given no --redis means: among the drills that
 * are up on its queue (and cgroup, when it names one), the one Redis they
 * record; null only when no drill at all is up in the state dir, so the
 * caller keeps its default. Bad usage, since guessing could pull somebody
 * else's lever (the deny-all "succeeding" on a Redis the drill's gate never
 * reads): several Redis; drills up but none on this queue and cgroup (the
 * default is then somebody else's Redis, not the drill's); a state file that
 * cannot be read (it might be the one).
 */
export function chooseDrillRedis(entries: readonly StateEntry[], want: RedisWant, stateDir: string): { names: string[]; url: string } | null {
  const unreadable = entries.filter((e): e is Extract<StateEntry, { unreadable: string }> => "unreadable" in e);
  if (unreadable.length > 0) {
    throw new UsageError(`cannot tell which drill's Redis to use: ${unreadable.map((e) => e.unreadable).join("; ")}; give --redis <url> (or DRILL_REDIS_URL)`);
  }
  const up = entries.flatMap((e) => ("state" in e ? [e.state] : [])).filter(isDrillUp);
  if (up.length === 0) return null;
  const matching = up.filter((s) => s.redis.url !== "" && isOnWanted(s, want));
  const urls = [...new Set(matching.map((s) => s.redis.url))];
  if (urls.length > 1) {
    const list = matching.map((s) => `${s.name} (${redactUrl(s.redis.url)})`).join(", ");
    throw new UsageError(`several drills in ${stateDir} are up on ${describeWant(want)}: ${list}; pick one with --redis <url>`);
  }
  if (urls.length === 1) return { names: matching.map((s) => s.name), url: urls[0]! };
  throw new UsageError(noDrillOnWanted(up, want, stateDir));
}

function isOnWanted(state: DrillState, want: RedisWant): boolean {
  // No cgroup recorded (up stopped before claiming it) cannot rule the drill out.
  return state.queue === want.queue && (want.cgroupName === undefined || state.cgroup === null || state.cgroup.name === want.cgroupName);
}

function describeWant(want: RedisWant): string {
  return `queue ${want.queue}${want.cgroupName === undefined ? "" : ` and cgroup ${want.cgroupName}`}`;
}

/** Drills are up, none on the command's queue (and cgroup): each named with where it is and the flags that reach it. */
function noDrillOnWanted(up: readonly DrillState[], want: RedisWant, stateDir: string): string {
  const where = (s: DrillState) =>
    `queue ${s.queue}${want.cgroupName !== undefined && s.cgroup !== null ? ` and cgroup ${s.cgroup.name}` : ""}` +
    (s.redis.url === "" ? " (no Redis recorded yet)" : ` (redis ${redactUrl(s.redis.url)})`);
  // The flags that make this command one of that drill's; none while it has no Redis.
  const reach = (s: DrillState) =>
    s.redis.url === "" ? ""
    : [
        ...(s.queue !== want.queue ? [`--queue ${shellWord(s.queue)}`] : []),
        ...(want.cgroupName !== undefined && s.cgroup !== null && s.cgroup.name !== want.cgroupName ? [`--name ${shellWord(s.cgroup.name)}`] : []),
      ].join(" ");
  const onPurpose = "--redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose";
  if (up.length === 1) {
    const s = up[0]!;
    if (isOnWanted(s, want)) return `drill ${s.name} is up in ${stateDir} on ${describeWant(want)} but records no Redis yet: give --redis <url> (or DRILL_REDIS_URL)`;
    const flags = reach(s);
    return `drill ${s.name} is up in ${stateDir} on ${where(s)}, not on ${describeWant(want)}: give ${flags === "" ? "" : `${flags} for its Redis, or `}${onPurpose}`;
  }
  const list = up.map((s) => {
    const flags = reach(s);
    return `${s.name} on ${where(s)}${flags === "" ? "" : `: ${flags}`}`;
  });
  return `drills are up in ${stateDir}, none on ${describeWant(want)}: ${list.join("; ")}. Give those flags for that drill's Redis, or ${onPurpose}`;
}

/** The given drills' state files, each read or the reason it could not be. */
export function readStateEntries(stateDir: string, names: readonly string[]): StateEntry[] {
  return names.flatMap((name): StateEntry[] => {
    try {
      const state = readState(stateDir, name);
      return state ? [{ name, state }] : [];
    } catch (err) {
      return [{ name, unreadable: err instanceof Error ? err.message : String(err), error: err }];
    }
  });
}

/** The up of a run still starting or running is gone, and recorded no end: SIGKILLed, or the host rebooted. */
export function upDiedUnrecorded(roots: HostRoots, state: DrillState): boolean {
  if ((state.phase !== "starting" && state.phase !== "running") || state.ended) return false;
  const { pid, startTime } = state.owner;
  return startTime !== null && !isSameProcess(roots, pid, startTime);
}

/** drill's own record dirs in a state dir (src/cgroup/stateFiles.ts): never a drill's. */
const RECORD_DIRS = new Set(["cgroups", "hogs", "served"]);

/**
 * `<state-dir>/<name>/state.json` is there, or cannot be told: a drill dir
 * of root's (0700) read by another user is a drill it cannot read, never none
 * (QA: "no drill", and gate mode's deny-all sent to the default Redis).
 */
export function holdsState(stateDir: string, name: string): boolean {
  try {
    statSync(statePath(stateDir, name));
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code !== "ENOENT" && code !== "ENOTDIR" && !RECORD_DIRS.has(name);
  }
}

/**
 * Pure: the drill among `entries` whose embedded Redis ran on `url`'s server
 * and was stopped by its rollback (which exports before it stops); null: none.
 * Asked for a server that does not answer: a hint must not send the operator
 * there (QA: "to close and drain it: drill --redis <that> ...").
 */
export function embeddedRedisStoppedBy(entries: readonly StateEntry[], url: string): string | null {
  for (const entry of entries) {
    if (!("state" in entry)) continue;
    const { redis, rollback } = entry.state;
    if (redis.embedded !== null && rollback?.exported !== undefined && sameRedisServer(redis.url, url)) return entry.name;
  }
  return null;
}

/** The state of each drill of a state dir, or none when this user cannot list it (what acts there says so itself). */
export function stateEntriesOrNone(stateDir: string): StateEntry[] {
  try {
    return readStateEntries(stateDir, listDrills(stateDir));
  } catch {
    return [];
  }
}

/** The drills of a state dir: each dir with a state.json (holdsState). */
export function listDrills(stateDir: string): string[] {
  try {
    return readdirSync(stateDir, { withFileTypes: true })
      .filter((e) => e.isDirectory() && holdsState(stateDir, e.name))
      .map((e) => e.name)
      .sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    // Unreadable is not empty: "nothing to roll back" would send the operator away with a drill up.
    throw stateDirError("read the state dir", stateDir, err);
  }
}
