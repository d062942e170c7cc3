import type { Redis } from "ioredis";
import { queueKeys } from "../queue/keys.js";
import { jsonObjectOf } from "../util/jsonObject.js";
import { defaultWorkerId, weightsReadyTimeoutMs } from "../worker/plan.js";
import { workerKeys } from "../worker/scripts.js";

/**
 * Whether the drill's tooling is ready before `up` starts the schedule's
 * clock: the gate decides (its heartbeat is registered after its cold-start
 * pressure samples, src/gate/loop.ts) and the worker takes jobs (its registry
 * entry has `ready_at` once its weights are written). A job pushed before
 * would wait for them, and that start-up would read as the drill's queue age
 * and first-token latency (QA: "first token p50 2748 ms" was mostly the
 * gate's start).
 */
export interface Readiness {
  gate: boolean;
  worker: boolean;
}

/** Node and Redis start-up on top of the gate's samples and the weights. */
const START_SLACK_MS = 30_000;

/** How long `up` waits for gate and worker: the worker's own weights timeout (or the gate's two samples) plus start-up. */
export function readyTimeoutMs(weightsBytes: number, gateIntervalMs: number): number {
  return Math.max(weightsReadyTimeoutMs(weightsBytes), 2 * gateIntervalMs) + START_SLACK_MS;
}

/** Pure: the id of the gate registered in `<q>:gates` (id → JSON {pid, ...}) by process `pid`, or null. */
export function gateIdOf(registered: Record<string, string>, pid: number | null): string | null {
  if (pid === null) return null;
  for (const [id, info] of Object.entries(registered)) {
    if (jsonField(info, "pid") === pid) return id;
  }
  return null;
}

/** Pure: a worker registry entry says ready, and it is the live holder's (its token is the heartbeat's value). */
export function workerEntryReady(entry: string | null, heartbeat: string | null): boolean {
  if (entry === null || heartbeat === null) return false;
  return typeof jsonField(entry, "ready_at") === "number" && jsonField(entry, "token") === heartbeat;
}

/** What gate (by pid) and worker (by the cgroup's worker id, as `drill worker` defaults it) say in Redis now. */
export async function readReadiness(redis: Redis, queue: string, gatePid: number | null, cgroupName: string): Promise<Readiness> {
  const keys = queueKeys(queue);
  const wk = workerKeys(queue);
  const workerId = defaultWorkerId(cgroupName);
  const [registered, entry, heartbeat] = await Promise.all([redis.hgetall(keys.gates), redis.hget(wk.workers, workerId), redis.get(wk.heartbeat(workerId))]);
  const gateId = gateIdOf(registered, gatePid);
  const gate = gateId !== null && (await redis.exists(keys.gateHeartbeat(gateId))) === 1;
  return { gate, worker: workerEntryReady(entry, heartbeat) };
}

/** Pure: "gate and worker", "the worker": what is not ready yet. */
export function notReadyText(readiness: Readiness): string {
  const waiting = [readiness.gate ? null : "gate", readiness.worker ? null : "worker"].filter((w) => w !== null);
  return waiting.length === 2 ? "gate and worker" : `the ${waiting[0] ?? "nothing"}`;
}

function jsonField(text: string, field: string): unknown {
  return jsonObjectOf(text)?.[field]; // undefined: not an entry drill wrote
}
