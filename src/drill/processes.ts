import { setTimeout as sleep } from "node:timers/promises";
import { SignalRefusedError, signalVerified } from "../cgroup/tasks.js";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess } from "../host/process.js";

/** "refused": the kernel would not let this user signal it (EPERM: another user's, drill not root); notPermittedText says whose. */
export type StopOutcome = "not_started" | "gone" | "reused" | "stopped" | "killed" | "alive" | "refused";

/**
 * Stops a recorded process: SIGTERM, a grace period, then SIGKILL. Only ever
 * the process we started: a pid whose start time changed belongs to someone
 * else now and is left alone (RELIABILITY 6). A process this user may not
 * signal is an outcome, not a throw: a rollback goes on with its other
 * processes and steps (QA: a non-root rollback of root's gate stopped there).
 */
export async function stopRecordedProcess(
  roots: HostRoots,
  id: { pid: number | null; startTime: number | null },
  graceMs = 5000,
): Promise<StopOutcome> {
  if (id.pid === null || id.startTime === null) return "not_started";
  const target = { pid: id.pid, startTime: id.startTime };
  try {
    const first = signalVerified(roots, target, "SIGTERM");
    if (first !== "signalled") return first;
    // A stopped process (SIGSTOP, Ctrl-Z) handles SIGTERM only once continued.
    signalVerified(roots, target, "SIGCONT");
    if (await waitGone(roots, target, graceMs)) return "stopped";
    signalVerified(roots, target, "SIGKILL");
    return (await waitGone(roots, target, 2000)) ? "killed" : "alive";
  } catch (err) {
    if (err instanceof SignalRefusedError) return "refused";
    throw err;
  }
}

export async function waitGone(roots: HostRoots, id: { pid: number; startTime: number }, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isSameProcess(roots, id.pid, id.startTime)) return true;
    await sleep(50);
  }
  return !isSameProcess(roots, id.pid, id.startTime);
}
