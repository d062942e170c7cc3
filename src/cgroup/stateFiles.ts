import { createHash, randomBytes } from "node:crypto";
import { closeSync, existsSync, fsyncSync, linkSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fsyncDir } from "../util/fsyncDir.js";
import { DrillError, RefusedError, refusalMeaning } from "../errors.js";
import { HostRoots } from "../host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../host/process.js";
import type { CgroupLayoutKind } from "./layout.js";
import type { CgroupDir, WorkerCgroup } from "./paths.js";
import { makeDirs } from "../util/makeDirs.js";
import { ForeignRecordError, openOwnFile, readOwnRecord, RecordReadError, recordReadError } from "../util/ownFiles.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";

/**
 * Drill's own records of what it created, under --state-dir:
 * - cgroups/<name>-<hash>.json: a cgroup drill made (dirs + inodes). Setup
 *   refuses any existing cgroup without a matching marker; teardown removes
 *   only cgroups with one. The hash is of the limits dir, so the same --name
 *   under two parents does not share a marker.
 * - cgroups/<name>-<hash>.lock: held by a setup while it checks and writes
 *   that marker and makes the dirs (lockMarker, a holdLockFile like the
 *   drill locks).
 * - hogs/<name>-<hash>-<token>.json: a hog inject started (pid + start time,
 *   its thrash file), so later commands find it without `pgrep -f`.
 */

export interface MarkedDir extends CgroupDir {
  /** Inode of the directory drill made; a recreated cgroup has another. Null before mkdir. */
  inode: number | null;
}

/** Which drill run set a cgroup up (`drill up`). */
export interface CgroupOwner {
  drill: string;
  runId: string;
}

export interface CgroupMarker {
  kind: "drill-cgroup";
  name: string;
  layout: CgroupLayoutKind;
  /** `creating` is written before the first mkdir (intent), `created` after. */
  state: "creating" | "created";
  dirs: MarkedDir[];
  createdAt: string;
  createdByPid: number;
  /** The drill run it is the worker cgroup of; none after `drill cgroup setup`, or in markers of older versions. */
  owner?: CgroupOwner;
}

export interface HogRecord {
  kind: "drill-hog";
  cgroupKey: string;
  name: string;
  mode: "anon" | "thrash";
  /** null until the hog exists (the record is written before the spawn). */
  pid: number | null;
  startTime: number | null;
  /** The thrash file, unlinked by the hog on exit and by drill if the hog was SIGKILLed. */
  file: string | null;
  /** Where a detached hog's output goes. */
  logFile: string | null;
  sizeBytes: number;
  holdMs: number;
  detached: boolean;
  startedAt: string;
}

export function cgroupKey(cgroup: WorkerCgroup): string {
  const hash = createHash("sha256").update(cgroup.limits.dir).digest("hex").slice(0, 10);
  return `${cgroup.name}-${hash}`;
}

export function markerFile(stateDir: string, cgroup: WorkerCgroup): string {
  return path.join(stateDir, "cgroups", `${cgroupKey(cgroup)}.json`);
}

