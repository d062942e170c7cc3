import type { Sample, SampleFacts } from "./step.js";
import { counterRise } from "../util/counters.js";

/**
 * The sidecar's alarms, pure. Each alarm is raised once when its condition
 * starts and cleared once when it ends; in between it is only listed in the
 * sample's `alarm` field. A condition that cannot be evaluated (its inputs are
 * null this sample) holds the alarm where it is and restarts its calm period:
 * missing data neither pages nor clears, not even a few samples later.
 */

export const ALARM_NAMES = ["reclaim_not_underload", "retry_worker_idle", "swap_leak", "oom_kill"] as const;
export type AlarmName = (typeof ALARM_NAMES)[number];

export interface AlarmConfig {
  /** psi avg10 above this (host or worker cgroup) is pressure over the limit. */
  psiLimit: number;
  /** Stall % over the last interval above this (host or worker cgroup). */
  psiRateLimit: number;
  /** This host's class: a retried job (attempt > 0) of this class means the gate failed. */
  hostClass: string;
  /** The seed's contradiction needs CPU idle above this. */
  idlePctAbove: number;
  /** ...while queue age still looks fine (below this). */
  queueAgeBelowMs: number;
  /** An oom_kill alarm clears after this long without a new kill. */
  oomKillHoldMs: number;
  /**
   * A retry_worker_idle alarm raised by a rise of the worker's retry_count (a
   * retried job ran here between two samples) clears after this long without
   * another.
   */
  retryHoldMs: number;
  /**
   * A raised alarm clears only after its condition stayed false this long:
   * one sample of a neighbour's CPU burst must not clear and re-page the same
   * incident (the gate's pressure verdict has the same hysteresis).
   */
  clearAfterMs: number;
}

export const defaultAlarmConfig: AlarmConfig = {
  psiLimit: 10,
  psiRateLimit: 10,
  hostClass: "shared-free",
  idlePctAbove: 30,
  queueAgeBelowMs: 500,
  oomKillHoldMs: 60_000,
  retryHoldMs: 60_000,
  clearAfterMs: 5000,
};

export interface AlarmState {
  /** Active alarms and when each was raised (monotonic ms). */
  since: Partial<Record<AlarmName, number>>;
  /** Active alarms whose condition is false, and since when (monotonic ms). */
  calmSince: Partial<Record<AlarmName, number>>;
  /**
   * The oom_kill count kills are counted from: the last one seen, 0 once the
   * worker cgroup was seen absent (one that shows up later is new), null before
   * either (the first count watch reads is a baseline, not kills).
   */
  oomKillCount: number | null;
  lastOomKillRiseMs: number | null;
  /**
   * The worker's retry_count (jobs finished with attempt > 0), counted the
   * same way: a retried job the worker picks up and finishes between two
   * samples is never seen queued or admitted, only as this rise.
   */
  retryCount: number | null;
  lastRetryRiseMs: number | null;
}

export const initialAlarmState: AlarmState = { since: {}, calmSince: {}, oomKillCount: null, lastOomKillRiseMs: null, retryCount: null, lastRetryRiseMs: null };

/**
 * A counter's rise since the last reading, and when it last rose: the first
 * reading is a baseline (what happened before watch is history), a drop is a
 * recreated counter whose whole count is new, and an unreadable reading keeps
 * the baseline. `reset`: the counter's owner is gone, so any count seen later is new.
 */
function counterSince(
  prev: { count: number | null; lastRiseMs: number | null },
  value: number | null,
  reset: boolean,
  nowMs: number,
): { count: number | null; lastRiseMs: number | null; rise: number } {
  if (value === null) return { count: reset ? 0 : prev.count, lastRiseMs: prev.lastRiseMs, rise: 0 };
  const rise = prev.count === null ? 0 : counterRise(prev.count, value);
  return { count: value, lastRiseMs: rise > 0 ? nowMs : prev.lastRiseMs, rise };
}

export interface AlarmEvent {
  name: AlarmName;
  kind: "raised" | "cleared";
  /** The line an operator reads, e.g. `PAGE reclaim, not underload: cpu_idle=41% psi=12.40 slack_ms=-230 queue_age_ms=180`. */
  line: string;
}

/**
 * true: firing, false: not firing, null: cannot tell this sample (hold).
 * `calm`: why it is not firing, with the figures, for the CLEAR line.
 */
type Verdict = { firing: boolean | null; line: string; calm?: string };

