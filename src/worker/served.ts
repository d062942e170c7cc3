import { drillCommandAt, redactUrl } from "../context.js";
import { embeddedRedisStoppedBy } from "../drill/state.js";
import { queueKeys } from "../queue/keys.js";
import { closeRedis, connectRedis } from "../queue/redis.js";

/**
 * A queue a stopped worker served (recorded by `drill worker`'s launcher in
 * the state dir, recordServedQueue). `url` as given, password and all: only
 * its redacted form is printed.
 */
export interface ServedQueue {
  queue: string;
  url: string;
}

/** For printing: each URL with its password masked. */
export function maskedQueues(queues: readonly ServedQueue[]): ServedQueue[] {
  return queues.map((q) => ({ ...q, url: redactUrl(q.url) }));
}

/** Each queue once, in the order first seen. */
export function distinctQueues<Q extends ServedQueue>(queues: readonly Q[]): Q[] {
  const seen = new Map<string, Q>();
  for (const q of queues) if (!seen.has(`${q.url} ${q.queue}`)) seen.set(`${q.url} ${q.queue}`, q);
  return [...seen.values()];
}

/** A served queue whose admission a teardown left open: its lever as read (null: its Redis did not answer), and the command that closes it. */
export interface QueueLeftOpen {
  queue: string;
  /** Password masked. */
  url: string;
  /** `<q>:mode` as read: "admit" when unset (the gate admits); null when it could not be read. */
  lever: string | null;
  command: string;
}

/** Each command's timeout for the lever read: a Redis that does not answer (paused: its ready check times out) makes the hint say so within a few seconds, not hold up the rollback. */
const LEVER_READ_MS = 2_000;

/** `<q>:mode` on the queue's Redis: "admit" when unset; null when that Redis does not answer or refuses the read. */
export async function readLever(q: ServedQueue): Promise<string | null> {
  let redis;
  try {
    redis = await connectRedis(q.url, { name: "drill-lever-check", commandTimeoutMs: LEVER_READ_MS });
  } catch {
    return null;
  }
  try {
    return (await redis.get(queueKeys(q.queue).mode)) ?? "admit";
  } catch {
    return null;
  } finally {
    await closeRedis(redis, 0);
  }
}

/**
 * The served queues whose admission is still open (a lever not reject_all,
 * or one that could not be read), each with the command that closes and
 * drains it. `at`: the global flags of the command that was run (--state-dir
 * and the trees), for a command that acts there too.
 */
export async function queuesLeftOpen(served: readonly ServedQueue[], at: { stateDir: string; sysfs?: string; procfs?: string }): Promise<QueueLeftOpen[]> {
  const open: QueueLeftOpen[] = [];
  for (const q of distinctQueues(served)) {
    const lever = await readLever(q);
    if (lever === "reject_all") continue;
    // A drill's embedded Redis its rollback stopped: nothing admits there, and no command reaches it.
    if (lever === null && embeddedRedisStoppedBy(at.stateDir, q.url) !== null) continue;
    open.push({ queue: q.queue, url: redactUrl(q.url), lever, command: `${drillCommandAt({ ...at, redisUrl: q.url })} rollback --queue ${q.queue}` });
  }
  return open;
}

/**
 * What a teardown leaves of a hand-run worker's queue: the worker is gone and
 * its jobs wait in admitted, but the gate still admits and nothing runs them,
 * their deadline slack running out. The rollback of the queue closes
 * admission (deny-all) and drains it.
 */
export function queueLeftOpenLine(q: QueueLeftOpen): string {
  const admission = q.lever === null ? "and its admission may still be open (its Redis did not answer: the lever was not read)" : "but its admission is still open";
  return (
    `queue ${q.queue} on ${q.url}: its worker is gone (what it held is back in ${queueKeys(q.queue).admitted}), ${admission}: ` +
    `what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: ${q.command}`
  );
}