/** Write, fsync, rename, fsync the dir: a marker is either the old one or the new one after a crash. */
export function writeJsonDurably(file: string, value: unknown): void {
  const dir = path.dirname(file);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    makeDirs(dir);
    const fd = openOwnFile(tmp, "w");
    try {
      writeFileSync(fd, `${JSON.stringify(value, null, 2)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
    fsyncDir(dir);
  } catch (err) {
    // A write that failed half-way (ENOSPC, a rename refused) leaves no temp file beside the state.
    try {
      rmSync(tmp, { force: true });
    } catch {
      // never made: the dir itself is out of reach
    }
    throw stateDirError("write state file", file, err);
  }
}

/** One line naming the path and what to do, not a stack trace (a non-root run lands here). */
export function stateDirError(action: string, file: string, err: unknown, isRoot = process.geteuid?.() === 0): DrillError {
  const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : String(err));
  // makeDirs names the directory that refused: /s/ro in "cannot create the lock /s/ro/cgroups/x.lock".
  const refused = (err as NodeJS.ErrnoException).path;
  const at = refused !== undefined && path.resolve(refused) !== path.resolve(file) && !isTempOf(refused, file) ? ` at ${refused}` : "";
  return new DrillError(`cannot ${action} ${file}: ${code}${at} (${stateDirAdvice(code, isRoot)})`, undefined, { cause: err });
}

/**
 * The temp file of an atomic write of `file` (`<file>.<pid>[.<hex>].tmp`,
 * renamed or linked onto it): to an operator that is `file` itself (QA: a
 * refused end record named "state.json.4242.tmp"), so it is not named apart.
 */
function isTempOf(refused: string, file: string): boolean {
  const prefix = `${path.resolve(file)}.`;
  const resolved = path.resolve(refused);
  return resolved.startsWith(prefix) && /^\d+(\.[0-9a-f]+)?\.tmp$/.test(resolved.slice(prefix.length));
}

/** What to do about a state dir that refused a write: "run as root" only to a process that is not. */
function stateDirAdvice(code: string, isRoot: boolean): string {
  if (code === "EROFS") return "a read-only filesystem: give --state-dir a writable directory";
  if (code === "ENOSPC" || code === "EDQUOT") return "no space left there: free some, or give --state-dir a directory on another disk";
  if ((code === "EACCES" || code === "EPERM") && isRoot) return `${refusalMeaning(code)}: refused to root too: a read-only or restricted mount, an immutable file or a security policy; give --state-dir a directory you can write`;
  if (code === "EACCES" || code === "EPERM") return `${refusalMeaning(code)}: run as root, or give --state-dir a directory you can write`;
  if (code === "ENOTSUP") return "a kernel filesystem (procfs, sysfs, cgroupfs), where a directory is no place for files (under cgroupfs it is a cgroup): give --state-dir a directory on a disk";
  if (code === "ENOTDIR") return "a file stands where drill keeps a directory: move it aside, or give --state-dir another directory";
  if (code === "ENOENT") return "nothing can be made there (under /proc, say), or it was removed meanwhile: give --state-dir a directory you can write";
  return "give --state-dir a directory you can write";
}

function readJson(file: string): unknown {
  try {
    const text = readOwnRecord(file);
    return text === null ? null : (JSON.parse(text) as unknown);
  } catch (err) {
    if (err instanceof ForeignRecordError) throw err;
    throw recordReadError(file, err);
  }
}

function isOwner(value: unknown): value is CgroupOwner {
  const v = value as Partial<CgroupOwner> | null;
  return typeof v === "object" && v !== null && typeof v.drill === "string" && typeof v.runId === "string";
}

/** A malformed owner is no marker at all: taking it for "no owner" would let any drill adopt or tear down the cgroup. */
function isMarker(value: unknown): value is CgroupMarker {
  const v = value as Partial<CgroupMarker> | null;
  return typeof v === "object" && v !== null && v.kind === "drill-cgroup" && Array.isArray(v.dirs) && typeof v.name === "string" && (v.owner === undefined || isOwner(v.owner));
}

function isHogRecord(value: unknown): value is HogRecord {
  const v = value as Partial<HogRecord> | null;
  return typeof v === "object" && v !== null && v.kind === "drill-hog" && typeof v.cgroupKey === "string";
}

export function readMarker(stateDir: string, cgroup: WorkerCgroup): CgroupMarker | null {
  const file = markerFile(stateDir, cgroup);
  const value = readJson(file);
  if (value === null) return null;
  if (!isMarker(value)) throw new DrillError(`state file ${file} is not a drill cgroup marker; move it away and retry`);
  return value;
}

export function writeMarker(stateDir: string, cgroup: WorkerCgroup, marker: CgroupMarker): void {
  writeJsonDurably(markerFile(stateDir, cgroup), marker);
}

/** Removes a cgroup's marker; why it stays when it cannot be (its dir immutable, read-only), else null. */
export function removeMarker(stateDir: string, cgroup: WorkerCgroup): string | null {
  return unlinkLeftover(markerFile(stateDir, cgroup));
}

export function markerLockFile(stateDir: string, cgroup: WorkerCgroup): string {
  return path.join(stateDir, "cgroups", `${cgroupKey(cgroup)}.lock`);
}

/**
 * One setup at a time per cgroup: held while a setup checks that the marker
 * is still the one it judged, writes its own and makes the dirs, so two
 * drills setting up one --name at the same instant cannot both take it (the
 * second would overwrite the first's marker).
 */
export function lockMarker(stateDir: string, cgroup: WorkerCgroup): { release(): void } {
  const file = markerLockFile(stateDir, cgroup);
  try {
    makeDirs(path.dirname(file));
  } catch (err) {
    throw stateDirError("create the lock", file, err);
  }
  return holdLockFile(file, {}, (holder) => {
    const who = holder === null ? "" : ` (pid ${holder.pid})`;
    return new RefusedError(
      `another setup of ${cgroup.limits.dir}${who} is running right now (it holds ${file}); refusing to set up the same cgroup at once. Pick another --name, or retry once it is done`,
    );
  });
}

/** Who wrote a lock file: its process, and what the caller added (`what`: the drill command holding it). */
export interface LockHolder {
  pid: number;
  /** Null when the writer could not read its own /proc stat: then it cannot be told from a reused pid, and counts as gone. */
  startTime: number | null;
  what?: string;
}

/**
 * Lock holders are judged in this machine's own /proc, whatever --procfs
 * says: they are drill processes in this pid namespace, and a host /proc
 * mounted into a container (or a test's fake tree) would make every live
 * holder look gone and its lock stale.
 */
const ownProc = new HostRoots();

/** Test seam: runs once a taker has judged the lock stale, before it tries to take it over. */
export interface LockSeams {
  foundStale?: () => void;
}

/**
 * A lock file (O_EXCL) held by one process at a time, with who holds it in it.
 * It is written and fsynced under a tmp name and linked into place, so it
 * never exists empty or half-written, not even after a power cut: a lock that
 * does not parse was not written by drill (another program's file, or one of
 * an older drill still writing it), and is refused naming the file rather
 * than taken for stale. A lock whose holder is gone (pid and start time no
 * longer match) is stale and taken over, by one taker only (replaceStale).
 * `refuse` words the refusal for the caller: holder null when another taker
 * kept getting there first. `takeFrom`: a live holder that hands its lock to
 * this process (up --detach to the background up it started), taken over as
 * a stale one is, so there is no moment without a lock.
 */
export function holdLockFile(
  file: string,
  fields: { what?: string },
  refuse: (holder: LockHolder | null) => RefusedError,
  seams: LockSeams = {},
  takeFrom: number | null = null,
): { release(): void } {
  const self = readProcessStat(ownProc, process.pid);
  const record: LockHolder = { pid: process.pid, startTime: self.ok ? self.value.startTime : null, ...fields };
  const mine = JSON.stringify(record);
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    const fd = openOwnFile(tmp, "wx");
    try {
      writeFileSync(fd, mine);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    try {
      rmSync(tmp, { force: true });
    } catch {
      // never made: the dir itself is out of reach
    }
    throw stateDirError("create the lock", file, err);
  }
  const held = {
    release: () => {
      try {
        // Handed over (takeFrom) it is another process's lock now: left to it.
        if (readText(file) === mine) rmSync(file, { force: true });
      } catch {
        // left behind, it is stale once this process is gone
      }
    },
  };
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (linkUnlessExists(tmp, file)) return held;
      const judged = readText(file);
      if (judged === null) continue; // released meanwhile
      const holder = judgeLock(file, judged);
      if (holder !== null && (takeFrom === null || holder.pid !== takeFrom)) throw refuse(holder);
      if (holder === null) seams.foundStale?.();
      if (replaceStale(file, judged, tmp)) return held;
    }
    throw refuse(null);
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** Where the takers of one stale content of `target` meet: named after that content, which no live process writes again. */
export function lockBreakerFile(target: string, staleText: string): string {
  return `${target}.break-${createHash("sha256").update(staleText).digest("hex").slice(0, 12)}`;
}

/**
 * Puts the lock in `tmp` in place of `target`, whose content `stale` is a
 * gone holder's, as the only one of all processes that judged that content
 * stale: each first links the breaker of that content (O_EXCL), and only its
 * holder replaces `target`, by rename (there is no moment without a lock for
 * a newcomer to slip in). A breaker whose own holder died midway is itself
 * taken over the same way. False when another taker got there first: the
 * caller looks at the lock again.
 */
function replaceStale(target: string, stale: string, tmp: string, depth = 0): boolean {
  const breaker = lockBreakerFile(target, stale);
  if (!linkUnlessExists(tmp, breaker)) {
    const other = readText(breaker);
    if (other === null) return false; // that taker is done
    if (judgeLock(breaker, other) !== null || depth >= 2) return false; // it is at it right now
    if (!replaceStale(breaker, other, tmp, depth + 1)) return false;
  }
  // The breaker is ours: nobody else replaces `target` while it still holds `stale`.
  try {
    if (readText(target) !== stale) return false; // already taken over (and maybe released) by another taker
    const via = `${tmp}.via`;
    try {
      linkSync(tmp, via);
      renameSync(via, target);
    } catch (err) {
      rmSync(via, { force: true });
      throw stateDirError("take over the lock", target, err);
    }
    return true;
  } finally {
    rmSync(breaker, { force: true });
  }
}

/**
 * The live holder of the lock `file`, or null: no lock, a gone holder's, or no lock drill wrote.
 * ForeignRecordError when drill cannot have written it: no holder is stopped on its word.
 */
export function liveLockHolder(file: string): LockHolder | null {
  let text: string | null;
  try {
    text = readOwnRecord(file);
  } catch (err) {
    if (err instanceof ForeignRecordError) throw err;
    text = null;
  }
  const holder = text === null ? null : parseLockHolder(text);
  return holder !== null && isAlive(holder) ? holder : null;
}

/** The writer of a lock is alive: same pid, same start time (without one it cannot be told from a reused pid). */
const isAlive = (holder: LockHolder): boolean => holder.startTime !== null && isSameProcess(ownProc, holder.pid, holder.startTime);

/** The live holder of a lock file's content, or null when it is gone (stale); refused when it is no lock drill wrote. */
function judgeLock(file: string, text: string): LockHolder | null {
  const holder = parseLockHolder(text);
  if (holder === null) {
    throw new RefusedError(
      `${file} is not a lock drill wrote (empty or cut short; drill's appear whole): another program's, or an older drill's still being written. Check that no drill of this name runs, then remove it and retry`,
    );
  }
  return isAlive(holder) ? holder : null;
}

function linkUnlessExists(from: string, to: string): boolean {
  try {
    linkSync(from, to);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw stateDirError("create the lock", to, err);
  }
}

function readText(file: string): string | null {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return null;
  }
}

