import { percentileOf } from "../util/stats.js";
import { stallRatePct } from "./psi.js";

/**
 * stall_ms_p99 (DESIGN.md "Host signals"): p99 over the last 60 s of
 * per-second stall ms from the PSI `total` deltas, the worker cgroup's if it
 * exists, else the host's. One pure step for the gate and the sidecar, so
 * watch shows the figure the gate rejects on.
 */

export const STALL_WINDOW_MS = 60_000;

/** Whose memory PSI `some total` a reading is: the worker cgroup's when readable, else the host's. */
export type StallSource = "cgroup" | "host";

export interface StallReading {
  source: StallSource;
  totalUs: number;
  /** Monotonic clock: a wall-clock step must not make or lose stall. */
  monoMs: number;
}

export interface StallPoint {
  monoMs: number;
  stallMsPerS: number;
}

export interface StallWindow {
  /** The previous reading, which the next one's delta is taken against (null: no PSI read). */
  last: StallReading | null;
  /** Every point from `last.source`, none older than STALL_WINDOW_MS. */
  points: StallPoint[];
}

export const emptyStallWindow: StallWindow = { last: null, points: [] };

/**
 * One sample. A change of source (the worker cgroup appeared or is gone, PSI
 * unreadable: null) or a `total` gone backwards (the cgroup was recreated)
 * starts the window over: another source's stall must not outlive it.
 */
export function nextStallWindow(prev: StallWindow, reading: StallReading | null): StallWindow {
  const last = prev.last;
  if (reading === null || last === null || last.source !== reading.source || reading.totalUs < last.totalUs) {
    return { last: reading, points: [] };
  }
  // A new array (prev stays as it was), built in one indexed pass: this runs
  // every sample, up to 240 points at 250 ms, and for-of makes garbage per point.
  const points: StallPoint[] = [];
  const kept = prev.points;
  for (let k = 0; k < kept.length; k++) if (reading.monoMs - kept[k]!.monoMs < STALL_WINDOW_MS) points.push(kept[k]!);
  const pct = stallRatePct(last.totalUs, reading.totalUs, reading.monoMs - last.monoMs);
  if (pct !== null) points.push({ monoMs: reading.monoMs, stallMsPerS: pct * 10 }); // % of a second → ms per second
  return { last: reading, points };
}

/** Nearest-rank p99 of the window; null with no points yet. */
export function stallMsP99(window: StallWindow): number | null {
  return percentileOf(window.points, (p) => p.stallMsPerS, 99);
}

/** The reading stall_ms_p99 follows: the worker cgroup's PSI when readable, else the host's. */
export function stallReading(cgroupTotalUs: number | null, hostTotalUs: number | null, monoMs: number): StallReading | null {
  if (cgroupTotalUs !== null) return { source: "cgroup", totalUs: cgroupTotalUs, monoMs };
  if (hostTotalUs !== null) return { source: "host", totalUs: hostTotalUs, monoMs };
  return null;
}
