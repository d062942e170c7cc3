import type { QueueKeys } from "../queue/keys.js";
import { isValidKeyPart } from "../queue/keys.js";
import {
  eventFromEntry,
  FIXED_JOB_LISTS,
  fixedJobListKey,
  holderHeartbeatKey,
  firstTokenTimes,
  jobIdOf,
  jobListRole,
  jobTimingOf,
  parseDoneEntry,
  seqOfText,
  sortJobLists,
  type DecisionEvent,
  type DoneEntry,
  type JobList,
  type JobPlaces,
  type JobTiming,
  UNFINISHED_ROLES,
} from "./inputs.js";
import { workerKeys } from "../worker/scripts.js";

/**
 * Rollback's export (src/drill/drain.ts exportKeys), one JSON line per key:
 *   {"key":"jobs:stats","type":"hash","ttl_ms":null,"value":{"retry_count":{"utf8":"3"}}}
 * Lists and hashes hold {utf8} or {base64} values, streams are XRANGE arrays.
 * A key that is not in the file did not exist: an empty list, an empty hash.
 */
export interface ExportedQueue {
  /**
   * A key absent from a whole file did not exist (empty); from a damaged one
   * (badLines > 0: cut short, edited) it may be on a line that was lost, so
   * what it holds is unknown: null, never an empty stream or a 0 (QA: a cut
   * export read "0 decisions", "ids issued 0, every one on a list").
   */
  events: DecisionEvent[] | null;
  done: DoneEntry[] | null;
  /** `<q>:done` elements that were not a JSON object. */
  badDone: number;
  stats: Record<string, string> | null;
  queueLen: number | null;
  queueHead: Buffer | null;
  drainLen: number | null;
  /** Lines that were not `{key, type, value}` JSON (a torn write). */
  badLines: number;
  /** Every job list of the queue in the file, and `<q>:seq`; null from a damaged file (a list may be on a lost line). */
  jobPlaces: JobPlaces | null;
  /** Payloads of the unfinished jobs' lists (null from a damaged file), and `<q>:first_token` (empty when absent). */
  unfinished: JobTiming[] | null;
  firstTokens: Record<string, number> | null;
  /** Keys of this queue in the file (`<q>`, `<q>:*`, `<q>_drain`): 0 means the file holds none of it. */
  queueKeyCount: number;
  /** The queues the file holds keys of, by name (what a wrong --queue should have been). */
  queues: string[];
}

/** The queue a key belongs to: `<q>:…` and `<q>_drain` name it; a plain name is a ready list. */
export function queueOfKey(key: string): string | null {
  const colon = key.indexOf(":");
  const name = colon >= 0 ? key.slice(0, colon) : key.endsWith("_drain") ? key.slice(0, -"_drain".length) : key;
  return isValidKeyPart(name) ? name : null;
}

interface ExportLine {
  key: string;
  type: string;
  value: unknown;
}

/** `final-2025-11-30T09-55-00-123Z.jsonl` → its time in ms, null when the name does not carry one. */
export function exportTimeMs(fileName: string): number | null {
  const m = /final-(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})-(\d{3})Z\.jsonl$/.exec(fileName);
  if (!m) return null;
  const ms = Date.parse(`${m[1]}T${m[2]}:${m[3]}:${m[4]}.${m[5]}Z`);
  return Number.isFinite(ms) ? ms : null;
}

function valueBytes(value: unknown): Buffer | null {
  if (typeof value !== "object" || value === null) return null;
  const v = value as { utf8?: unknown; base64?: unknown };
  if (typeof v.utf8 === "string") return Buffer.from(v.utf8, "utf8");
  if (typeof v.base64 === "string") return Buffer.from(v.base64, "base64");
  return null;
}

function listValues(line: ExportLine | undefined): Buffer[] {
  if (!line || line.type !== "list" || !Array.isArray(line.value)) return [];
  return line.value.map(valueBytes).filter((b): b is Buffer => b !== null);
}