function parseLockHolder(text: string): LockHolder | null {
  try {
    const value = JSON.parse(text) as { pid?: unknown; startTime?: unknown; what?: unknown };
    if (typeof value !== "object" || value === null || typeof value.pid !== "number") return null;
    return {
      pid: value.pid,
      startTime: typeof value.startTime === "number" ? value.startTime : null,
      ...(typeof value.what === "string" ? { what: value.what } : {}),
    };
  } catch {
    return null;
  }
}

/** Every cgroup marker in the state dir (for rollback). */
export function listMarkers(stateDir: string): Array<{ file: string; marker: CgroupMarker }> {
  return listJson(path.join(stateDir, "cgroups"))
    .map(({ file, value }) => ({ file, marker: value }))
    .filter((entry): entry is { file: string; marker: CgroupMarker } => isMarker(entry.marker));
}

export function hogsDir(stateDir: string): string {
  return path.join(stateDir, "hogs");
}

/** A fresh record file for a hog about to start in `cgroup`. */
export function newHogRecordFile(stateDir: string, cgroup: WorkerCgroup): string {
  return path.join(hogsDir(stateDir), `${cgroupKey(cgroup)}-${randomBytes(4).toString("hex")}.json`);
}

export function writeHogRecord(file: string, record: HogRecord): void {
  writeJsonDurably(file, record);
}

