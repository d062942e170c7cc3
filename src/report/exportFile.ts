import type { QueueKeys } from "../queue/keys.js";
import { eventFromEntry, parseDoneEntry, type DecisionEvent, type DoneEntry } from "./inputs.js";

/**
 * Rollback's export (src/drill/drain.ts exportKeys), one JSON line per key:
 *   {"key":"jobs:stats","type":"hash","ttl_ms":null,"value":{"retry_count":{"utf8":"3"}}}
 * Lists and hashes hold {utf8} or {base64} values, streams are XRANGE arrays.
 * A key that is not in the file did not exist: an empty list, an empty hash.
 */
export interface ExportedQueue {
  events: DecisionEvent[];
  done: DoneEntry[];
  /** `<q>:done` elements that were not a JSON object. */
  badDone: number;
  stats: Record<string, string>;
  queueLen: number;
  queueHead: Buffer | null;
  drainLen: number;
  /** Lines that were not `{key, type, value}` JSON (a torn write). */
  badLines: number;
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

  const stats: Record<string, string> = {};
  const statsLine = byKey.get(keys.stats);
  if (statsLine && statsLine.type === "hash" && typeof statsLine.value === "object" && statsLine.value !== null) {
    for (const [field, value] of Object.entries(statsLine.value as Record<string, unknown>)) {
      const bytes = valueBytes(value);
      if (bytes) stats[field] = bytes.toString("utf8");
    }
  }

  const ready = listValues(byKey.get(keys.ready));
  return {
    events,
    done,
    badDone,
    stats,
    queueLen: ready.length,
    queueHead: ready[0] ?? null,
    drainLen: listValues(byKey.get(keys.drain)).length,
    badLines,
  };
}
