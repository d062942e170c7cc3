import { checkFileDir, type FileDirCheck } from "../host/filesystem.js";
import { formatBytes } from "../units.js";

export type { FileDirCheck };

export type HogMode = "anon" | "thrash";

/**
 * How a hog run ended:
 * - packed: every page touched and held (or, detached, filled and left holding);
 * - oom_killed: SIGKILL while the cgroup's oom_kill count rose: the drill's
 *   expected loud failure, "admission was already late";
 * - interrupted: the operator stopped inject (SIGINT/SIGTERM);
 * - failed: anything else (could not join, bad arguments, refused, died otherwise).
 */
/**
 * `stopped`: ended from outside while inject ran (a rollback's or a teardown's
 * kill of the cgroup, a kill by hand), not a fault of the hog: QA read a
 * rollback's stop written as "failed".
 */
export const HOG_OUTCOMES = ["packed", "oom_killed", "interrupted", "stopped", "failed"] as const;
export type HogOutcome = (typeof HOG_OUTCOMES)[number];

export interface HogExitFacts {
  code: number | null;
  signal: NodeJS.Signals | null;
  packedSeen: boolean;
  interrupted: boolean;
  oomKillBefore: number | null;
  oomKillAfter: number | null;
}

/** Pure: whether the cgroup's oom_kill count rose over the hog's run; null when either count is unknown. */
export function oomKillRose(before: number | null, after: number | null): boolean | null {
  return before === null || after === null ? null : after > before;
}

/** pagetoucher's exits on SIGHUP, SIGINT and SIGTERM (128 + signal). */
const HOG_STOP_EXITS = new Set([129, 130, 143]);
/** The same signals, when the hog died of one before its handler ran. */
const HOG_STOP_SIGNALS = new Set<NodeJS.Signals>(["SIGHUP", "SIGINT", "SIGTERM"]);

/** Pure: the outcome from how the hog exited and what the cgroup counted. */
export function classifyHogExit(facts: HogExitFacts): HogOutcome {
  if (facts.interrupted) return "interrupted";
  const rose = oomKillRose(facts.oomKillBefore, facts.oomKillAfter);
  if (facts.signal === "SIGKILL" && rose === true) return "oom_killed";
  if (facts.code === 0 && facts.packedSeen) return "packed";
  // A SIGKILL the OOM killer did not count, or a stop signal (pagetoucher exits 128 + signal on these, file unlinked).
  // A crash (SIGSEGV, SIGBUS on the thrash file's mapping, SIGABRT) is the hog failing, not a stop (QA).
  if ((facts.signal === "SIGKILL" && rose === false) || HOG_STOP_EXITS.has(facts.code ?? -1) || (facts.signal !== null && HOG_STOP_SIGNALS.has(facts.signal))) return "stopped";
  return "failed";
}

export interface StallSample {
  /** ms since the hog started. */
  tMs: number;
  phase: "fill" | "hold";
  /** null before the hog's first progress line. */
  touchedBytes: number | null;
  cgUsageBytes: number | null;
  /** Stall % of the last interval from the cgroup's own memory.pressure `some total`; null when unreadable. */
  stallPct: number | null;
}

/**
 * Pure: the phase of a sample covering [intervalStartMs, now), times since the
 * hog started. A hold second is one held from its start: the second the
 * filling ended in is still fill (counted as hold, an 8 s hold showed 9).
 */
export function samplePhase(packedAtMs: number | null, intervalStartMs: number): StallSample["phase"] {
  return packedAtMs !== null && packedAtMs <= intervalStartMs ? "hold" : "fill";
}

export interface StallSummary {
  holdSeconds: number;
  holdMedianPct: number | null;
  holdMaxPct: number | null;
  /** Seconds of the hold whose stall rate was ≥ thresholdPct. */
  holdSecondsOver: number;
  thresholdPct: number;
}

export function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Pure: the hold's stall rates in a few numbers (5 % is where the thrash drill counts as biting). */
export function summarizeStall(samples: StallSample[], thresholdPct = 5): StallSummary {
  const hold = samples.filter((s) => s.phase === "hold" && s.stallPct !== null).map((s) => s.stallPct!);
  return {
    holdSeconds: hold.length,
    holdMedianPct: median(hold),
    holdMaxPct: hold.length === 0 ? null : Math.max(...hold),
    holdSecondsOver: hold.filter((v) => v >= thresholdPct).length,
    thresholdPct,
  };
}

/** The thrash file's directory: a disk filesystem with room for the file (and a margin). */
export function checkThrashDir(dir: string, sizeBytes: number): FileDirCheck {
  return checkFileDir(dir, sizeBytes, "--file-dir", "the thrash file");
}

/**
 * A thrash file that fits beside what the cgroup already holds stays
 * resident: nothing is evicted, nothing refaults, and the stall stays near
 * 0 with nothing said (QA). The note that says so, or null (it does not fit,
 * or the limit or usage is unreadable).
 */
export function thrashFitsNote(sizeBytes: number, usageBytes: number | null, limit: number | "max" | null): string | null {
  if (limit === null || usageBytes === null) return null;
  if (limit !== "max" && usageBytes + sizeBytes <= limit) {
    return `the thrash file (${formatBytes(sizeBytes)}) fits under the cgroup's limit (${formatBytes(limit)}, ${formatBytes(usageBytes)} in use): its pages stay resident, nothing refaults and the stall stays near 0; a --size above ${formatBytes(limit - usageBytes)} thrashes`;
  }
  return null;
}

