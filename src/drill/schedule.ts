import type { DrillFile } from "./drillFile.js";

/**
 * The drill's schedule as decisions apart from the clock: which phases run,
 * when a pack pushes its next job or stops, and when `up` stops following the
 * gate. Times are milliseconds since the drill started; `up` only sleeps,
 * pushes and prints what these return.
 */

export type DrillPhase = DrillFile["phases"][number];
export type ScheduledPhase = DrillPhase & { index: number };

/**
 * The phases in start order, split at the drill's duration: one starting at or
 * after it never runs (a --duration shorter than the file's leaves some out).
 */
export function splitPhases(phases: readonly DrillPhase[], durationMs: number): { run: ScheduledPhase[]; skipped: ScheduledPhase[] } {
  const indexed = phases.map((p, index) => ({ ...p, index })).sort((a, b) => a.at - b.at);
  return { run: indexed.filter((p) => p.at < durationMs), skipped: indexed.filter((p) => p.at >= durationMs) };
}

/**
 * An inject phase's hold, cut at the drill's end: a --duration shorter than
 * the file's must not leave a hog filling the cgroup after the drill is over.
 * The hold counts from the phase's start; filling the cgroup comes on top.
 */
export function injectHold(phase: { at: number; inject: { hold: number } }, durationMs: number): { holdMs: number; clipped: boolean } {
  const left = durationMs - phase.at;
  return phase.inject.hold > left ? { holdMs: left, clipped: true } : { holdMs: phase.inject.hold, clipped: false };
}

export type PackAction =
  | { kind: "push" }
  | { kind: "wait"; ms: number }
  | { kind: "done" }
  /** The drill ended before the next push was due: the rest is not packed. */
  | { kind: "deadline"; notPacked: number };

/**
 * A pack's next move. With a rate the next job is due 1/rate after the last
 * push; one due at or after the drill's end is never pushed, so the packer
 * does not wait past the end for it.
 */
export function nextPackAction(step: { jobs: number; rate?: number | undefined }, pushed: number, lastPushAtMs: number | null, nowMs: number, durationMs: number): PackAction {
  if (pushed >= step.jobs) return { kind: "done" };
  const dueMs = lastPushAtMs !== null && step.rate ? lastPushAtMs + 1000 / step.rate : nowMs;
  if (Math.max(dueMs, nowMs) >= durationMs) return { kind: "deadline", notPacked: step.jobs - pushed };
  if (dueMs > nowMs) return { kind: "wait", ms: dueMs - nowMs };
  return { kind: "push" };
}

/** Decision lines carry the job's first verdict; `recovered`, stderr notes and the rest decide nothing. */
const DECISION_LINE = /^(?:admit|reject_[a-z_]+|dead) job=(\S+)/;

/** The job a gate output line decides, e.g. `reject_packed_tokens job=7 packed=36012 limit=32000` → "7". */
export function decidedJob(line: string): string | null {
  const id = DECISION_LINE.exec(line)?.[1];
  return id === undefined || id === "-" ? null : id;
}

/** Between two sends of a job Redis did not take: 250 ms, doubling, at most 2 s. */
export function pushRetryDelayMs(attempt: number): number {
  return Math.min(2000, 250 * 2 ** Math.min(attempt, 3));
}

export type FollowAction = { kind: "all_decided" } | { kind: "wait" } | { kind: "gave_up"; undecided: string[] };

/** After packing: follow the gate until it has decided every pushed job, or until `untilMs`. */
export function nextFollowAction(pushed: readonly string[], decided: ReadonlySet<string>, nowMs: number, untilMs: number): FollowAction {
  const undecided = pushed.filter((id) => !decided.has(id));
  if (undecided.length === 0) return { kind: "all_decided" };
  return nowMs >= untilMs ? { kind: "gave_up", undecided } : { kind: "wait" };
}