/** `nowMs` is monotonic (the reading's monoMs): holds and clear delays are durations, not wall time. */
export function nextAlarms(
  prev: AlarmState,
  sample: Sample,
  facts: SampleFacts,
  nowMs: number,
  config: AlarmConfig = defaultAlarmConfig,
): { state: AlarmState; events: AlarmEvent[]; active: AlarmName[] } {
  // oom_kill: a rise of the cgroup's count; one that appears after watch saw
  // it absent counts all its kills as new.
  const kills = counterSince({ count: prev.oomKillCount, lastRiseMs: prev.lastOomKillRiseMs }, sample.cg_oom_kill, facts.cgAbsent, nowMs);
  const retries = counterSince({ count: prev.retryCount ?? null, lastRiseMs: prev.lastRetryRiseMs ?? null }, sample.retry_count, false, nowMs);
  const held = (lastRiseMs: number | null, holdMs: number) => lastRiseMs !== null && nowMs - lastRiseMs < holdMs;

  const verdicts: Record<AlarmName, Verdict> = {
    reclaim_not_underload: reclaimNotUnderload(sample, facts, config),
    retry_worker_idle: retryWorkerIdle(sample, facts, retries.rise, held(retries.lastRiseMs, config.retryHoldMs), config),
    swap_leak: swapLeak(sample, facts),
    oom_kill: oomKill(sample, facts, kills.rise, held(kills.lastRiseMs, config.oomKillHoldMs), config),
  };

  const since: AlarmState["since"] = { ...prev.since };
  const calmSince: AlarmState["calmSince"] = { ...(prev.calmSince ?? {}) };
  const events: AlarmEvent[] = [];
  for (const name of ALARM_NAMES) {
    const { firing, line, calm: why } = verdicts[name];
    const raisedAt = since[name];
    if (firing === true) {
      delete calmSince[name];
      if (raisedAt === undefined) {
        since[name] = nowMs;
        events.push({ name, kind: "raised", line });
      }
    } else if (firing === null) {
      // Unknown is not calm: calm samples on either side of it do not add up to a clear.
      delete calmSince[name];
    } else if (raisedAt !== undefined) {
      const calm = (calmSince[name] ??= nowMs);
      // oom_kill's verdict already holds for oomKillHoldMs after the last kill.
      if (nowMs - calm >= (name === "oom_kill" ? 0 : config.clearAfterMs)) {
        delete since[name];
        delete calmSince[name];
        events.push({ name, kind: "cleared", line: `CLEAR ${name} after ${formatSeconds(nowMs - raisedAt)}${why ? `: ${why}` : ""}` });
      }
    }
  }
  const active = ALARM_NAMES.filter((name) => since[name] !== undefined);
  return {
    state: { since, calmSince, oomKillCount: kills.count, lastOomKillRiseMs: kills.lastRiseMs, retryCount: retries.count, lastRetryRiseMs: retries.lastRiseMs },
    events,
    active,
  };
}

/**
 * The seed's contradiction: CPU idle above 30 % while memory pressure is over
 * its limit (or admitted jobs already miss their deadline) and queue age still
 * looks fine. Reclaim, not underload.
 */
