import { fail, ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";

export interface ProcessStat {
  pid: number;
  /** The command name as the kernel keeps it (may contain spaces and parentheses). */
  comm: string;
  state: string;
  ppid: number;
  /** Field 22, clock ticks since boot: with the pid, identifies one process across pid reuse. */
  startTime: number;
}

/**
 * Parses /proc/<pid>/stat:
 *   4242 (node (drill) x) S 1 4242 4242 0 -1 4194560 ... 22 fields ...
 * comm is everything between the first "(" and the LAST ")": a process can
 * name itself ") R 1 (" and fool a split on spaces.
 */
export function parseProcessStat(text: string, file: string): Reading<ProcessStat> {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) return fail(file, "no (comm) field");
  const pid = Number(text.slice(0, open).trim());
  if (!Number.isSafeInteger(pid) || pid <= 0) return fail(file, "bad pid field");
  const comm = text.slice(open + 1, close);
  const rest = statFieldsAfterComm(text)!;
  const state = rest[0];
  const ppid = Number(rest[1]);
  const startTime = Number(rest[22 - 3]);
  if (state === undefined || !/^[A-Za-z]$/.test(state)) return fail(file, "bad state field");
  if (!Number.isSafeInteger(ppid) || !Number.isSafeInteger(startTime) || rest[22 - 3] === undefined) {
    return fail(file, "too few fields (need starttime, field 22)");
  }
  return ok({ pid, comm, state, ppid, startTime });
}

/**
 * The fields of a /proc/<pid>/stat line after comm: field 3 (state) first, so
 * field N is at [N - 3]. Null when there is no (comm).
 */
export function statFieldsAfterComm(text: string): string[] | null {
  const close = text.lastIndexOf(")");
  return close < 0 ? null : text.slice(close + 1).trim().split(/\s+/);
}

export function readProcessStat(roots: HostRoots, pid: number | "self"): Reading<ProcessStat> {
  const file = roots.proc(String(pid), "stat");
  const text = readKernelText(file);
  return text.ok ? parseProcessStat(text.value, file) : text;
}

/**
 * Is `pid` still the process we started? A recorded pid alone is not enough:
 * after reuse it names a stranger, who must never be signalled.
 */
export function isSameProcess(roots: HostRoots, pid: number, startTime: number): boolean {
  const stat = readProcessStat(roots, pid);
  return stat.ok && stat.value.startTime === startTime && stat.value.state !== "Z";
}

/**
 * The real uid, the process's owner, from /proc/<pid>/status:
 *   Uid:	0	0	0	0
 * (real, effective, saved, filesystem). Null when gone or unparsable.
 */
export function parseProcessUid(status: string): number | null {
  const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
  return uid === undefined ? null : Number(uid);
}

export function readProcessUid(roots: HostRoots, pid: number): number | null {
  const text = readKernelText(roots.proc(String(pid), "status"));
  return text.ok ? parseProcessUid(text.value) : null;
}

/**
 * The named variables of a NUL-separated environ (/proc/<pid>/environ: the
 * environment the process started with). A name set twice: the last, as getenv.
 */
export function environValues<K extends string>(environ: string, names: readonly K[]): Partial<Record<K, string>> {
  const found: Partial<Record<K, string>> = {};
  for (const entry of environ.split("\0")) {
    const eq = entry.indexOf("=");
    const name = entry.slice(0, eq) as K;
    if (eq > 0 && names.includes(name)) found[name] = entry.slice(eq + 1);
  }
  return found;
}
