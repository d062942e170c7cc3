import { UsageError } from "../errors.js";

/**
 * Every Redis key of one drill queue, derived from its name as in DESIGN.md's
 * table. Three keys are added beyond the table: `<q>:gates:<gate>` (a gate's
 * heartbeat, a string with a TTL; `<q>:gates` is the hash that lists gates),
 * `<q>:decisions` (id → the decision taken, so a redelivery re-applies it
 * and a different payload under the same id goes to `<q>:dead`), and
 * `<q>:pushes` (push token → the id it took, with a TTL: a re-sent push takes
 * no second id and queues no second copy).
 */
export interface QueueKeys {
  queue: string;
  ready: string;
  seq: string;
  processing(gate: string): string;
  processingPattern: string;
  gates: string;
  gateHeartbeat(gate: string): string;
  admitted: string;
  working(worker: string): string;
  workingPattern: string;
  done: string;
  retry(hostClass: string): string;
  retryPattern: string;
  dead: string;
  drain: string;
  mode: string;
  inflight: string;
  events: string;
  stats: string;
  decisions: string;
  pushes: string;
}

const DRAIN_SUFFIX = "_drain";

// Names end up inside keys and SCAN patterns: no glob characters, no colons.
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;

export function isValidKeyPart(name: string): boolean {
  return NAME.test(name);
}

export function validateKeyPart(name: string, flag: string): string {
  if (!isValidKeyPart(name)) {
    throw new UsageError(`${flag}: "${name}" is not a valid name (letters, digits, '_', '.', '-'; at most 100)`);
  }
  return name;
}

/**
 * A queue name as every command takes it: checked with the other flags,
 * before anything starts (QA: `up --queue x_drain` refused it only after its
 * Redis was up, and left a drill no rollback could finish; a gate held its
 * Redis connection open past the refusal and never exited).
 */
export function validateQueueName(queue: string, flag = "--queue"): string {
  validateKeyPart(queue, flag);
  // `<q>_drain` is queue q's rollback drain: a gate or worker on it would re-admit what rollback drained.
  if (queue.endsWith(DRAIN_SUFFIX)) {
    throw new UsageError(`${flag}: "${queue}" is the rollback drain of queue "${queue.slice(0, -DRAIN_SUFFIX.length)}" (its jobs wait there for the operator, not for a gate); pick a name that does not end in ${DRAIN_SUFFIX}`);
  }
  return queue;
}

/** Why `queue` can be no queue's name (validateQueueName's words, without the flag), or null. */
export function queueNameRefusal(queue: string): string | null {
  try {
    validateQueueName(queue, "queue");
    return null;
  } catch (err) {
    if (err instanceof UsageError) return err.message.replace(/^queue: /, "");
    throw err;
  }
}

export function queueKeys(queue: string): QueueKeys {
  validateQueueName(queue);
  return {
    queue,
    ready: queue,
    seq: `${queue}:seq`,
    processing: (gate) => `${queue}:processing:${validateKeyPart(gate, "--gate-id")}`,
    processingPattern: `${queue}:processing:*`,
    gates: `${queue}:gates`,
    gateHeartbeat: (gate) => `${queue}:gates:${validateKeyPart(gate, "--gate-id")}`,
    admitted: `${queue}:admitted`,
    working: (worker) => `${queue}:working:${validateKeyPart(worker, "worker id")}`,
    workingPattern: `${queue}:working:*`,
    done: `${queue}:done`,
    retry: (hostClass) => `${queue}:retry:${validateKeyPart(hostClass, "--retry-host-class")}`,
    retryPattern: `${queue}:retry:*`,
    dead: `${queue}:dead`,
    drain: `${queue}${DRAIN_SUFFIX}`,
    mode: `${queue}:mode`,
    inflight: `${queue}:inflight`,
    events: `${queue}:events`,
    stats: `${queue}:stats`,
    decisions: `${queue}:decisions`,
    pushes: `${queue}:pushes`,
  };
}