/** Removes a hog's record; why it stays when it cannot be (its dir immutable, read-only), else null. */
export function removeHogRecord(file: string): string | null {
  return unlinkLeftover(file);
}

/**
 * A hog done with: its file unlinked if it is still there (the hog unlinks it
 * on every exit but SIGKILL), its log and its record removed. Returns the file
 * it unlinked; or, when that file cannot be unlinked, why (`left`), its
 * record kept so that a teardown or rollback run again unlinks it.
 */
export function discardHogRecord(file: string, record: HogRecord): { unlinked: string | null; left: string | null } {
  const present = record.file !== null && existsSync(record.file) ? record.file : null;
  const refused = present === null ? null : unlinkLeftover(present);
  if (refused !== null) return { unlinked: null, left: `could not unlink the hog's file ${present}: ${refused}; its record ${file} is kept` };
  if (record.logFile) unlinkLeftover(record.logFile);
  const recordLeft = removeHogRecord(file);
  return { unlinked: present, left: recordLeft === null ? null : `could not remove the hog's record ${file}: ${recordLeft}` };
}

/** Hog records, all or those of one cgroup. */
export function listHogRecords(stateDir: string, cgroup?: WorkerCgroup): Array<{ file: string; record: HogRecord }> {
  const key = cgroup ? cgroupKey(cgroup) : null;
  return listJson(hogsDir(stateDir))
    .map(({ file, value }) => ({ file, record: value }))
    .filter((entry): entry is { file: string; record: HogRecord } => isHogRecord(entry.record))
    .filter((entry) => key === null || entry.record.cgroupKey === key);
}