export function parseExport(text: string, keys: QueueKeys): ExportedQueue {
  const byKey = new Map<string, ExportLine>();
  let badLines = 0;
  for (const raw of text.split("\n")) {
    if (raw.trim() === "") continue;
    try {
      const parsed = JSON.parse(raw) as Partial<ExportLine>;
      if (typeof parsed.key !== "string" || typeof parsed.type !== "string") throw new Error("not a key line");
      byKey.set(parsed.key, { key: parsed.key, type: parsed.type, value: parsed.value });
    } catch {
      badLines++;
    }
  }

  const events: DecisionEvent[] = [];
  const stream = byKey.get(keys.events);
  if (stream && stream.type === "stream" && Array.isArray(stream.value)) {
    for (const entry of stream.value) {
      if (!Array.isArray(entry) || typeof entry[0] !== "string" || !Array.isArray(entry[1])) continue;
      events.push(eventFromEntry(entry[0], (entry[1] as unknown[]).map(String)));
    }
  }

  const done: DoneEntry[] = [];
  let badDone = 0;
  for (const bytes of listValues(byKey.get(keys.done))) {
    const entry = parseDoneEntry(bytes.toString("utf8"));
    if (entry) done.push(entry);
    else badDone++;
  }

  const hashOf = (line: ExportLine | undefined): Record<string, string> => {
    const out: Record<string, string> = {};
    if (line && line.type === "hash" && typeof line.value === "object" && line.value !== null) {
      for (const [field, value] of Object.entries(line.value as Record<string, unknown>)) {
        const bytes = valueBytes(value);
        if (bytes) out[field] = bytes.toString("utf8");
      }
    }
    return out;
  };
  const stats = hashOf(byKey.get(keys.stats));
  const firstTokens = firstTokenTimes(hashOf(byKey.get(workerKeys(keys.queue).firstToken)));
  const unfinished: JobTiming[] = [];

  const lists: JobList[] = [];
  const seen = new Set<string>();
  for (const line of byKey.values()) {
    const where = jobListRole(keys.queue, line.key);
    if (where === null) continue;
    seen.add(line.key);
    const isList = line.type === "list" && Array.isArray(line.value);
    const heartbeat = holderHeartbeatKey(keys.queue, where.role, where.holder);
    if (isList && UNFINISHED_ROLES.includes(where.role)) {
      for (const b of listValues(line)) {
        const timing = jobTimingOf(b, where.role);
        if (timing) unfinished.push(timing);
      }
    }
    lists.push({
      key: line.key,
      ...where,
      count: isList ? (line.value as unknown[]).length : null,
      ids: isList ? listValues(line).map((b) => jobIdOf(b)) : null,
      holderAlive: heartbeat === null ? null : byKey.has(heartbeat),
    });
  }
  for (const role of FIXED_JOB_LISTS) {
    const key = fixedJobListKey(keys.queue, role);
    if (!seen.has(key)) lists.push({ key, role, holder: null, count: 0, ids: [], holderAlive: null });
  }
  const seqLine = byKey.get(keys.seq);
  const seq =
    seqLine === undefined || seqLine.type === "string"
      ? seqOfText(seqLine === undefined ? null : (valueBytes(seqLine.value)?.toString("utf8") ?? ""))
      : { seq: null, seqProblem: `is a ${String(seqLine.type)}, not a string` };
  const queues = new Set<string>();
  let queueKeyCount = 0;
  for (const key of byKey.keys()) {
    const queue = queueOfKey(key);
    if (queue !== null) queues.add(queue);
    if (key === keys.ready || key === keys.drain || key.startsWith(`${keys.queue}:`)) queueKeyCount++;
  }

  const ready = listValues(byKey.get(keys.ready));
  const damaged = badLines > 0;
  const known = (key: string) => !damaged || byKey.has(key);
  return {
    events: known(keys.events) ? events : null,
    done: known(keys.done) ? done : null,
    badDone,
    stats: known(keys.stats) ? stats : null,
    queueLen: known(keys.ready) ? ready.length : null,
    queueHead: ready[0] ?? null,
    drainLen: known(keys.drain) ? listValues(byKey.get(keys.drain)).length : null,
    badLines,
    jobPlaces: damaged ? null : { lists: sortJobLists(lists), ...seq },
    unfinished: damaged ? null : unfinished,
    firstTokens: known(workerKeys(keys.queue).firstToken) ? firstTokens : null,
    queueKeyCount,
    queues: [...queues].sort(),
  };
}
