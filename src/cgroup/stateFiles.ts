import { createHash, randomBytes } from "node:crypto";
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DrillError } from "../errors.js";
import type { CgroupLayoutKind } from "./layout.js";
import type { CgroupDir, WorkerCgroup } from "./paths.js";

/**
 * Drill's own records of what it created, under --state-dir:
 * - cgroups/<name>-<hash>.json: a cgroup drill made (dirs + inodes). Setup
 *   refuses any existing cgroup without a matching marker; teardown removes
 *   only cgroups with one. The hash is of the limits dir, so the same --name
 *   under two parents does not share a marker.
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
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    const fd = openSync(tmp, "w", 0o600);
    try {
      writeFileSync(fd, `${JSON.stringify(value, null, 2)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
    const dirFd = openSync(dir, "r");
    try {
      fsyncSync(dirFd);
    } finally {
      closeSync(dirFd);
    }
  } catch (err) {
    throw stateDirError("write state file", file, err);
  }
}

/** One line naming the path and what to do, not a stack trace (a non-root run lands here). */
export function stateDirError(action: string, file: string, err: unknown): DrillError {
  const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : String(err));
  return new DrillError(`cannot ${action} ${file}: ${code} (run as root, or give --state-dir a directory you can write)`, undefined, { cause: err });
}

function readJson(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as unknown;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    const detail = err instanceof Error ? err.message : String(err);
    throw new DrillError(`cannot read state file ${file}: ${detail}`, undefined, { cause: err });
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

export function removeMarker(stateDir: string, cgroup: WorkerCgroup): void {
  rmSync(markerFile(stateDir, cgroup), { force: true });
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

export function removeHogRecord(file: string): void {
  rmSync(file, { force: true });
}

/** Hog records, all or those of one cgroup. */
export function listHogRecords(stateDir: string, cgroup?: WorkerCgroup): Array<{ file: string; record: HogRecord }> {
  const key = cgroup ? cgroupKey(cgroup) : null;
  return listJson(hogsDir(stateDir))
    .map(({ file, value }) => ({ file, record: value }))
    .filter((entry): entry is { file: string; record: HogRecord } => isHogRecord(entry.record))
    .filter((entry) => key === null || entry.record.cgroupKey === key);
}

function listJson(dir: string): Array<{ file: string; value: unknown }> {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  return names
    .filter((name) => name.endsWith(".json"))
    .map((name) => {
      const file = path.join(dir, name);
      try {
        return { file, value: JSON.parse(readFileSync(file, "utf8")) as unknown };
      } catch {
        return { file, value: null };
      }
    });
}