/** A record as listed: its value, or why it could not be read (`error`), or why it is not drill's (`foreign`, its whole message). */
interface ListedRecord {
  file: string;
  value: unknown;
  error: string | null;
  foreign: string | null;
}

function listJson(dir: string): ListedRecord[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return [];
    // A dir of root's (0700) says whose it is; ELOOP, ENOTDIR, ENAMETOOLONG what to do about the state dir: not a stack trace.
    throw code === "EACCES" || code === "EPERM" ? recordReadError(dir, err) : stateDirError("read", dir, err);
  }
  return names
    .filter((name) => name.endsWith(".json"))
    .flatMap((name): ListedRecord[] => {
      const file = path.join(dir, name);
      try {
        const text = readOwnRecord(file);
        return text === null ? [] : [{ file, value: JSON.parse(text) as unknown, error: null, foreign: null }]; // null: removed meanwhile
      } catch (err) {
        // Another user's record (or in a dir others write) is no record of drill's: said, never acted on.
        if (err instanceof ForeignRecordError) return [{ file, value: null, error: null, foreign: err.message }];
        // EACCES (a non-root rollback of root's records: whose, and to run as root), or a record cut short: kept apart, never taken for "none"
        const code = (err as NodeJS.ErrnoException).code;
        const error = code === "EACCES" || code === "EPERM" ? recordReadError(file, err).reason : (code ?? (err instanceof Error ? err.message : String(err)));
        return [{ file, value: null, error, foreign: null }];
      }
    });
}

/**
 * The record dirs (cgroups/, hogs/) this user cannot even list (a non-root
 * rollback of root's state dir, each 0700): what they record is unknown, so
 * a rollback says them and is not complete, rather than fail before it
 * looked at anything else.
 */
export function unlistableRecordDirs(stateDir: string): RecordReadError[] {
  return [path.join(stateDir, "cgroups"), hogsDir(stateDir)].flatMap((dir) => {
    try {
      listJson(dir);
      return [];
    } catch (err) {
      if (err instanceof RecordReadError) return [err];
      throw err;
    }
  });
}