function reclaimNotUnderload(s: Sample, facts: SampleFacts, config: AlarmConfig): Verdict {
  const pressure = pressureOver(s, facts, config);
  const slackNegative = s.deadline_slack_ms !== null && s.deadline_slack_ms < 0;
  // psi= is always host some avg10 (as in the gate's lines); via= names the figure that tripped.
  const via = pressure.worst
    ? `${pressure.worst.field}=${pressure.worst.value.toFixed(2)}`
    : slackNegative
      ? `deadline_slack_ms=${s.deadline_slack_ms}`
      : null;
  const line =
    `PAGE reclaim, not underload: cpu_idle=${s.cpu_idle_pct === null ? "n/a" : `${Math.round(s.cpu_idle_pct)}%`}` +
    ` psi=${s.psi_mem_some_avg10 === null ? "missing" : s.psi_mem_some_avg10.toFixed(2)}` +
    ` slack_ms=${s.deadline_slack_ms ?? "n/a"} queue_age_ms=${s.queue_age_ms ?? "n/a"}` +
    (via ? ` via=${via}` : "");

  if (s.cpu_idle_pct === null || s.queue_age_ms === null) return { firing: null, line };
  const cpuBusy = s.cpu_idle_pct <= config.idlePctAbove;
  const queueSlow = s.queue_age_ms >= config.queueAgeBelowMs;
  // With no waiting job (slack null on a readable queue) nothing misses its deadline;
  // a slack that could not be read (null with a `missing` entry) may be negative: not calm.
  const slackUnknown = s.deadline_slack_ms === null && s.missing.some((m) => m.field === "deadline_slack_ms");
  const trouble = pressure.over === true || slackNegative ? true : slackUnknown ? null : pressure.over;
  const firing = cpuBusy || queueSlow ? false : trouble;
  if (firing !== false) return { firing, line };

  // Why it is not the contradiction any more, and, when that is the CPU or the
  // queue, that the pressure or the late jobs are still there: an operator
  // reads a bare CLEAR as "safe" (QA 5: it cleared at peak pressure because a
  // hog took the idle CPU).
  const why: string[] = [];
  if (cpuBusy) why.push(`cpu no longer idle (cpu_idle=${Math.round(s.cpu_idle_pct)}%)`);
  if (queueSlow) why.push(`queue age no longer looks fine (queue_age_ms=${s.queue_age_ms})`);
  if (trouble === false) {
    // "highest psi_mem_some_rate=0.00" beside an avg10 tail of 22 read as a contradiction: all at 0 is said so,
    // and beside a tail, as the stall rates (QA: "every figure at 0.00" beside an avg10 of 13.55).
    const highest =
      pressure.highest === null ? ""
      : pressure.highest.value === 0 ? (pressure.tails.length > 0 ? " (every stall rate at 0.00)" : " (every figure at 0.00)")
      : `, highest ${pressure.highest.field}=${pressure.highest.value.toFixed(2)}`;
    why.push(`pressure under its limits${highest} and no admitted job past its deadline`);
    for (const t of pressure.tails) why.push(`${t.field}=${t.value.toFixed(2)} is the tail of a stall that ended (no stall over the last interval)`);
  } else {
    const still: string[] = [];
    if (pressure.worst) still.push(`pressure still over its limit (${pressure.worst.field}=${pressure.worst.value.toFixed(2)})`);
    else if (pressure.over === null) still.push("pressure unknown (PSI unreadable)");
    if (slackNegative) still.push(`a job still past its deadline (deadline_slack_ms=${s.deadline_slack_ms})`);
    else if (slackUnknown) still.push("deadline slack unknown (unreadable)");
    why.push(...still);
  }
  return { firing, line, calm: why.join("; ") };
}

/**
 * Memory pressure over its limit, three-valued: over when any readable figure
 * (host or worker cgroup, avg10 or stall rate) is past its limit; not over
 * only when every figure that should be there was read; unknown otherwise.
 * An unreadable PSI file is not calm: counting it as "not over" cleared the
 * alarm while the files were unreadable and paged again when they returned.
 * An avg10 whose own stall rate was 0 over the last interval is the tail of
 * pressure that has ended (avg10 decays over tens of seconds): it does not
 * count (QA: the hog exited, the CPU went idle, and the page fired with both
 * rates at 0.0 % on a cgroup avg10 of 22, then stayed 14 samples).
 */
function pressureOver(
  s: Sample,
  facts: SampleFacts,
  config: AlarmConfig,
): {
  over: boolean | null;
  worst: { field: string; value: number } | null;
  highest: { field: string; value: number } | null;
  /** avg10 figures over their limit set aside as the tail of an ended stall. */
  tails: Array<{ field: string; value: number }>;
} {
  const figures: Array<{ field: string; value: number | null; limit: number; expected: boolean; stalledNow?: boolean }> = [
    { field: "psi_mem_some_avg10", value: s.psi_mem_some_avg10, limit: config.psiLimit, expected: true, stalledNow: s.psi_mem_some_rate !== 0 },
    { field: "psi_mem_some_rate", value: s.psi_mem_some_rate, limit: config.psiRateLimit, expected: true },
    { field: "cg_psi_mem_some_avg10", value: s.cg_psi_mem_some_avg10, limit: config.psiLimit, expected: facts.cgPsiExpected, stalledNow: s.cg_psi_mem_some_rate !== 0 },
    { field: "cg_psi_mem_some_rate", value: s.cg_psi_mem_some_rate, limit: config.psiRateLimit, expected: facts.cgPsiExpected },
  ];
  let worst: { field: string; value: number; ratio: number } | null = null;
  // The readable figure closest to its limit, for a CLEAR line (a limit may be 0).
  let highest: { field: string; value: number; ratio: number } | null = null;
  let unknown = false;
  const tails: Array<{ field: string; value: number }> = [];
  for (const { field, value, limit, expected, stalledNow } of figures) {
    if (value === null) {
      unknown ||= expected;
      continue;
    }
    if (stalledNow === false && value > limit) {
      tails.push({ field, value }); // read, and not pressure now
      continue;
    }
    const ratio = limit > 0 ? value / limit : value > 0 ? Infinity : 0;
    if (value > limit && (worst === null || ratio > worst.ratio)) worst = { field, value, ratio };
    if (highest === null || ratio > highest.ratio) highest = { field, value, ratio };
  }
  const top = highest === null ? null : { field: highest.field, value: highest.value };
  if (worst !== null) return { over: true, worst: { field: worst.field, value: worst.value }, highest: top, tails };
  return { over: unknown ? null : false, worst: null, highest: top, tails };
}

