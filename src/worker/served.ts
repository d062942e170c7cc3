import { readFileSync } from "node:fs";
import { drillCommandAt, redactUrl } from "../context.js";
import type { HostRoots } from "../host/kernelFile.js";
import { environValues } from "../host/process.js";
import { queueKeys } from "../queue/keys.js";

/**
 * Set by `drill worker`'s launcher for the worker it starts in the cgroup:
 * the queue it serves (its Redis is DRILL_REDIS_URL beside it). A teardown
 * reads both back from what it stops, to say whose admission is still open
 * (QA: a plain rollback of a hand-run cgroup stopped the worker, its jobs
 * back in `<q>:admitted`, and said nothing of the queue).
 */
export const WORKER_QUEUE_ENV = "DRILL_WORKER_QUEUE";

/** A queue a stopped worker served; `redis` with any password masked, as every printed URL. */
export interface ServedQueue {
  queue: string;
  redis: string;
}

/** The queue a worker started by the launcher serves, from its NUL-separated environ; null for any other process. */
export function servedQueueFromEnviron(environ: string): ServedQueue | null {
  const found = environValues(environ, [WORKER_QUEUE_ENV, "DRILL_REDIS_URL"]);
  const queue = found[WORKER_QUEUE_ENV];
  const url = found.DRILL_REDIS_URL;
  return queue && url ? { queue, redis: redactUrl(url) } : null;
}

/** servedQueueFromEnviron of /proc/<pid>/environ; null when gone or not ours to read. */
export function readServedQueue(roots: HostRoots, pid: number): ServedQueue | null {
  try {
    return servedQueueFromEnviron(readFileSync(roots.proc(String(pid), "environ"), "utf8"));
  } catch {
    return null;
  }
}

/** Each queue once, in the order first seen. */
export function distinctQueues(queues: readonly ServedQueue[]): ServedQueue[] {
  const seen = new Map<string, ServedQueue>();
  for (const q of queues) if (!seen.has(`${q.redis} ${q.queue}`)) seen.set(`${q.redis} ${q.queue}`, q);
  return [...seen.values()];
}

/**
 * What a teardown leaves of a hand-run worker's queue: the worker is gone and
 * its jobs wait in admitted, but the gate still admits and nothing runs them,
 * their deadline slack running out. The rollback of the queue closes
 * admission (deny-all) and drains it. `at`: the global flags of the command
 * that was run (--state-dir and the trees), for a command that acts there too.
 */
export function queueLeftOpenLine(q: ServedQueue, at: { stateDir: string; sysfs?: string; procfs?: string }): string {
  const command = `${drillCommandAt({ ...at, redisUrl: q.redis })} rollback --queue ${q.queue}`;
  return (
    `queue ${q.queue} on ${q.redis}: its worker was stopped (what it held is back in ${queueKeys(q.queue).admitted}), but its admission is still open: ` +
    `what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: ${command}`
  );
}
