import type { Redis } from "ioredis";
import { closeSync, fsyncSync, linkSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { decodeJob, MAX_MARKED_PAYLOAD_BYTES } from "../queue/job.js";
import { fsyncDir } from "../util/fsyncDir.js";
import { openOwnFile } from "../util/ownFiles.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";
import { isValidKeyPart, type QueueKeys } from "../queue/keys.js";
import { workerKeys } from "../worker/scripts.js";
import { drainScript } from "../queue/scripts.js";
import { runScript } from "../queue/redis.js";
import { gateHolder, holderExited, parseWorkerToken } from "../worker/heartbeatToken.js";
import { isSameProcess } from "../host/process.js";
import { drillRunFromEnviron, readEnviron } from "./strays.js";
import os from "node:os";
import type { HostRoots } from "../host/kernelFile.js";

/**
 * Rollback's drain: every waiting or stranded job goes to the END of
 * `<queue>_drain`, a batch per step (drainScript). Never RENAME: it silently replaces an
 * existing destination, so a second rollback would destroy the first drain.
 */
export interface DrainResult {
  moved: number;
  /** Source key → jobs moved from it. */
  from: Record<string, number>;
  drainLength: number;
  /** Why the packed tokens of jobs moved were not released (inflight of another type, or refused by the ACL). */
  unreleased?: string[];
}

/**
 * The runbook's first drain: the ready queue only (the gate and worker may
 * still hold their lists; drainUnheld takes those once nothing alive does).
 */
export async function drainReady(redis: Redis, keys: QueueKeys, progress?: DrainProgressOptions): Promise<DrainResult> {
  return await drainLists(redis, keys, [keys.ready], progress);
}

/** A list a live gate or worker still holds: not drained, said. */
export interface HeldList {
  list: string;
  jobs: number;
  /** Heartbeat keys of the holders alive (any worker's for admitted). */
  holders: string[];
}

/** A held list as a rollback says it: admitted is no worker's, but live workers take from it. */
export function heldText(h: HeldList, admitted: string): string {
  return h.list === admitted ? `${h.jobs} job(s) in ${h.list}, which live worker(s) ${h.holders.join(", ")} take from` : `${h.jobs} job(s) in ${h.list} held by ${h.holders.join(", ")}`;
}

/**
 * The second drain (a drill's rollback, and `rollback --queue`'s), after rollback stopped what it could:
 * admitted, processing and working lists go to the drain once nothing alive
 * takes from them (no heartbeat: a gate's `<q>:gates:<g>`, a worker's
 * `<q>:workers:<w>`, any worker's for admitted). A gate or worker the
 * operator runs by hand, outside drill's cgroups, holds its lists: those stay
 * and are returned as held, for the rollback to name. A heartbeat (a worker's
 * or a gate's) naming a process of this host that is gone holds nothing: the rollback has
 * just killed it (QA: a SIGSTOPped worker, killed with its cgroup, never
 * cleared its heartbeat, and its jobs were left as "held by a live worker").
 */
export async function drainUnheld(redis: Redis, keys: QueueKeys, roots: HostRoots, progress?: DrainProgressOptions): Promise<DrainResult & { held: HeldList[] }> {
  const workerHeartbeat = workerKeys(keys.queue).heartbeat;
  const heartbeatPrefix = workerHeartbeat("x").slice(0, -1);
  const workerAlive = async (key: string): Promise<boolean> => {
    const token = await redis.get(key);
    return token !== null && !holderExited(roots, parseWorkerToken(token));
  };
  const liveWorkers: string[] = [];
  for (const key of await scanKeys(redis, `${heartbeatPrefix}*`)) {
    if (isValidKeyPart(key.slice(heartbeatPrefix.length)) && (await workerAlive(key))) liveWorkers.push(key);
  }
  const candidates: Array<{ list: string; holders: string[] }> = [{ list: keys.admitted, holders: liveWorkers }];
  // A list under a name no gate or worker id can have (made by hand) has no holder.
  const holder = async (id: string, heartbeatOf: (id: string) => string, alive: (key: string) => Promise<boolean>): Promise<string[]> =>
    isValidKeyPart(id) && (await alive(heartbeatOf(id))) ? [heartbeatOf(id)] : [];
  const gateAlive = async (key: string): Promise<boolean> => {
    const value = await redis.get(key);
    return value !== null && !holderExited(roots, gateHolder(value));
  };
  for (const list of await scanKeys(redis, keys.processingPattern)) {
    candidates.push({ list, holders: await holder(list.slice(keys.processing("x").length - 1), keys.gateHeartbeat, gateAlive) });
  }
  for (const list of await scanKeys(redis, keys.workingPattern)) {
    candidates.push({ list, holders: await holder(list.slice(keys.working("x").length - 1), workerHeartbeat, workerAlive) });
  }
  const held: HeldList[] = [];
  const sources: string[] = [];
  for (const c of candidates) {
    if (c.holders.length === 0) sources.push(c.list);
    else {
      const jobs = await redis.llen(c.list);
      if (jobs > 0) held.push({ list: c.list, jobs, holders: c.holders });
    }
  }
  return { ...(await drainLists(redis, keys, sources, progress)), held };
}

/** A drill run serving a queue from this host: its gate or worker, found by its heartbeat, carries the run's DRILL_RUN_ID. */
export interface ServingRun {
  runId: string;
  stateDir: string | null;
  role: "gate" | "worker";
  pid: number;
}

/**
 * The drill run whose gate or worker serves this queue on this host, if any:
 * `rollback --queue` of a drill's queue must not pass for a hand-run queue
 * (QA S 7: it flipped and drained a live drill's queue from another state dir,
 * and that drill's report then blamed its own rollback).
 */
export async function queueServingRun(redis: Redis, keys: QueueKeys, roots: HostRoots): Promise<ServingRun | null> {
  const workerHeartbeat = workerKeys(keys.queue).heartbeat;
  const sources = [
    { role: "gate" as const, prefix: keys.gateHeartbeat("x").slice(0, -1), holder: gateHolder },
    { role: "worker" as const, prefix: workerHeartbeat("x").slice(0, -1), holder: parseWorkerToken },
  ];
  for (const { role, prefix, holder } of sources) {
    for (const key of await scanKeys(redis, `${prefix}*`)) {
      const value = await redis.get(key).catch(() => null);
      const who = value === null ? null : holder(value);
      if (who === null || who.host !== os.hostname() || !isSameProcess(roots, who.pid, who.startTime)) continue;
      const environ = readEnviron(roots, who.pid);
      const run = environ === null ? null : drillRunFromEnviron(environ);
      if (run !== null) return { ...run, role, pid: who.pid };
    }
  }
  return null;
}

/** Jobs one drain call moves: a batch per step (QA: one LMOVE each took 27 s for 50 000 jobs under appendfsync always). */
const DRAIN_BATCH = 1000;
/** A batch of a list holding tokens goes as read (drainScript): cut at this many payload bytes (a job may be 64 KiB). */
const DRAIN_BATCH_BYTES = 1024 * 1024;
/** How often a drain says how far it got. */
export const DRAIN_PROGRESS_EVERY_MS = 2000;

/** A drain as it goes: jobs moved so far, of about how many its lists held when it began. */
export type DrainProgress = (moved: number, ofAbout: number) => void;

/** What a drain says while it runs: `onProgress` every `everyMs` (a batch or more apart). */
export interface DrainProgressOptions {
  onProgress?: DrainProgress;
  everyMs?: number;
}

/** Each source's jobs to the end of the drain, a batch per call; what leaves admitted or a gate's or worker's list releases its packed tokens. */
async function drainLists(redis: Redis, keys: QueueKeys, sources: string[], progress: DrainProgressOptions = {}): Promise<DrainResult> {
  const from: Record<string, number> = {};
  const unreleased = new Set<string>();
  let moved = 0;
  const { onProgress, everyMs = DRAIN_PROGRESS_EVERY_MS } = progress;
  let ofAbout = 0;
  if (onProgress) for (const source of sources) ofAbout += await redis.llen(source);
  let saidAt = Date.now();
  for (const source of sources) {
    let n = 0;
    for (;;) {
      const args = source === keys.ready ? [String(DRAIN_BATCH)] : await heldBatch(redis, source);
      if (args === null) break;
      const [count, refusal] = (await runScript(redis, drainScript, [source, keys.drain, keys.inflight], args)) as [number, string];
      n += count;
      moved += count;
      if (refusal !== "") unreleased.add(refusal);
      if (onProgress && Date.now() - saidAt >= everyMs) {
        saidAt = Date.now();
        onProgress(moved, Math.max(ofAbout, moved));
      }
      // The ready list came up short: it was empty within that step.
      if (source === keys.ready && count < DRAIN_BATCH) break;
    }
    if (n > 0) from[source] = n;
  }
  return { moved, from, drainLength: await redis.llen(keys.drain), ...(unreleased.size > 0 ? { unreleased: [...unreleased] } : {}) };
}

/** The head of a list holding tokens, as drainScript takes it (count, then payload and id pairs); null when it is empty. */
async function heldBatch(redis: Redis, source: string): Promise<Array<string | Buffer> | null> {
  const head = await redis.lrangeBuffer(source, 0, DRAIN_BATCH - 1);
  if (head.length === 0) return null;
  const pairs: Array<string | Buffer> = [];
  let bytes = 0;
  for (const payload of head) {
    if (pairs.length > 0 && bytes + payload.length > DRAIN_BATCH_BYTES) break;
    bytes += payload.length;
    // Admitted and working payloads may carry the worker's marks: their id still releases their tokens.
    const decoded = decodeJob(payload, Date.now(), MAX_MARKED_PAYLOAD_BYTES);
    pairs.push(payload, decoded.ok ? decoded.job.id : "");
  }
  return [String(pairs.length / 2), ...pairs];
}

/** Whether this Redis (its database) holds any key of the queue: its list, its drain, or one under `<q>:`. */
export async function holdsQueueKeys(redis: Redis, keys: QueueKeys): Promise<boolean> {
  // The fixed keys first, one round trip: a queue that ever held a job has some; the SCAN (the whole keyspace) only when none is there.
  // Read off queueKeys (its string names, not the patterns), so a key added there is asked here too.
  const fixed = Object.values(keys).filter((k): k is string => typeof k === "string" && !k.endsWith("*"));
  return (await redis.exists(...fixed)) > 0 || (await scanKeys(redis, `${keys.queue}:*`)).length > 0;
}

export async function scanKeys(redis: Redis, pattern: string): Promise<string[]> {
  const found = new Set<string>();
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 500);
    cursor = next;
    for (const key of batch) found.add(key);
  } while (cursor !== "0");
  return [...found].sort();
}

