/**
 * The gate's reject lines, for the sidecar to show as they happen (DESIGN.md's
 * loop, step 3). The gate XADDs one `<q>:events` entry per decision
 * (src/queue/scripts.ts: reason job figures ts gate attempt) in the same
 * script that bumps its `<q>:stats` counter; the queue sample script reads
 * the entries past the last one seen, in the same round trip as the rest of
 * the sample. Pure: the script's reply in, lines out.
 */

import { decisionLineOf } from "../gate/policy.js";
import { parseCount } from "../util/counters.js";

/** At most this many reject lines a sample: a storm is one `(N more)` line, not a flooded terminal. */
export const REJECT_LINES_PER_SAMPLE = 100;
/**
 * At most this many stream entries read by the script a sample (admits are
 * skipped in Redis, not sent): its cost stays bounded however fast the gate
 * decides (about 1 ms of Redis time for 500 new entries, a few µs when there
 * is none). Past it the feed jumps to the newest entry.
 */
export const EVENTS_SCANNED_PER_SAMPLE = 500;

/** What one sample script call says about `<q>:events`. */
export interface RejectEventsRaw {
  /**
   * The newest entry id read (`0-0`: no stream yet), where the next read
   * starts after; null when there was nothing after the cursor.
   */
  tip: Buffer | null;
  /** The gate's lines of the reject entries read, oldest first, at most REJECT_LINES_PER_SAMPLE. */
  lines: readonly string[];
  /** Reject entries read past that cap. */
  beyond: number;
}

export interface RejectBatch {
  lines: readonly string[];
  /** Rejects not shown as lines. */
  more: number;
}

export const NO_REJECTS: RejectBatch = Object.freeze({ lines: Object.freeze([]), more: 0 });

/**
 * Where the feed is: null before the first reading, whose entries are
 * history (`drill report`), not live lines. A string: one Buffer argument
 * would switch ioredis to building every sample's command as a Buffer.
 */
export interface RejectFeed {
  cursor: string | null;
  /** The sum of the `<q>:stats` reject_* counters at the cursor: counts the rejects the script did not reach. */
  rejectTotal: number;
}

export const initialRejectFeed: RejectFeed = { cursor: null, rejectTotal: 0 };

/** Nothing after the cursor: what almost every sample reads, shared so that it allocates nothing. */
export const NO_NEW_EVENTS: RejectEventsRaw = Object.freeze({ tip: null, lines: Object.freeze([]), beyond: 0 });

/** Every element a Buffer: the shape of a Redis array reply read with callBuffer. */
export const isBuffers = (v: unknown): v is Buffer[] => Array.isArray(v) && v.every((x) => Buffer.isBuffer(x));

/** The script's events elements → lines; null when unexpected (the whole reading fails, never a guess). */
export function parseRejectEvents(tip: unknown, entries: unknown, beyond: unknown): RejectEventsRaw | null {
  if ((tip !== null && !Buffer.isBuffer(tip)) || !Array.isArray(entries) || typeof beyond !== "number" || !Number.isInteger(beyond) || beyond < 0) return null;
  // New entries always move the tip: entries or a count with no tip is not this script's reply.
  if (tip === null) return entries.length === 0 && beyond === 0 ? NO_NEW_EVENTS : null;
  const lines: string[] = [];
  for (const entry of entries as unknown[]) {
    // One entry's fields as XRANGE returns them: field, value, field, value…
    if (!isBuffers(entry) || entry.length % 2 !== 0) return null;
    const fields: Record<string, string> = {};
    for (let i = 0; i < entry.length; i += 2) fields[entry[i]!.toString("utf8")] = entry[i + 1]!.toString("utf8");
    lines.push(formatRejectEvent(fields));
  }
  return { tip, lines, beyond };
}

/**
 * The line the gate printed for this entry, built as the gate builds it
 * (src/gate/policy.ts: decisionLineOf), e.g.
 * `reject_packed_tokens job=7 packed=36012 limit=32000 route=retry`. The
 * entry's figures end with the route the reject took, ` route=retry` or
 * ` route=dead`; the line has it last, as the gate's does.
 */
export function formatRejectEvent(fields: Record<string, string | undefined>): string {
  const route = / route=(retry|dead)$/.exec(fields.figures ?? "");
  const figures = route ? fields.figures!.slice(0, route.index) : (fields.figures ?? "");
  return decisionLineOf(fields.reason ?? "-", fields.job || "-", figures, parseCount(fields.attempt ?? "") ?? undefined, route ? route[1]! : null);
}

/** Sum of the reject_* counters (as src/sampler/step.ts reads them: a value that is not a count is left out). */
export function rejectTotal(stats: Record<string, string>): number {
  let total = 0;
  for (const key in stats) if (key.startsWith("reject_")) total += parseCount(stats[key]!) ?? 0;
  return total;
}

/**
 * One reading's step of the feed. The first reading only sets where the feed
 * starts. Then: the lines read, and as `more` every reject the lines do not
 * show: past the line cap, or past the scan cap (the stats counters moved by
 * more than the lines read). Nothing new (NO_NEW_EVENTS): the reader does
 * not call this at all.
 */
export function nextRejectFeed(prev: RejectFeed, raw: RejectEventsRaw, stats: Record<string, string>): { feed: RejectFeed; batch: RejectBatch } {
  if (raw.tip === null) return { feed: prev, batch: NO_REJECTS };
  // Stream ids are ASCII (`1764480000000-0`).
  const cursor = raw.tip.toString("latin1");
  if (prev.cursor === null) return { feed: { cursor, rejectTotal: rejectTotal(stats) }, batch: NO_REJECTS };
  const total = rejectTotal(stats);
  // Counters lower than before were reset (the stats key deleted): count from 0.
  const counted = total >= prev.rejectTotal ? total - prev.rejectTotal : total;
  const more = Math.max(raw.beyond, counted - raw.lines.length);
  const batch = raw.lines.length === 0 && more === 0 ? NO_REJECTS : { lines: raw.lines, more };
  return { feed: { cursor, rejectTotal: total }, batch };
}

/** Two batches not yet shown as one, still at most REJECT_LINES_PER_SAMPLE lines. */
export function joinRejectBatches(a: RejectBatch, b: RejectBatch): RejectBatch {
  if (a.lines.length === 0 && a.more === 0) return b;
  if (b.lines.length === 0 && b.more === 0) return a;
  const lines = [...a.lines, ...b.lines];
  const over = Math.max(0, lines.length - REJECT_LINES_PER_SAMPLE);
  return { lines: lines.slice(0, REJECT_LINES_PER_SAMPLE), more: a.more + b.more + over };
}

/** The line after a capped batch. */
export function formatMoreRejects(more: number): string {
  return `(${more} more rejects)`;
}

/** A batch as the lines to print: each reject line, then `(N more rejects)` when some are not shown. */
export function rejectBatchLines(batch: RejectBatch): readonly string[] {
  return batch.more > 0 ? [...batch.lines, formatMoreRejects(batch.more)] : batch.lines;
}
