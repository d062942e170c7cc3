import { randomBytes } from "node:crypto";
import os from "node:os";
import { isSameProcess } from "../host/process.js";
import type { HostRoots } from "../host/kernelFile.js";

/**
 * A worker's heartbeat value (`<q>:workers:<id>`): `host:pid:start_time:nonce`.
 * pid and start time name the process on its host (a pid alone is reused), so
 * a heartbeat still counting down after its worker died (SIGKILL, the OOM
 * killer) can be told apart from a live worker on this host.
 */
export function workerToken(pid: number, startTime: number): string {
  return `${os.hostname()}:${pid}:${startTime}:${randomBytes(4).toString("hex")}`;
}

export interface TokenHolder {
  host: string;
  pid: number;
  startTime: number;
}

export function parseWorkerToken(token: string): TokenHolder | null {
  const [host, pidText, startText] = token.split(":");
  const pid = Number(pidText);
  const startTime = Number(startText);
  // Start time 0: the holder could not read its own (a --procfs tree without it); then it cannot be told gone, only expire.
  if (host === undefined || host === "" || !Number.isSafeInteger(pid) || pid <= 0 || !Number.isSafeInteger(startTime) || startTime <= 0) return null;
  return { host, pid, startTime };
}

/** The holder ran on this host and that process is gone: its heartbeat outlives it by up to its TTL. */
export function holderExited(roots: HostRoots, holder: TokenHolder | null): boolean {
  return holder !== null && holder.host === os.hostname() && !isSameProcess(roots, holder.pid, holder.startTime);
}
