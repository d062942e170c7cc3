import { randomBytes } from "node:crypto";
import os from "node:os";
import type { Redis } from "ioredis";
import { DrillError, RefusedError } from "../errors.js";
import { isSameProcess } from "../host/process.js";
import type { HostRoots } from "../host/kernelFile.js";
import { runScript } from "../queue/redis.js";
import { jsonObjectOf } from "../util/jsonObject.js";
import { claimHeartbeatScript } from "./scripts.js";

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

/**
 * The process a gate's heartbeat names (host, pid, start time, as a worker's
 * token does); null for one that names none (an older gate's, its pid alone).
 */
export function gateHolder(heartbeat: string): TokenHolder | null {
  const info = jsonObjectOf(heartbeat);
  const { host, pid, start_time: startTime } = info ?? {};
  return typeof host === "string" && typeof pid === "number" && typeof startTime === "number" ? { host, pid, startTime } : null;
}

/** Who claims a heartbeat: a worker (`--worker-id`, its token) or a gate (`--gate-id`, its JSON), and how its value names the process. */
export interface HeartbeatClaimant {
  role: "worker" | "gate";
  id: string;
  holder(value: string): TokenHolder | null;
}

/** Why an id is not ours to take: its heartbeat's holder is alive (or on another host); null when it is this host's exited process. */
export function liveHolderRefusal(roots: HostRoots, who: HeartbeatClaimant, heartbeat: string, value: string, ttlMs: number): RefusedError | null {
  const parsed = who.holder(value);
  if (holderExited(roots, parsed)) return null;
  const flag = `--${who.role}-id`;
  return new RefusedError(
    parsed?.host === os.hostname()
      ? `${who.role} id ${who.id} is already running (pid ${parsed.pid}, heartbeat ${heartbeat}); stop it or give another ${flag}`
      : `${who.role} id ${who.id} is held by ${value} on another host (heartbeat ${heartbeat}, TTL ${ttlMs} ms); give another ${flag} or wait for it to expire`,
  );
}

/**
 * Takes the heartbeat for this id (set to `value`). A holder that is this
 * host's dead process (pid gone or reused) is taken over at once: one
 * restarted after an OOM kill or a SIGKILL should not wait out the TTL. A
 * live one is refused: two with one id share one list, and either, stopping,
 * gives back what the other holds.
 */
export async function claimHeartbeat(redis: Redis, roots: HostRoots, who: HeartbeatClaimant, heartbeat: string, value: string, ttlMs: number): Promise<void> {
  let stale = "";
  for (let attempt = 0; attempt < 2; attempt++) {
    const reply = await runScript(redis, claimHeartbeatScript, [heartbeat], [value, String(ttlMs), stale]);
    const [kind, holder] = Array.isArray(reply) ? reply.map((v) => String(v)) : [String(reply)];
    if (kind === "ok") return;
    const refusal = liveHolderRefusal(roots, who, heartbeat, holder ?? "", ttlMs);
    if (refusal) throw refusal;
    stale = holder ?? "";
  }
  throw new DrillError(`could not claim ${heartbeat}: it changed hands while claiming`);
}
