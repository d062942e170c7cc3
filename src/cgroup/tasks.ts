import { readKernelText, type HostRoots } from "../host/kernelFile.js";
import { readProcessStat, readProcessUid, type ProcessStat } from "../host/process.js";
import { parseProcCgroup, processCgroups } from "./layout.js";
import type { CgroupDir } from "./paths.js";
import { RollbackIncompleteError, type DrillError } from "../errors.js";

/** A process as rollback must recognise it: pid + start time, never the pid alone. */
export type ProcessIdentity = Pick<ProcessStat, "pid" | "startTime" | "comm">;

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
  const now = readProcessStat(roots, id.pid);
  if (!now.ok) return "gone";
  if (now.value.startTime !== id.startTime) return "reused";
  if (now.value.state === "Z") return "gone";
  try {
    process.kill(id.pid, signal);
    return "signalled";
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ESRCH") return "gone";
    throw signalError(roots, id.pid, err, signal);
  }
}

/**
 * A signal the kernel refused this user (EPERM: another user's process, and
 * drill not root). Thrown by signalVerified and cgroup teardown; a rollback
 * step that stops recorded processes takes it as that process's outcome and
 * goes on (stopRecordedProcess: "refused").
 */
export class SignalRefusedError extends RollbackIncompleteError {
  /** The refusal without the pid and signal, for a line that names them itself. */
  readonly why: string;
  constructor(pid: number, signal: string, why: string) {
    super(`cannot send ${signal} to pid ${pid}: ${why}`);
    this.name = "SignalRefusedError";
    this.why = why;
  }
}

/** A signal the kernel refused: one line naming the pid and, for EPERM, whose the process is and who can stop it, not a stack trace (QA). */
export function signalError(roots: HostRoots, pid: number, err: unknown, signal = "a signal"): DrillError {
  const code = (err as NodeJS.ErrnoException).code ?? (err instanceof Error ? err.message : String(err));
  if (code === "EPERM") return new SignalRefusedError(pid, signal, `EPERM (${notPermittedText(roots, pid)})`);
  return new RollbackIncompleteError(`cannot send ${signal} to pid ${pid}: ${code}`);
}

/** Why kill(2) said EPERM, for the operator: whose the process is, and who may stop it. */
export function notPermittedText(roots: HostRoots, pid: number): string {
  const uid = readProcessUid(roots, pid); // null: gone meanwhile, or unreadable
  const whose = uid === null ? "another user's" : `uid ${uid}'s${uid === 0 ? " (root)" : ""}`;
  return `not permitted: the process is ${whose}: only its owner or root can stop it; run as root`;
}

/** Whether /proc/<pid>/cgroup puts the process in `cgroup` (in its hierarchy). */
export function isInCgroup(roots: HostRoots, pid: number, cgroup: CgroupDir): boolean {
  return cgroupOf(roots, pid, cgroup) === cgroup.cgroupPath;
}

/** Whether the process is in `cgroup` or a cgroup below it (what a write to its cgroup.kill reaches). */
export function isInCgroupTree(roots: HostRoots, pid: number, cgroup: CgroupDir): boolean {
  const actual = cgroupOf(roots, pid, cgroup);
  return actual !== null && (actual === cgroup.cgroupPath || actual.startsWith(`${cgroup.cgroupPath.replace(/\/$/, "")}/`));
}

/** The process's cgroup in `cgroup`'s hierarchy, from /proc/<pid>/cgroup; null when unreadable. */
function cgroupOf(roots: HostRoots, pid: number, cgroup: CgroupDir): string | null {
  const file = roots.proc(String(pid), "cgroup");
  const text = readKernelText(file);
  if (!text.ok) return null;
  const lines = parseProcCgroup(text.value, file);
  if (!lines.ok) return null;
  const where = processCgroups(lines.value);
  // A v1 dir is matched by the memory line, a cgroup2 dir (v2 or the hybrid twin) by `0::`.
  return (cgroup.version === 1 ? where.memory : where.unified) ?? null;
}