/**
 * The records in cgroups/ and hogs/ that cannot be read, or are not drill
 * records: each may stand for a cgroup or a hog still on the host, so a
 * rollback says them and is not complete (QA: it said "nothing to roll back").
 * `foreign`: drill cannot have written it (readOwnRecord), in served/ too.
 * `name`: only the records of that --name (files are `<name>-<hash>...json`).
 */
export function unreadableRecords(stateDir: string, name?: string): Array<{ file: string; name: string | null; problem: string; foreign: boolean }> {
  const read = (dir: string, valid: (value: unknown) => boolean) =>
    listJson(dir).flatMap(({ file, value, error, foreign }) => {
      if (error === null && foreign === null && valid(value)) return [];
      const named = /^(.+)-[0-9a-f]{10}(?:-[0-9a-f]{8})?\.json$/.exec(path.basename(file))?.[1] ?? null;
      if (name !== undefined && named !== name) return [];
      return [{ file, name: named, problem: foreign ?? error ?? "not a drill record", foreign: foreign !== null }];
    });
  // A served-queue record only adds a hint (unreadable, it is skipped): one not drill's is said, as it names a Redis to reach.
  // A served dir that cannot be listed (a file named `served`) is said where its hints are read (listServedQueues), not here.
  let foreignServed: ReturnType<typeof read> = [];
  try {
    foreignServed = read(servedDir(stateDir), isServedQueueRecord).filter((bad) => bad.foreign);
  } catch {
    // unlistable: no record in it to distrust
  }
  return [...read(path.join(stateDir, "cgroups"), isMarker), ...read(hogsDir(stateDir), isHogRecord), ...foreignServed];
}

/** A queue a worker launched into a cgroup served: its Redis URL as given (password and all: the file is root's, 0600). */
export interface ServedQueueRecord {
  kind: "drill-served-queue";
  cgroupKey: string;
  queue: string;
  url: string;
}

function isServedQueueRecord(value: unknown): value is ServedQueueRecord {
  const v = value as Partial<ServedQueueRecord> | null;
  return v !== null && typeof v === "object" && v.kind === "drill-served-queue" && typeof v.cgroupKey === "string" && typeof v.queue === "string" && typeof v.url === "string";
}

export function servedDir(stateDir: string): string {
  return path.join(stateDir, "served");
}

/** The directories of drill's records under the state dir (cgroup markers, hogs, served queues), made on first use. */
export function recordDirs(stateDir: string): string[] {
  return [path.join(stateDir, "cgroups"), hogsDir(stateDir), servedDir(stateDir)];
}

/**
 * Left by `drill worker`'s launcher before it starts the worker in the
 * cgroup: the queue it serves, for the teardown to name once the worker is
 * gone, whether the teardown stopped it or it had stopped already (QA: a
 * worker that exited before the rollback left its queue open unsaid). One
 * file per cgroup, queue and Redis: a second launch writes the same file.
 */
export function recordServedQueue(stateDir: string, cgroup: WorkerCgroup, queue: string, url: string): void {
  const key = cgroupKey(cgroup);
  const which = createHash("sha256").update(`${url}\n${queue}`).digest("hex").slice(0, 8);
  writeJsonDurably(path.join(servedDir(stateDir), `${key}-${which}.json`), { kind: "drill-served-queue", cgroupKey: key, queue, url } satisfies ServedQueueRecord);
}

/**
 * The queues recorded as served in this cgroup (unreadable records skipped:
 * they only add a hint). `unread`: why the served dir itself could not be
 * read (a file named `served`), for the teardown to say: never a reason to
 * leave the cgroup (QA: the rollback failed before its kill on ENOTDIR).
 */
export function listServedQueues(stateDir: string, cgroup: WorkerCgroup): { served: Array<{ file: string; record: ServedQueueRecord }>; unread: string | null } {
  const key = cgroupKey(cgroup);
  let entries;
  try {
    entries = listJson(servedDir(stateDir));
  } catch (err) {
    return { served: [], unread: err instanceof Error ? err.message : String(err) };
  }
  return { served: entries.flatMap(({ file, value }) => (isServedQueueRecord(value) && value.cgroupKey === key ? [{ file, record: value }] : [])), unread: null };
}
