import { drillCommandAt, hiddenPasswordNote, redactUrl, rollbackAgain } from "../context.js";
import { holdsQueueKeys } from "../drill/drain.js";
import { embeddedRedisStoppedBy, isDrillUp, stateEntriesOrNone, type StateEntry } from "../drill/state.js";
import { queueKeys } from "../queue/keys.js";
import { closeRedis, connectRedis, sameRedis } from "../queue/redis.js";

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

/**
 * How to close and drain a hand-run queue: `rollback --queue` in the state dir
 * the command was run with. Without --name a rollback is every drill there
 * (README), so pasted as is it also rolls back the drills up there on other
 * queues (QA: it killed a drill's worker, removed its cgroup and stopped its
 * Redis): they are named, with the same rollback --queue-only, which reaches
 * this queue alone (in the same state dir: its rerun and report commands name it).
 */
export interface QueueRollbackCommand {
  command: string;
  /** Drills up (not complete) in that state dir on another queue or Redis: `command` rolls them back too. */
  alsoRollsBack: string[];
  /** With `alsoRollsBack`: the rollback of this queue alone (`command` with --queue-only); null without. */
  queueOnlyCommand: string | null;
}

/** A served queue whose admission a teardown left open: its lever as read (null: its Redis did not answer), and the command that closes it. */
export interface QueueLeftOpen extends QueueRollbackCommand {
  queue: string;
  /** Password masked. */
  url: string;
  /** `<q>:mode` as read: "admit" when unset (the gate admits); null when it could not be read. */
  lever: string | null;
}

/** `rollback --queue` of `queue` on `url`, run from `at` (its --state-dir and trees), with what else it rolls back there. */
export function queueRollbackCommand(
  at: { stateDir: string; sysfs?: string; procfs?: string },
  url: string,
  queue: string,
  // Not listable by this user: none; that rollback fails there too, saying so.
  entries: readonly StateEntry[] = stateEntriesOrNone(at.stateDir),
): QueueRollbackCommand {
  // The queue's Redis, as the worker recorded it: named as --redis wherever the naming command's came from.
  const drillCmd = drillCommandAt({ ...at, redisUrl: url, redisTyped: undefined });
  const command = rollbackAgain(drillCmd, { queue });
  const alsoRollsBack = drillsBesideQueue(entries, queue, url);
  return { command, alsoRollsBack, queueOnlyCommand: alsoRollsBack.length === 0 ? null : rollbackAgain(drillCmd, { queue, queueOnly: true }) };
}

/** Pure: the drills up in a state dir that its `rollback --queue <queue>` on `url` rolls back although they are not on that queue. */
export function drillsBesideQueue(entries: readonly StateEntry[], queue: string, url: string): string[] {
  return entries.flatMap((e) => ("state" in e && isDrillUp(e.state) && !(e.state.queue === queue && sameRedis(e.state.redis.url, url)) ? [e.name] : []));
}

/** What `command` does besides the queue, and the command for the queue alone; "" when nothing. `quote`: how the line quotes a command. */
export function alsoRollsBackText(c: QueueRollbackCommand, quote: (command: string) => string = (command) => command): string {
  if (c.queueOnlyCommand === null) return "";
  const drills = `drill${c.alsoRollsBack.length === 1 ? "" : "s"} ${c.alsoRollsBack.join(", ")}`;
  return ` (pasted as is, this also rolls back ${drills}, up in that state dir on another queue: without --name, rollback is every drill there; this queue alone: ${quote(c.queueOnlyCommand)})`;
}

/** Each command's timeout for the lever read: a Redis that does not answer (paused: its ready check times out) makes the hint say so within a few seconds, not hold up the rollback. */
const LEVER_READ_MS = 2_000;

/**
 * `<q>:mode` on the queue's Redis ("admit" when unset), and whether that
 * Redis holds any key of the queue (holdsQueueKeys, as its `rollback --queue`
 * asks first): null for both when that Redis does not answer or refuses the read.
 */
export async function readQueueLever(q: ServedQueue): Promise<{ lever: string | null; holdsKeys: boolean | null }> {
  let redis;
  try {
    redis = await connectRedis(q.url, { name: "drill-lever-check", commandTimeoutMs: LEVER_READ_MS });
  } catch {
    return { lever: null, holdsKeys: null };
  }
  const keys = queueKeys(q.queue);
  try {
    const lever = (await redis.get(keys.mode)) ?? "admit";
    // Only when the lever is not closed: that is when the note names the queue.
    const holdsKeys = lever === "reject_all" ? true : await holdsQueueKeys(redis, keys).catch(() => null);
    return { lever, holdsKeys };
  } catch {
    return { lever: null, holdsKeys: null };
  } finally {
    await closeRedis(redis, 0);
  }
}