/**
 * Keys of this Redis's database that are not queue `keys.queue`'s, counted by
 * the queue each names (before its first ':', or its `_drain`): what an
 * export of the queue leaves out.
 */
export async function otherQueuesKeys(redis: Redis, keys: QueueKeys): Promise<Array<{ queue: string; keys: number }>> {
  const counts = new Map<string, number>();
  for (const key of await scanKeys(redis, "*")) {
    if (key === keys.ready || key === keys.drain || key.startsWith(`${keys.queue}:`)) continue;
    const queue = key.split(":")[0]!.replace(/_drain$/, "");
    counts.set(queue, (counts.get(queue) ?? 0) + 1);
  }
  return [...counts].sort(([a], [b]) => a.localeCompare(b)).map(([queue, n]) => ({ queue, keys: n }));
}

/** One exported key: values as UTF-8 where they are, base64 where they are not. */
interface ExportedValue {
  utf8?: string;
  base64?: string;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function exportValue(buf: Buffer): ExportedValue {
  try {
    return { utf8: utf8.decode(buf) };
  } catch {
    return { base64: buf.toString("base64") };
  }
}

/**
 * Writes every key of the drill (`<queue>`, `<queue>:*`, `<queue>_drain`) to a
 * JSONL file, fsynced with its directory, before an embedded Redis is stopped: the drain outlives
 * the server that held it. Written as `<file>.partial` and linked to `file`
 * once complete: a failed export (disk full, EFBIG) leaves no truncated file
 * under the name of a finished one, which report and operators take as whole.
 */
export async function exportKeys(redis: Redis, keys: QueueKeys, file: string): Promise<{ keys: number; file: string }> {
  const partial = `${file}.partial`;
  try {
    const count = await writeKeys(redis, keys, partial);
    // link, not rename: an export already there is never replaced
    linkSync(partial, file);
    unlinkSync(partial);
    // The name too must be on disk before the embedded Redis that held the keys is stopped.
    fsyncDir(path.dirname(file));
    return { keys: count, file };
  } catch (err) {
    // Not rmSync: on a file it may not unlink it throws ENOTDIR in place of what failed.
    const left = unlinkLeftover(partial);
    if (left !== null && err instanceof Error) err.message += `; its partial file ${partial} is left: ${left}`;
    throw err;
  }
}

async function writeKeys(redis: Redis, keys: QueueKeys, file: string): Promise<number> {
  const names = [...new Set([keys.ready, keys.drain, ...(await scanKeys(redis, `${keys.queue}:*`))])];
  const fd = openOwnFile(file, "wx");
  let count = 0;
  try {
    for (const key of names) {
      const type = await redis.type(key);
      let value: unknown;
      switch (type) {
        case "none":
          continue;
        case "string":
          value = exportValue((await redis.getBuffer(key)) ?? Buffer.alloc(0));
          break;
        case "list":
          value = (await redis.lrangeBuffer(key, 0, -1)).map(exportValue);
          break;
        case "hash": {
          const flat = await redis.hgetallBuffer(key);
          value = Object.fromEntries(Object.entries(flat).map(([k, v]) => [k, exportValue(v)]));
          break;
        }
        case "set":
          value = (await redis.smembersBuffer(key)).map(exportValue);
          break;
        case "zset":
          value = await redis.zrange(key, 0, -1, "WITHSCORES");
          break;
        case "stream":
          value = await redis.xrange(key, "-", "+");
          break;
        default:
          value = null;
      }
      const ttlMs = await redis.pttl(key);
      // writeFileSync on an fd writes until all is written: writeSync may write
      // part (disk full, file size limit) and report no error for it.
      writeFileSync(fd, `${JSON.stringify({ key, type, ttl_ms: ttlMs >= 0 ? ttlMs : null, value })}\n`);
      count++;
    }
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return count;
}