/**
 * The runbook's `retry worker_idle=1`: a retried job reached this host class,
 * so the gate failed. Seen queued, admitted or held by the worker; or, when
 * the worker took and finished it between two samples, as a rise of its
 * retry_count, held for retryHoldMs.
 */
function retryWorkerIdle(s: Sample, facts: SampleFacts, rise: number, held: boolean, config: AlarmConfig): Verdict {
  const here = facts.retriedJobs.filter((job) => job.host_class === config.hostClass && job.attempt > 0);
  const first = here[0];
  const ran = rise > 0 ? ` retry_count=${s.retry_count} (+${rise} finished here)` : "";
  const line = `PAGE retry worker_idle=1 host_class=${config.hostClass} jobs=${here.length}${first ? ` job=${first.id} attempt=${first.attempt}` : ""}${ran}`;
  const calm = `no retried job of host_class=${config.hostClass} queued, admitted or running, none finished for ${formatSeconds(config.retryHoldMs)}`;
  if (here.length > 0 || held) return { firing: true, line };
  // No queue reading (Redis unreachable), or part of a list not read (past SAMPLE_LIST_SCAN_CAP): cannot tell.
  return { firing: s.queue_len === null || facts.retriedJobsPartial ? null : false, line, calm };
}

/** The CLEAR reason of an alarm about the worker cgroup once it is gone (torn down, say). */
const CGROUP_GONE = "worker cgroup gone";

/** Swap used by a cgroup whose swap is disabled: read from the cgroup, not host si. */
function swapLeak(s: Sample, facts: SampleFacts): Verdict {
  const line = `PAGE swap_leak: cg_swap_current=${s.cg_swap_current ?? "n/a"} swap_max=0${facts.cgDir ? ` cgroup=${facts.cgDir}` : ""}`;
  // A gone cgroup uses no swap; only an unreadable one is unknown (else a watch
  // that outlives teardown lists the alarm forever).
  if (facts.cgAbsent) return { firing: false, line, calm: CGROUP_GONE };
  if (facts.cgSwapMax === null) return { firing: null, line };
  if (facts.cgSwapMax !== 0) return { firing: false, line, calm: `swap allowed in the cgroup (swap_max=${facts.cgSwapMax})` }; // not a leak
  if (s.cg_swap_current === null) return { firing: null, line };
  return { firing: s.cg_swap_current > 0, line, calm: `cg_swap_current=${s.cg_swap_current}` };
}

/**
 * A rise of the cgroup's oom_kill count pages and holds for oomKillHoldMs
 * (`held`). After that an unreadable count cannot tell "no new kill"
 * (n/a is not calm); a gone cgroup kills nothing more.
 */
function oomKill(s: Sample, facts: SampleFacts, rise: number, held: boolean, config: AlarmConfig): Verdict {
  const line = `PAGE oom_kill: cg_oom_kill=${s.cg_oom_kill ?? "n/a"} (+${rise}) admission was already late${facts.cgDir ? ` cgroup=${facts.cgDir}` : ""}`;
  if (held) return { firing: true, line };
  if (facts.cgAbsent) return { firing: false, line, calm: CGROUP_GONE };
  if (s.cg_oom_kill === null) return { firing: null, line };
  return { firing: false, line, calm: `no new kill for ${formatSeconds(config.oomKillHoldMs)} (cg_oom_kill=${s.cg_oom_kill})` };
}

function formatSeconds(ms: number): string {
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`;
}
