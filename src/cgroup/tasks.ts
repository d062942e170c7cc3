import { fail, ok, readKernelText, type HostRoots, type Reading } from "../host/kernelFile.js";
import { parseProcCgroup, processCgroups } from "./layout.js";
import type { CgroupDir } from "./paths.js";

/**
 * A process as rollback must recognise it: a pid alone is reused by the
 * kernel, pid + start time (clock ticks since boot) is not.
 */
export interface ProcessIdentity {
  pid: number;
  startTime: number;
  comm: string;
}

/**
 * Parses /proc/<pid>/stat. The name may hold spaces and parentheses, so the
 * fields are taken after the LAST `)`:
 *   4242 (pagetoucher (x)) S 1 4242 4242 0 -1 4194560 110 0 0 0 0 0 0 0 20 0 1 0 1234567 ...
 * starttime is field 22 (field 3, the state, is the first after the `)`).
 */
export function parseProcStat(text: string, file: string): Reading<ProcessIdentity & { state: string }> {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) return fail(file, "no (comm) in stat line");
  const pidText = text.slice(0, open).trim();
  const rest = text.slice(close + 1).trim().split(/\s+/);
  const state = rest[0];
  const startText = rest[22 - 3];
  if (!/^\d+$/.test(pidText) || state === undefined || startText === undefined || !/^\d+$/.test(startText)) {
    return fail(file, "unparseable stat line");
  }
  return ok({ pid: Number(pidText), comm: text.slice(open + 1, close), state, startTime: Number(startText) });
}

export function readProcessIdentity(roots: HostRoots, pid: number): Reading<ProcessIdentity & { state: string }> {
  const file = roots.proc(String(pid), "stat");
  const text = readKernelText(file);
  return text.ok ? parseProcStat(text.value, file) : text;
}

/** /proc/<pid>/comm without the newline, or null when the process is gone. */
export function readComm(roots: HostRoots, pid: number): string | null {
  const text = readKernelText(roots.proc(String(pid), "comm"));
  return text.ok ? text.value.replace(/\n$/, "") : null;
}

export type SignalResult = "signalled" | "gone" | "reused";

/**
 * Signals a recorded process only if it is still the same one (RELIABILITY 6):
 * a pid whose start time differs now belongs to someone else.
 */
export function signalVerified(roots: HostRoots, id: { pid: number; startTime: number }, signal: NodeJS.Signals): SignalResult {
  const now = readProcessIdentity(roots, id.pid);
  if (!now.ok) return "gone";
  if (now.value.startTime !== id.startTime) return "reused";
  if (now.value.state === "Z") return "gone";
  try {
    process.kill(id.pid, signal);
    return "signalled";
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ESRCH") return "gone";
    throw err;
  }
}

/** Whether /proc/<pid>/cgroup puts the process in `cgroup` (in its hierarchy). */
export function isInCgroup(roots: HostRoots, pid: number, cgroup: CgroupDir): boolean {
  const file = roots.proc(String(pid), "cgroup");
  const text = readKernelText(file);
  if (!text.ok) return false;
  const lines = parseProcCgroup(text.value, file);
  if (!lines.ok) return false;
  const where = processCgroups(lines.value);
  // A v1 dir is matched by the memory line, a cgroup2 dir (v2 or the hybrid twin) by `0::`.
  const actual = cgroup.version === 1 ? where.memory : where.unified;
  return actual === cgroup.cgroupPath;
}
