import { setTimeout as sleep } from "node:timers/promises";
import { signalVerified } from "../cgroup/tasks.js";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess } from "../host/process.js";

export type StopOutcome = "not_started" | "gone" | "reused" | "stopped" | "killed" | "alive";

/**
 * Stops a recorded process: SIGTERM, a grace period, then SIGKILL. Only ever
 * the process we started: a pid whose start time changed belongs to someone
 * else now and is left alone (RELIABILITY 6).
 */
export async function stopRecordedProcess(
  roots: HostRoots,
  id: { pid: number | null; startTime: number | null },
  graceMs = 5000,
): Promise<StopOutcome> {
  if (id.pid === null || id.startTime === null) return "not_started";
  const target = { pid: id.pid, startTime: id.startTime };
  const first = signalVerified(roots, target, "SIGTERM");
  if (first !== "signalled") return first;
  // A stopped process (SIGSTOP, Ctrl-Z) handles SIGTERM only once continued.
  signalVerified(roots, target, "SIGCONT");
  if (await waitGone(roots, target, graceMs)) return "stopped";
  signalVerified(roots, target, "SIGKILL");
  return (await waitGone(roots, target, 2000)) ? "killed" : "alive";
}

export async function waitGone(roots: HostRoots, id: { pid: number; startTime: number }, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isSameProcess(roots, id.pid, id.startTime)) return true;
    await sleep(50);
  }
  return !isSameProcess(roots, id.pid, id.startTime);
}