/** What a teardown's note says of the queues its workers served: those left open, and those whose Redis holds no key of them. */
export interface ServedQueuesRead {
  open: QueueLeftOpen[];
  /** No key of the queue on its Redis (nothing queued, admitted or closed there): nothing for its rollback to close or drain. Password masked. */
  keyless: ServedQueue[];
}

/**
 * The served queues whose admission is still open (a lever not reject_all,
 * or one that could not be read), each with the command that closes and
 * drains it; apart, those whose Redis holds no key of them (QA: "admission is
 * still open" said of a queue that never held a job, whose rollback then had
 * nothing to do). `at`: the global flags of the command that was run
 * (--state-dir and the trees), for a command that acts there too.
 */
export async function readServedQueues(served: readonly ServedQueue[], at: { stateDir: string; sysfs?: string; procfs?: string }): Promise<ServedQueuesRead> {
  const open: QueueLeftOpen[] = [];
  const keyless: ServedQueue[] = [];
  // The state dir's drills, read once for every queue left open (and only when one is).
  let entries: StateEntry[] | null = null;
  for (const q of distinctQueues(served)) {
    const { lever, holdsKeys } = await readQueueLever(q);
    if (lever === "reject_all") continue;
    if (holdsKeys === false) {
      keyless.push({ queue: q.queue, url: redactUrl(q.url) });
      continue;
    }
    entries ??= stateEntriesOrNone(at.stateDir);
    // A drill's embedded Redis its rollback stopped: nothing admits there, and no command reaches it.
    if (lever === null && embeddedRedisStoppedBy(entries, q.url) !== null) continue;
    open.push({ queue: q.queue, url: redactUrl(q.url), lever, ...queueRollbackCommand(at, q.url, q.queue, entries) });
  }
  return { open, keyless };
}

/** A served queue whose Redis holds no key of it: its worker is gone, and there was nothing to admit or close. */
export function queueKeylessLine(q: ServedQueue): string {
  return `queue ${q.queue} on ${q.url}: its worker is gone; that Redis holds no key of queue ${q.queue} (nothing was queued or admitted there, no lever set): nothing to close or drain`;
}

/**
 * What a teardown leaves of a hand-run worker's queue: the worker is gone and
 * its jobs wait in admitted (or in its working list, killed), but the gate still admits and nothing runs them,
 * their deadline slack running out. The rollback of the queue closes
 * admission (deny-all) and drains it.
 */
export function queueLeftOpenLine(q: QueueLeftOpen): string {
  const admission = q.lever === null ? "and its admission may still be open (its Redis did not answer: the lever was not read)" : "but its admission is still open";
  return (
    // SIGTERM gives the worker's jobs back to admitted; SIGKILL (the teardown's kill, an OOM) leaves them in its working list (QA: "back in admitted" beside 2 in working).
    `queue ${q.queue} on ${q.url}: its worker is gone (what it held is back in ${queueKeys(q.queue).admitted} if it stopped on the SIGTERM; if it was killed, still in ` +
    `${q.queue}:working:<its worker id>, which the queue's rollback re-drains), ${admission}: ` +
    `what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: ${q.command}${alsoRollsBackText(q)}`
  );
}

/**
 * queueLeftOpenLine for each queue left open, then, once, the note that a
 * masked password (`***`) does not paste, when a Redis among them had one;
 * last, queueKeylessLine for each queue whose Redis holds no key of it.
 * `served`: the queues as recorded, password and all (QueueLeftOpen.url is
 * masked): the knowledge stays out of the --json documents, whose URLs and
 * commands show `***` themselves.
 */
export function queuesLeftOpenLines(leftOpen: readonly QueueLeftOpen[], served: readonly ServedQueue[], keyless: readonly ServedQueue[] = []): string[] {
  const urls = served.filter((s) => leftOpen.some((q) => q.queue === s.queue && q.url === redactUrl(s.url))).map((s) => s.url);
  const note = hiddenPasswordNote(urls);
  return [...leftOpen.map(queueLeftOpenLine), ...(note === null ? [] : [note]), ...keyless.map(queueKeylessLine)];
}
