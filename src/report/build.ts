import { extentOf, percentile, sharesOfHundred } from "../util/stats.js";
import { DEFAULT_REPORT_SINCE } from "../units.js";
import { decodeJob } from "../queue/job.js";
import { parseSeq } from "../queue/seq.js";
import { redactUrl } from "../queue/redis.js";
import { formatRejectEvent } from "../sampler/rejects.js";
import { counterRise, parseCount } from "../util/counters.js";
import type { DrillEnded, OomKillReading } from "../drill/state.js";
import { streamIdAtMost, streamIdMs, type CgroupNow, type DecisionEvent, type DoneEntry, type EventStreamExtent, type JobTiming, type ReportInputs, type WatchSample } from "./inputs.js";
import { EVENTS_MAXLEN } from "../queue/scripts.js";

/**
 * The incident-note summary, pure: inputs, the moment they describe and the
 * window length in, one Report out. Every figure that has no source is null
 * (rendered "n/a" with the reason), never 0.
 */

export const LAB_LABEL = "lab expectation from a declared drill, not observed production";

export const DECISION_KINDS = ["admit", "reject_host_pressure", "reject_deadline_slack", "reject_packed_tokens"] as const;

/**
 * The sets the first-token figures count. A job admitted before the window
 * and finished in it is in finished, not admitted: late counts over judged,
 * never over admitted (QA: "late 12" beside "admitted 10" read as 12 of 10).
 */
export const FIRST_TOKEN_COUNTED = {
  admitted: "admit decisions in the window, whenever the job finished",
  finished: "jobs whose done_ts is in the window, admitted in it or before it",
  judged: "jobs finished in the window, plus jobs admitted in it not finished: what late counts over",
  late: "judged jobs with a first token after their deadline, or none by it",
} as const;

export const COST_PROXY_FORMULA = "cost_proxy = prompt_tokens + completion_tokens + retry_count * prompt_tokens + stall_ms * workers_held / 1000";

/** How stall_ms is measured for cost_proxy (also printed with the figures). */
export const STALL_MS_SOURCE =
  "stall_ms = memory PSI `some` stall time while the job held its worker slot (from its admit event, else its enqueue_ts, to done_ts), " +
  "integrated from the recording's per-interval stall rates: cg_psi_mem_some_rate (the worker cgroup), psi_mem_some_rate (host) where the cgroup's is not recorded; " +
  "workers_held = 1 (one slot of the worker per job); retry_count = the job's attempt";

/** How the drill ended, for the header: a drill cut short must not read like a clean run. */
export interface DrillEndedFacts {
  /** up's verdict (ran, stopped_early, interrupted), or rolled_back when a rollback stopped up before it recorded one. */
  verdict: string;
  /** What stopped it (`gate exited (code 143)`); null: ran to its end. */
  reason: string | null;
  at: string | null;
  /** ms from the run's creation to the end. */
  after_ms: number | null;
  pushed: number | null;
  not_packed: number | null;
  /** Of not_packed, pushes that got no reply as the drill stopped: each queued (under the next id) only if Redis ran it; null: not recorded. */
  unanswered_pushes: number | null;
  /** Jobs of phases that start past the drill's end (a --duration shorter than the file), skipped; not in not_packed. null: not recorded. */
  skipped_jobs: number | null;
  /**
   * Jobs up's packer did not push that the gate decided on the run's queue
   * from the run's start to the window's end (a hand-run `drill pack`,
   * another producer): in the decisions and lists beside, not in `pushed`.
   * null: up's pushes not recorded (an older state, no end of up's), or the stream not read.
   */
  other_jobs: number | null;
  other_job_ids: string[];
  /** Why pushed and not_packed are null, as the `ended:` line says it (n/a, never dropped); null: they are known. */
  packed_unknown: string | null;
  /** Why other_jobs is null, as the `ended:` line says it; null: known, or the report's queue is not the run's (nothing to tell apart). */
  other_jobs_unknown: string | null;
  /** A rollback of the run, when one ran: the first one (it took the drill over), whatever ran after it. */
  rolled_back_at: string | null;
  /** When the run's first rollback started (it recorded at rolled_back_at, or has not finished); null: no rollback started. */
  rollback_started_at: string | null;
  /** The latest rollback, when a later one ran (again after an exit 4, or a re-drain); null: only the first. */
  last_rollback_at: string | null;
  /** Drains of jobs pushed after the rollback (a given Redis that outlives the drill); they do not move when it ended. */
  redrains: Array<{ at: string; drained: number | null }>;
  /** A rollback that took the drill over and recorded nothing yet: what finishes it. Absent: none unfinished. */
  unfinished?: string;
}

/** When a rollback that took the drill over and has recorded nothing yet (still running, or interrupted) started; null: none such. */
function unfinishedRollbackStart(drill: ReportInputs["drill"]): string | null {
  if (!drill || drill.phase !== "rolling_back" || (drill.rollbackAt ?? null) !== null) return null;
  return drill.rollbackStartedAt ?? null;
}

/**
 * The drill state's end record → the header's facts; null when nothing says how it ended.
 * `notUps`: of the jobs decided during the run, those not among up's pushes (null: not known).
 */
/**
 * Text as a code span, whatever backticks it holds: the fence one longer than
 * its longest run (CommonMark), so that markdown keeps a command whole (QA AF:
 * a state dir with a backtick cut the rollback command in two).
 */
export function codeSpan(text: string): string {
  const longest = Math.max(0, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = "`".repeat(longest + 1);
  return longest === 0 ? `${fence}${text}${fence}` : `${fence} ${text} ${fence}`;
}

/** Which jobs decided on the run's queue up did not push: their ids, or why that is not known; null: the report is not on the run's queue. */
type NotUps = (pushedIds: readonly string[] | undefined) => { ids: string[] } | { unknown: string } | null;

function drillEndedFacts(drill: NonNullable<ReportInputs["drill"]>, notUps: NotUps): DrillEndedFacts | null {
  // "N s into the drill" as up says it: from the schedule's clock start (gate and worker ready). A run
  // that stopped before it (or one recorded before up waited for readiness) says when, not how far in.
  const startedAt = drill.scheduleStartedAt ?? null;
  const created = startedAt === null ? NaN : Date.parse(startedAt);
  const after = (at: string | null) => {
    const ms = at === null ? NaN : Date.parse(at) - created;
    return Number.isFinite(ms) ? Math.max(0, ms) : null;
  };
  const rollbackAt = drill.rollbackAt ?? null;
  const rollbacks = { rolled_back_at: rollbackAt, rollback_started_at: drill.rollbackStartedAt ?? null, last_rollback_at: drill.lastRollbackAt ?? null, redrains: drill.redrains ?? [] };
  // A rollback took the drill over and recorded nothing yet: still at it, or interrupted (QA: the report said only "phase rolling_back").
  const takeover = unfinishedRollbackStart(drill);
  const unfinished =
    takeover !== null
      ? { unfinished: `a rollback started at ${takeover} has not finished (still running, or interrupted): ${codeSpan(drill.rollbackCommand)} again finishes it` }
      : {};
  // up's counts of what it packed, and the jobs it did not: each known, or n/a with why (QA: an up-ended.json not
  // taken dropped them from the ended: line without a word).
  const packing = (counts: DrillEnded | null, whyNone = "up died without recording it") => {
    const packedUnknown = counts === null ? whyNone : counts.pushed === null || counts.notPacked === null ? "up did not count them" : null;
    const others = notUps(counts?.pushedIds);
    const ids = others !== null && "ids" in others ? others.ids : null;
    return {
      pushed: counts?.pushed ?? null,
      not_packed: counts?.notPacked ?? null,
      unanswered_pushes: counts?.unansweredPushes ?? null,
      skipped_jobs: counts?.skippedJobs ?? null,
      other_jobs: ids?.length ?? null,
      other_job_ids: ids ?? [],
      packed_unknown: packedUnknown,
      // Without up's record, its ids are not known for the same reason as its counts.
      other_jobs_unknown: others === null || "ids" in others ? null : counts === null ? whyNone : others.unknown,
    };
  };
  const ended = drill.ended ?? null;
  if (ended) {
    return { verdict: ended.verdict, reason: ended.reason, at: ended.at, after_ms: after(ended.at), ...packing(ended), ...rollbacks, ...unfinished };
  }
  // No verdict from up, and a rollback: it stopped up mid-drill (or up had died).
  if (rollbackAt !== null) {
    // up wrote what it had packed beside its logs as the rollback stopped it.
    const whyNone = drill.upEndedNotTaken
      ? "its end record was not taken: see notes"
      : "up wrote no end record as the rollback stopped it: gone by then, or an older drill";
    return {
      verdict: "rolled_back",
      reason: "a rollback took the drill over before up recorded an end",
      at: rollbackAt,
      after_ms: after(rollbackAt),
      ...packing(drill.upEndedAtRollback ?? null, whyNone),
      ...rollbacks,
    };
  }
  if (takeover !== null) {
    return { verdict: "rolling_back", reason: "a rollback took the drill over before up recorded an end", at: takeover, after_ms: after(takeover), ...packing(null, "read once the rollback finishes"), ...rollbacks, ...unfinished };
  }
  // Still "running" on disk with its up gone: the packer died mid-drill (SIGKILL, a reboot); when is not known.
  if (drill.upGone) {
    return {
      verdict: "up_gone",
      reason: `drill up (pid ${drill.upGone.pid}) is gone and recorded no end (killed, or the host rebooted): the packing stopped then; what it started may still run until a rollback`,
      at: null,
      after_ms: null,
      ...packing(null),
      rolled_back_at: null,
      rollback_started_at: null,
      last_rollback_at: null,
      redrains: [],
    };
  }
  return null;
}

export interface Peak {
  value: number | null;
  ts: string | null;
}

export interface DecisionRow {
  reason: string;
  count: number;
  /** Share of decisions (admit, reject_*, dead) in the window; null for rows that are not decisions. */
  sharePct: number | null;
  /** e.g. `mode=reject_all 3, psi=missing 1, route=dead 2`; `cause not_json 2` for dead. */
  note: string;
}

export interface RejectLine {
  ts: string | null;
  line: string;
}

export interface JobCost {
  job: string;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  retry_count: number | null;
  stall_ms: number | null;
  /** Share of the job's slot time the recording covers (1: all of it). */
  stall_coverage: number | null;
  workers_held: number;
  cost_proxy: number | null;
}

/** One row of "where the jobs are": a list of the queue that holds jobs. */
export interface JobListRow {
  key: string;
  role: string;
  /** The gate, worker or host class the key names. */
  holder: string | null;
  count: number | null;
  /** processing/working: the holder's heartbeat exists (at the export, for an export); null for other lists. */
  holder_alive: boolean | null;
  note: string;
}

/** The most lost ids a report lists by id (not_found); not_found_count says how many there are. */
export const NOT_FOUND_LISTED = 1000;

export interface JobsWhere {
  rows: JobListRow[];
  /** Entries over every list (null when a list could not be read). */
  total: number | null;
  /** Entries held by a gate or worker whose heartbeat is gone. */
  held_by_dead: number;
  /** `<q>:seq`: job ids 1..N were issued by pack. */
  ids_issued: number | null;
  /** Distinct job ids over the lists. */
  distinct_ids: number;
  /**
   * Issued ids (1..ids_issued) on no list: lost, or another producer that died
   * between INCR and RPUSH. The first NOT_FOUND_LISTED of them; not_found_count is all.
   */
  not_found: string[];
  /** How many issued ids are on no list (null when ids issued or a list is unreadable). */
  not_found_count: number | null;
  /** Ids on more than one list. */
  duplicates: Array<{ id: string; keys: string[] }>;
  /** Entries without a job id (dead payloads that never were jobs). */
  without_id: number;
}

/** One `<q>:events` mode entry, its stored figures read into fields; a field the entry lacks is null. */
export interface ModeFlip {
  ts: string | null;
  mode: string | null;
  /** The mode it replaced; `unset` when `<q>:mode` was never set. */
  previous: string | null;
  /** Set to the mode already there: nothing flipped. null when the entry names no previous mode. */
  unchanged: boolean | null;
  /** `gate mode admit --force` over the PSI refusal. */
  forced: boolean;
  /** Host memory PSI some avg10 when it was set; null when it was missing or not read. */
  psi: number | null;
  /** Of a forced re-admit, avg60 too (what the refusal may have been over: QA, "forced over PSI" beside avg10 0.99); null otherwise. */
  psi_avg60: number | null;
  /** Who set it (`gate_mode`, `up`, `rollback`); null for an entry that does not say (written before drill recorded it). */
  by: string | null;
}

/** `mode=reject_all previous=admit psi=0.40 forced=1` → fields. */
export function modeFlip(event: Pick<DecisionEvent, "tsMs" | "figures">): ModeFlip {
  const field = (k: string): string | null => new RegExp(`(?:^|\\s)${k}=(\\S+)`).exec(event.figures)?.[1] ?? null;
  const mode = field("mode");
  const previous = field("previous");
  const figure = (k: string): number | null => {
    const text = field(k);
    return text !== null && /^\d+(\.\d+)?$/.test(text) ? Number(text) : null;
  };
  return {
    ts: iso(event.tsMs),
    mode,
    previous,
    unchanged: mode === null || previous === null ? null : mode === previous,
    forced: field("forced") === "1",
    psi: figure("psi"),
    psi_avg60: figure("psi_avg60"),
    by: field("by"),
  };
}

/**
 * The rollback's deny-all (runbook rollback step 1, "Flip admitd to
 * reject_all"): the `<q>:events` mode event that cut admission off last
 * before the run's latest rollback record (state.json rollback.lastAt, else
 * rollback.at: a first rollback that could not reach Redis cut nothing off). A run that ended
 * before its rollback has it after the window, which ends at the run's end.
 */
export interface RollbackDenyAll extends ModeFlip {
  /** Where it falls against the report's window: `after` when the run ended before its rollback. */
  window: "before" | "in" | "after";
}

/**
 * The last mode event at or before the rollback's record that set reject_all
 * over another mode (a repeat, such as rollback's "deny-all again", cut
 * nothing off); a repeat only when no event changed it. rollback writes no
 * marker into the stream: the rollback's record bounds it, and its deny-all
 * is its first step, seconds before that record.
 */
export function rollbackDenyAll(events: readonly DecisionEvent[], runStartMs: number, rollbackAtMs: number): ModeFlip | null {
  let cut: ModeFlip | null = null;
  let repeat: ModeFlip | null = null;
  for (const e of events) {
    if (e.reason !== "mode" || e.tsMs === null || e.tsMs < runStartMs || e.tsMs > rollbackAtMs) continue;
    const flip = modeFlip(e);
    // A flip that names another hand (gate mode, a hand-run rollback --queue: QA S 7) is not the rollback's, and
    // the rollback's own after it cut nothing off; an event from before `by` was recorded may be.
    if (flip.mode === "reject_all" && flip.by !== null && flip.by !== "rollback") continue;
    if (flip.mode !== "reject_all") {
      cut = null;
      repeat = null;
    } else if (flip.unchanged === true) {
      repeat ??= flip;
    } else {
      cut = flip;
      repeat = null;
    }
  }
  return cut ?? repeat;
}

export interface Report {
  label: string;
  /** When this report was made (now), whatever the source; the figures' moment is window.to. */
  generated_at: string;
  drill: {
    name: string;
    run_id: string | null;
    drill_file: string | null;
    created_at: string | null;
    phase: string | null;
    queue: string | null;
    /** How the drill ended: up's verdict, or a rollback that took it over; null: not known (still running, or an older state). */
    ended: DrillEndedFacts | null;
  } | null;
  queue: string;
  /** live: a running Redis; aof: the drill's embedded Redis restarted on its AOF for this report; export: rollback's file. */
  source: { kind: "live" | "aof" | "export"; where: string };
  /**
   * `from` is the later of `to − since_ms` and the run's start (`run_start`,
   * the state's createdAt), unless --since was given (`clipped_to_run` false):
   * a queue may hold an earlier run's data, and the note is about this run.
   * `to` is now, the export's time, or without --since the run's end
   * (`anchored: run_end`, runEndMs): a report read long after the run still
   * covers it.
   */
  window: { since_ms: number; from: string; to: string; anchored: "now" | "export" | "run_end"; run_start: string | null; clipped_to_run: boolean };
  decisions: { rows: DecisionRow[]; total: number; rejects: number } | null;
  /** `<q>:events` was trimmed (its cap) after the window's start: what the window's stream figures miss; null: the stream holds the whole window. */
  events_trimmed: EventsTrimmed | null;
  first_reject: RejectLine | null;
  last_reject: RejectLine | null;
  /** Every mode event (`gate mode`, up, rollback's deny-all) in the window, repeats included: the lever's history. */
  mode_flips: ModeFlip[] | null;
  /** When the run's rollback cut admission off, also outside the window; null: no rollback recorded, or no reject_all event of it read. */
  rollback_deny_all: RollbackDenyAll | null;
  first_token: {
    /** Admit decisions in the window (FIRST_TOKEN_COUNTED says what each figure counts). */
    admitted: number | null;
    /** Jobs whose done_ts is in the window, whenever they were admitted. */
    finished: number;
    /** Of finished, those with no admit in the window: admitted before it (not in `admitted`); null: the stream was not read. */
    finished_admitted_earlier: number | null;
    /** The jobs `late` counts over: finished, plus the unfinished jobs admitted in the window (late ≤ judged, whatever `admitted` is). */
    judged: number;
    with_first_token: number;
    p50_ms: number | null;
    p99_ms: number | null;
    max_ms: number | null;
    deadline_ms: { min: number; max: number } | null;
    /** p99 − deadline (the smallest deadline when they differ, `p99_deadline_ms`): positive = over. */
    p99_over_deadline_ms: number | null;
    /** The deadline p99_over_deadline_ms compares with: the one deadline, else the smallest. */
    p99_deadline_ms: number | null;
    /** p99 over the jobs with a first token of (first token − the job's own deadline): positive = over. */
    p99_over_own_deadline_ms: number | null;
    /** "p99 against deadline" in one word, as the text says it (p99DeadlineVerdict); null: nothing timed. */
    p99_deadline_verdict: DeadlineVerdict | null;
    /** Finished late, plus admitted jobs that got no first token before their deadline (late_finished + late_unfinished). */
    late: number;
    late_jobs: string[];
    late_finished: number;
    /** Admitted in the window, not finished, deadline passed without a first token; null: their lists were not read. */
    late_unfinished: number | null;
    /** Of with_first_token, the unfinished jobs' (from `<q>:first_token`); null: not read. */
    unfinished_with_first_token: number | null;
    /**
     * Of late_unfinished, those still without a first token: outside the percentiles, each later than its
     * deadline when it comes (a late first token already counts among with_first_token). null: not read.
     */
    waiting_past_deadline: number | null;
    /** What admitted, finished, judged and late count, in words: the text and md views print the same. */
    counted: typeof FIRST_TOKEN_COUNTED;
  } | null;
  totals: { tokens_out: number | null; retry_count: number | null; jobs_done: number | null; jobs_late: number | null } | null;
  /**
   * Whole drill. The worker adds to tokens_out as it decodes, and a run given
   * back (SIGTERM, launcher gone, a dead worker's list recovered) keeps what it
   * decoded: compute spent, the runbook's retry cost. `decoded` is the stats
   * count, `finished` the sum over every `<q>:done` record, `given_back` the
   * difference: runs given back (run again or drained since), or still running. null when
   * it cannot be told (`unknown_because` says why), never a wrong 0.
   */
  tokens_out_split: TokensOutSplit | null;
  pressure: {
    recording: string | null;
    samples: number;
    peak_psi_mem_some_avg10: Peak;
    peak_psi_mem_some_rate: Peak;
    peak_cg_psi_mem_some_avg10: Peak;
    peak_cg_psi_mem_some_rate: Peak;
    peak_stall_ms_p99: Peak;
    peak_cg_mem_peak: Peak;
    peak_cg_mem_current: Peak;
    /** The smallest deadline_slack_ms: the slack that ran out while queue age looked fine. */
    lowest_deadline_slack_ms: Peak;
    peak_si: Peak;
    /** The sample with the highest stall rate (worker cgroup's or host's), with what sat beside it: the runbook's "idle CPU plus shrinking slack". */
    at_worst_stall: WorstStall | null;
    cg_mem_max: number | "max" | null;
    /** cg_oom_kill (memory.events, v1 memory.oom_control, oom_kill) at the last sample, and how much it rose in the window. */
    cg_oom_kill_end: number | null;
    oom_kills_in_window: number | null;
    /** null: no sample in the window (unknown, as the text's n/a), never [] (none raised). */
    alarms: Array<{ alarm: string; samples: number }> | null;
    /** The first and last sample in the window (ISO); null without one. */
    first_sample: string | null;
    last_sample: string | null;
    /** Decisions in the window before the first sample or after the last (a recording cut short or started late); null without samples or decisions. */
    decisions_outside_recording: number | null;
  };
  retries: { retry_count_total: number | null; nacked_to_retry_in_window: number | null; finished_after_retry: number | null };
  cost_proxy: {
    formula: string;
    stall_ms_source: string;
    jobs: JobCost[];
    total: number | null;
    jobs_costed: number;
    jobs_without_cost: number;
    /** prompt + completion + retries × prompt over every finished job: the part that needs no recording. */
    token_part_total: number | null;
  } | null;
  drain: {
    queue_len: number | null;
    head_job: string | null;
    head_age_ms: number | null;
    drain_len: number | null;
    rejects_in_window: number | null;
    /**
     * Finished jobs per hour while jobs ran (over pace_from → pace_to, not the
     * whole window), and the hours `queue + drain` would take at it; null (the
     * reason in notes) from fewer than 2 finished jobs or a span under 10 s (paceOf).
     */
    done_per_hour: number | null;
    backlog_hours: number | null;
    /**
     * The span the pace is taken over: the first finished job's start (its
     * admit, else its enqueue_ts; not before the window) to the last one's
     * finish. Data only, never now: the same jobs give the same pace whenever
     * and wherever (live, AOF, export) the report is read. null: no job finished.
     */
    pace_from: string | null;
    pace_to: string | null;
  };
  /** Every list of the queue that holds jobs, with counts: "no job lost" checked from the report. */
  jobs_where: JobsWhere | null;
  notes: string[];
}

// ---- small pure helpers -----------------------------------------------------

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export interface WorstStall {
  ts: string;
  /** The larger of cg_psi_mem_some_rate and psi_mem_some_rate (either alone where the other was not read). */
  stall_rate_pct: number;
  source: "worker cgroup" | "host";
  cpu_idle_pct: number | null;
  queue_age_ms: number | null;
  deadline_slack_ms: number | null;
}

function worstStall(samples: readonly WatchSample[]): WorstStall | null {
  let worst: WorstStall | null = null;
  for (const s of samples) {
    // The larger of the two: a worker cgroup at 0 % beside a host at 26 % is the host's moment.
    const cg = s.cg_psi_mem_some_rate;
    const host = s.psi_mem_some_rate;
    const fromCgroup = cg !== null && (host === null || cg >= host);
    const rate = fromCgroup ? cg : host;
    if (rate === null || (worst !== null && rate <= worst.stall_rate_pct)) continue;
    worst = { ts: new Date(s.tsMs).toISOString(), stall_rate_pct: rate, source: fromCgroup ? "worker cgroup" : "host", cpu_idle_pct: s.cpu_idle_pct, queue_age_ms: s.queue_age_ms, deadline_slack_ms: s.deadline_slack_ms };
  }
  return worst;
}

const negated = (p: Peak): Peak => ({ value: p.value === null ? null : -p.value, ts: p.ts });

function peak(samples: readonly WatchSample[], pick: (s: WatchSample) => number | null): Peak {
  let best: WatchSample | null = null;
  let value: number | null = null;
  for (const s of samples) {
    const v = pick(s);
    if (v !== null && (value === null || v > value)) {
      value = v;
      best = s;
    }
  }
  return { value, ts: best ? iso(best.tsMs) : null };
}

/** The gate's stdout line for a stored decision: the one rebuild of it, which `drill watch` prints too (formatRejectEvent). */
export function rejectLine(event: Pick<DecisionEvent, "reason" | "job" | "figures" | "attempt">): string {
  return formatRejectEvent({ reason: event.reason, job: event.job, figures: event.figures, attempt: event.attempt === null ? undefined : String(event.attempt) });
}

/** What tripped a reject_host_pressure, read from its stored figures. */
function hostPressureCause(figures: string): string | null {
  if (/\bmode=reject_all\b/.test(figures)) return "mode=reject_all";
  if (/\bpsi=missing\b/.test(figures)) return "psi=missing";
  if (/\bswap_leak=1\b/.test(figures)) return "swap_leak=1";
  if (/\bhysteresis=1\b/.test(figures)) return "held by hysteresis";
  return null;
}

/** Job ids in numeric order (`2` before `10`); ids that are not numbers after, by text. */
export function byJobId(a: { job: string }, b: { job: string }): number {
  const na = /^\d+$/.test(a.job) ? Number(a.job) : Infinity;
  const nb = /^\d+$/.test(b.job) ? Number(b.job) : Infinity;
  return na !== nb ? na - nb : a.job.localeCompare(b.job);
}

/** `3 × mode=reject_all, 1 × held by hysteresis`: the count first, so a `k=v` cause never runs into it. */
function countNote(counts: Map<string, number>, prefix = ""): string {
  return [...counts.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${n} × ${prefix}${k}`)
    .join(", ");
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

export interface TokensOutSplit {
  decoded: number | null;
  finished: number | null;
  given_back: number | null;
  worker_recovered: number | null;
  unknown_because: string | null;
}

/**
 * tokens_out as the stats count it beside the finished records' sum. The
 * records are whole only when there is one per jobs_done (the done script
 * pushes one and counts it in one step): fewer means some were skipped or
 * the export is short, and the difference would be wrong.
 */
export function tokensOutSplit(stats: Record<string, string>, done: readonly DoneEntry[] | null): TokensOutSplit {
  const decoded = statCount(stats, "tokens_out");
  const jobsDone = statCount(stats, "jobs_done");
  const workerRecovered = statCount(stats, "worker_recovered");
  const split = (finished: number | null, why: string | null): TokensOutSplit => ({
    decoded,
    finished,
    given_back: why === null && decoded !== null && finished !== null ? decoded - finished : null,
    worker_recovered: workerRecovered,
    unknown_because: why,
  });
  if (done === null) return split(null, "the finished records could not be read");
  const missing = done.filter((d) => d.tokensOut === null).length;
  const finished = missing > 0 ? null : done.reduce((sum, d) => sum + d.tokensOut!, 0);
  if (missing > 0) return split(null, `${missing} finished record(s) without tokens_out`);
  if (decoded === null) return split(finished, "the stats' tokens_out is not a count");
  if (jobsDone === null || jobsDone !== done.length) {
    return split(finished, `${done.length} of the ${jobsDone ?? "?"} finished jobs (stats jobs_done) have a readable record: the rest's tokens are not known`);
  }
  // The worker flushes its count every 100 ms: a report read just after a finish may see the record first.
  if (finished! > decoded) return split(finished, "the stats are behind the finished records (the worker's last tokens not flushed yet)");
  return split(finished, null);
}

/** Counter from the stats hash: absent = never incremented = 0; not a count = null. */
function statCount(stats: Record<string, string>, field: string): number | null {
  const text = stats[field];
  if (text === undefined) return 0;
  return parseCount(text);
}

/** The `<q>:stats` counter of each decision kind whose script writes its stream entry and counts it in one step. */
const STREAM_DECISION_STATS: Readonly<Record<(typeof DECISION_KINDS)[number], string>> = {
  admit: "admitted",
  reject_host_pressure: "reject_host_pressure",
  reject_deadline_slack: "reject_deadline_slack",
  reject_packed_tokens: "reject_packed_tokens",
};

/** Those counters summed: the admits and rejects `<q>:events` ever took; null when one is not a count. */
export function streamDecisionsCounted(stats: Record<string, string>): number | null {
  let sum = 0;
  for (const field of Object.values(STREAM_DECISION_STATS)) {
    const n = statCount(stats, field);
    if (n === null) return null;
    sum += n;
  }
  return sum;
}

/** Figures counted from `<q>:events` in the window (paths in `--format json`): partial when the stream was trimmed within it. */
export const STREAM_FIGURES = [
  "decisions",
  "first_reject",
  "mode_flips",
  "rollback_deny_all",
  "first_token.admitted",
  "first_token.late_unfinished",
  "retries.nacked_to_retry_in_window",
  "drain.rejects_in_window",
  "pressure.decisions_outside_recording",
] as const;

export interface EventsTrimmed {
  /** Where `<q>:events` starts now: its first entry's time (ISO) and id; null: it holds no entry. */
  stream_starts: string | null;
  first_entry_id: string | null;
  /** Entries of every kind the cap removed (XINFO STREAM entries-added − XLEN); null: not known (Redis before 7, an export). */
  entries_trimmed: number | null;
  /** Admits and rejects `<q>:stats` counted beyond those the stream holds: over the queue's whole life, not windowed; null: not known. */
  decisions_trimmed: number | null;
  /** The figures that count from the stream, and so miss the window's part before stream_starts. */
  partial: readonly string[];
}

/**
 * Whether the cap on `<q>:events` (EVENTS_MAXLEN, oldest first) removed
 * entries the window reaches back to: the stream now starts after the
 * window's start, and it took more than it holds (entries-added, else
 * `<q>:stats`'s admits and rejects beyond the stream's own; the events read
 * must then be the whole stream, which they are whenever it starts after the
 * window's start). null: nothing trimmed, or only before the window.
 */
export function eventsTrimmed(extent: EventStreamExtent | null | undefined, events: readonly DecisionEvent[] | null, fromMs: number): EventsTrimmed | null {
  if (!extent || events === null) return null;
  const startsMs = extent.firstId === null ? null : streamIdMs(extent.firstId);
  if (startsMs !== null && startsMs <= fromMs) return null;
  const entriesTrimmed = extent.entriesAdded === null ? null : Math.max(0, extent.entriesAdded - extent.length);
  // Up to the moment the counters were read: a live gate adds entries and counts alike after it.
  const lastId = extent.lastId;
  const inStream = events.filter((e) => Object.hasOwn(STREAM_DECISION_STATS, e.reason) && (lastId === null || streamIdAtMost(e.id, lastId))).length;
  const decisionsTrimmed = extent.decisionsAdded === null ? null : Math.max(0, extent.decisionsAdded - inStream);
  if ((entriesTrimmed ?? decisionsTrimmed ?? 0) === 0) return null;
  return {
    stream_starts: iso(startsMs),
    first_entry_id: extent.firstId,
    entries_trimmed: entriesTrimmed,
    decisions_trimmed: decisionsTrimmed,
    partial: STREAM_FIGURES,
  };
}

/** The note of a trimmed stream: how much, where it starts now, what is partial and what is whole. */
function eventsTrimmedNote(t: EventsTrimmed, queue: string, fromMs: number): string {
  const entries = t.entries_trimmed === null ? "" : `${t.entries_trimmed} older entr${t.entries_trimmed === 1 ? "y" : "ies"} (every kind) trimmed`;
  const decisions = t.decisions_trimmed === null ? "" : `${t.decisions_trimmed} admit/reject decision(s) ${queue}:stats counts are not in it (over the queue's whole life: some may predate the window)`;
  const how = [entries, decisions].filter(Boolean).join("; ") || "older entries trimmed";
  return (
    `${queue}:events was trimmed by its cap (about the last ${EVENTS_MAXLEN} entries are kept): it now starts at ${t.stream_starts ?? "no entry"}${t.first_entry_id === null ? "" : ` (${t.first_entry_id})`}, ` +
    `after the window's start ${iso(fromMs)}; ${how}. Partial, counted from ${t.stream_starts ?? "then"} on only: decision counts and shares, first reject, mode flips, admitted in window, ` +
    `late unfinished jobs, nacked to retry, rejects in window, decisions outside the recording (events_trimmed in --format json). Whole: the ${queue}:stats totals, the finished jobs, where the jobs are`
  );
}

/**
 * Stall time (ms) over (startMs, endMs]: each sample's rate (% of its interval
 * stalled) covers the interval since the previous sample, so the integral is
 * exact for what the sidecar measured. Returns null when no recorded interval
 * overlaps the job. `samples` oldest first (parseRecording sorts them): only
 * the intervals of the job's slot are visited, found by bisection, not the
 * whole recording per job (QA: a day's recording and 20 000 jobs took 16 s).
 */
export function stallMsBetween(samples: readonly WatchSample[], startMs: number, endMs: number): { stallMs: number; coverage: number } | null {
  if (endMs <= startMs) return null;
  let stallMs = 0;
  let coveredMs = 0;
  // The first sample after startMs: the intervals ending at or before it overlap nothing.
  let lo = 0;
  let hi = samples.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (samples[mid]!.tsMs <= startMs) lo = mid + 1;
    else hi = mid;
  }
  for (let i = Math.max(1, lo); i < samples.length; i++) {
    const prev = samples[i - 1]!;
    // From here on every interval starts at or after endMs.
    if (prev.tsMs >= endMs) break;
    const cur = samples[i]!;
    const rate = cur.cg_psi_mem_some_rate ?? cur.psi_mem_some_rate;
    if (rate === null) continue;
    const overlap = Math.min(cur.tsMs, endMs) - Math.max(prev.tsMs, startMs);
    if (overlap <= 0) continue;
    stallMs += (overlap * rate) / 100;
    coveredMs += overlap;
  }
  if (coveredMs === 0) return null;
  return { stallMs: Math.round(stallMs), coverage: Math.round((coveredMs / (endMs - startMs)) * 1000) / 1000 };
}

/**
 * Increase of a cumulative counter over samples, null when none has a value.
 * The first value is a baseline (counted before the window), unless the
 * cgroup was seen absent before it: a new cgroup counts from 0, so kills it
 * has on first sight are in the window. A drop is a recreated cgroup: the new
 * value counts. An unreadable value (cgroup there) keeps the baseline.
 */
function counterIncrease(readings: ReadonlyArray<{ value: number | null; absent: boolean }>): number | null {
  let base: number | null = null;
  let rise = 0;
  let seen = false;
  for (const { value, absent } of readings) {
    if (value === null) {
      if (absent) base = 0;
      continue;
    }
    if (base !== null) rise += counterRise(base, value);
    base = value;
    seen = true;
  }
  return seen ? rise : null;
}

/**
 * OOM kills in the window: the recorded oom_kill readings, then the counter
 * read now when the worker cgroup is still there and the read is later than
 * the last sample (up stops the instant the worker dies, before watch's next
 * sample: the kill that ended the drill is only in the live read). The notes
 * say where the figure came from when the read changes it.
 */
function oomKills(samples: readonly WatchSample[], now: CgroupNow | null, atSetup: OomKillReading | null, fromMs: number, notes: string[]): { end: number | null; inWindow: number | null } {
  // up's reading at setup counts from there when the window holds it: a kill in the drill's first
  // second (the worker's KV overfilling the cgroup) can precede watch's first sample.
  const first = atSetup !== null && atSetup.tsMs >= fromMs && (samples.length === 0 || atSetup.tsMs <= samples[0]!.tsMs) ? [{ value: atSetup.count, absent: false }] : [];
  const readings = [...first, ...samples.map((s) => ({ value: s.cg_oom_kill, absent: s.cg_absent }))];
  const recordedEnd = samples.map((s) => s.cg_oom_kill).filter((v): v is number => v !== null).at(-1) ?? null;
  const recorded = { end: recordedEnd, inWindow: counterIncrease(readings) };
  const lastTs = samples.at(-1)?.tsMs ?? null;
  if (now === null || now.tsMs < fromMs || (lastTs !== null && now.tsMs <= lastTs)) return recorded;
  const at = new Date(now.tsMs).toISOString();
  if (now.oomKill === null) {
    notes.push(`the worker cgroup's oom_kill could not be read at ${at} (${now.file}: ${now.reason ?? "unreadable"}): OOM kills are the recording's, up to its last sample`);
    return recorded;
  }
  if (recorded.inWindow === null) {
    // No recorded reading to count from: the counter alone says kills since the cgroup was made, not in the window.
    notes.push(`OOM kills in the window are n/a: no recorded oom_kill reading to count from; ${now.file} says oom_kill=${now.oomKill} at ${at}`);
    return { end: now.oomKill, inWindow: null };
  }
  const live = { end: now.oomKill, inWindow: counterIncrease([...readings, { value: now.oomKill, absent: false }]) };
  if (live.inWindow !== recorded.inWindow || live.end !== recorded.end) {
    // No sample at all (stopped while waiting): said so, not "(null) said oom_kill=n/a" (QA).
    const recordedText = lastTs === null ? "where the recording has no sample" : `where the recording's last sample (${iso(lastTs)}) said oom_kill=${recorded.end ?? "n/a"}, ${recorded.inWindow} in the window`;
    notes.push(`OOM kills counted to ${at} from ${now.file} read then (oom_kill=${now.oomKill}): ${live.inWindow} in the window, ${recordedText}`);
  }
  return live;
}

/** An admitted job that has not finished, judged against its deadline. */
interface UnfinishedJob {
  id: string;
  deadlineMs: number;
  /** enqueue → the first token, from `<q>:first_token` (else the payload's mark); null: none yet. */
  firstTokenMs: number | null;
  late: boolean;
}

/**
 * The jobs admitted in the window that are not on `<q>:done`, wherever they
 * are now (admitted, working, retry, drained, back on ready). Late: the first
 * token came after enqueue_ts + deadline_ms, or none came and that moment is
 * past `atMs`: when the run's rollback drained them, else the window's end
 * (now for a live run).
 * `read` false: the lists or the first-token hash were not read (older callers, a failed read).
 */
function unfinishedAdmitted(inputs: ReportInputs, events: readonly DecisionEvent[] | null, atMs: number): { jobs: UnfinishedJob[]; unplaced: number; read: boolean } {
  const lists = inputs.unfinished ?? null;
  const firstTokens = inputs.firstTokens ?? null;
  if (events === null || lists === null || firstTokens === null || inputs.done === null) return { jobs: [], unplaced: 0, read: false };
  const finished = new Set(inputs.done.map((d) => d.id).filter((id): id is string => id !== null));
  const admitted = new Set(events.filter((e) => e.reason === "admit" && e.job !== "" && !finished.has(e.job)).map((e) => e.job));
  const timing = new Map<string, JobTiming>();
  for (const t of lists) if (t.enqueueTs !== null && t.deadlineMs !== null && !timing.has(t.id)) timing.set(t.id, t);
  const jobs: UnfinishedJob[] = [];
  let unplaced = 0;
  for (const id of admitted) {
    const t = timing.get(id);
    if (t === undefined) {
      unplaced++;
      continue;
    }
    const dueAt = t.enqueueTs! + t.deadlineMs!;
    // A first token whose run a give-back ended still came: the job was not waiting for one at its deadline.
    const tokenAt = firstTokens[id] ?? t.firstTokenTs ?? t.givenBackFirstTokenTs ?? null;
    jobs.push({
      id,
      deadlineMs: t.deadlineMs!,
      firstTokenMs: tokenAt === null ? null : tokenAt - t.enqueueTs!,
      late: tokenAt === null ? dueAt < atMs : tokenAt > dueAt,
    });
  }
  jobs.sort((a, b) => byJobId({ job: a.id }, { job: b.id }));
  return { jobs, unplaced, read: true };
}

const isDecisionReason = (reason: string) => reason === "admit" || reason === "dead" || reason.startsWith("reject_");

/**
 * Decisions on the queue from before the run was created are another run's
 * (an earlier run on the same queue, or somebody's gate): say whether the
 * window counts them, and that the stats hash, never windowed, may.
 */
function earlierRunNotes(inputs: ReportInputs, runStartMs: number, fromMs: number): string[] {
  if (!Number.isFinite(runStartMs) || inputs.events === null) return [];
  const before = inputs.events.filter((e) => e.tsMs !== null && e.tsMs < runStartMs && isDecisionReason(e.reason));
  if (before.length === 0) return [];
  const run = `run ${inputs.drill?.runId ?? "?"} (created ${new Date(runStartMs).toISOString()})`;
  const counted = before.filter((e) => e.tsMs! >= fromMs).length;
  return [
    counted > 0
      ? `the window reaches before ${run}: ${counted} decision(s) from before it, not this run's, are counted`
      : `${before.length} decision(s) on ${inputs.queue} predate ${run}: not this run's, left out of the window (a --since reaching before it counts them)`,
    `the totals from ${inputs.queue}:stats are not windowed: they may include decisions and jobs from before ${run}`,
  ];
}

/**
 * When the run stopped working, for a window that ends with it: up's
 * recorded end (else the rollback that took it over), or later the last
 * decision or finish before any rollback (gate and worker run on for a while
 * after up returns, finishing what was admitted). A run over (or its up
 * gone) without a record: its last decision or finish. null: the run still
 * runs, or nothing dates its end (now).
 */
function runEndMs(inputs: Pick<ReportInputs, "drill" | "events" | "done">, runStartMs: number): number | null {
  const drill = inputs.drill;
  if (!drill) return null;
  const parse = (at: string | null | undefined) => {
    const ms = at == null ? NaN : Date.parse(at);
    return Number.isFinite(ms) ? ms : null;
  };
  const recorded = parse(drill.ended?.at ?? drill.rollbackAt ?? drill.rollbackStartedAt);
  const runs = drill.phase === null || drill.phase === "starting" || drill.phase === "running";
  if (recorded === null && runs && !drill.upGone) return null;
  const rollbackMs = parse(drill.rollbackAt) ?? Infinity;
  // A loop, not Math.max(...): the stream and `<q>:done` may hold more entries than a call takes arguments.
  let end = recorded ?? -Infinity;
  const seen = (t: number | null) => {
    if (t !== null && t >= runStartMs && t <= rollbackMs && t > end) end = t;
  };
  for (const e of inputs.events ?? []) if (isDecisionReason(e.reason)) seen(e.tsMs);
  for (const d of inputs.done ?? []) seen(doneTime(d));
  return Number.isFinite(end) ? end : null;
}

/** The run's decisions the window leaves out (a --since shorter than the run, or a run longer than the window): counted, so a 0 is not read as "nothing happened". */
function outsideWindowNote(inputs: ReportInputs, runStartMs: number, fromMs: number, toMs: number, sinceGiven: boolean): string | null {
  if (!Number.isFinite(runStartMs) || inputs.events === null) return null;
  const runs = inputs.events.filter((e) => e.tsMs !== null && e.tsMs >= runStartMs && isDecisionReason(e.reason)).map((e) => e.tsMs!);
  const before = runs.filter((t) => t < fromMs).length;
  const after = runs.filter((t) => t > toMs).length;
  if (before + after === 0) return null;
  const where = [before > 0 ? `${before} before its start` : "", after > 0 ? `${after} after its end` : ""].filter(Boolean).join(", ");
  const why = sinceGiven ? ` (a --since window ends now, or at the export; without --since the window is the run's last ${DEFAULT_REPORT_SINCE} up to the run's end)` : "";
  return `${before + after} of run ${inputs.drill?.runId ?? "?"}'s ${runs.length} decision(s) fall outside the window (${where}): not counted${why}`;
}

/**
 * The jobs decided on the queue from the run's start to `untilMs` that are
 * not among up's pushes, by job id: what arrived besides up's packing (a
 * hand-run `drill pack`, another producer). null: the pushes or the stream unknown.
 */
function jobsNotPushedBy(pushedIds: readonly string[] | undefined, events: readonly DecisionEvent[] | null, runStartMs: number, untilMs: number): { ids: string[] } | { unknown: string } {
  if (pushedIds === undefined) return { unknown: "up recorded no pushed ids: an older drill" };
  if (events === null) return { unknown: "the decision stream was not read" };
  if (!Number.isFinite(runStartMs)) return { unknown: "the run's start is not recorded" };
  const ups = new Set(pushedIds);
  const others = new Set<string>();
  for (const e of events) {
    if (isDecisionReason(e.reason) && e.job !== "" && e.tsMs !== null && e.tsMs >= runStartMs && e.tsMs <= untilMs && !ups.has(e.job)) others.add(e.job);
  }
  return { ids: [...others].sort((a, b) => byJobId({ job: a }, { job: b })) };
}

export function doneTime(d: DoneEntry): number | null {
  return d.doneTs ?? d.firstTokenTs ?? null;
}

/**
 * When a finished job started holding its worker slot: its last admit at or
 * before its finish (a retried job was admitted again), else its enqueue_ts.
 */
function slotStart(d: DoneEntry, admitAt: ReadonlyMap<string, number[]>): number | null {
  const end = doneTime(d);
  const admits = d.id === null ? [] : (admitAt.get(d.id) ?? []).filter((t) => end === null || t <= end);
  return admits.length > 0 ? Math.max(...admits) : d.enqueueTs;
}

/** Hours to 2 decimals, a smaller figure to 2 significant digits: jobs waiting never round to an empty queue's 0. */
function roundHours(hours: number): number {
  return hours >= 0.01 ? Math.round(hours * 100) / 100 : Number(hours.toPrecision(2));
}

export type DeadlineVerdict = "over" | "within";

/** A time against a deadline (positive: past it): `over`, or `within` (on the dot is in time). */
export const againstDeadline = (overMs: number): DeadlineVerdict => (overMs > 0 ? "over" : "within");

/** "p99 against deadline": the verdict, and what decides it, for the text's words and --format json's p99_deadline_verdict alike. */
export interface P99DeadlineJudgement {
  /** null: nothing timed (no first token, none past its deadline waiting for one). */
  verdict: DeadlineVerdict | null;
  /** The p99 of the jobs with a first token against the deadline (the smallest, when they differ); null: no p99. */
  p99: DeadlineVerdict | null;
  /** Admitted jobs past their deadline still without a first token (not read: 0). */
  waiting: number;
  /** The jobs timed: those with a first token, plus the waiting ones (each later than its deadline, if it ever gets one). */
  timed: number;
  /**
   * What decides: the p99 (none waiting); the waiting jobs alone (no job has a
   * first token); the waiting jobs, more than 1 % of those timed (they put the
   * p99 past the deadline whatever the others say); the p99, the waiting jobs under 1 %.
   */
  by: "p99" | "waiting_only" | "waiting_over_1pct" | "p99_waiting_under_1pct";
}

/**
 * Jobs past their deadline still without a first token get it later than the
 * deadline, if ever: past 1 % of the jobs timed they put the p99 over it
 * whatever the ones with a token say (QA AD: "within, 1272 ms to spare" beside
 * 3 of 21 late), and with no token at all the verdict is theirs alone (QA AE:
 * n/a beside "3 of 3 judged" late). A job whose first token came late is timed
 * once, among those with one (QA AE: "4 of 6" of 5 jobs).
 */
export function p99DeadlineVerdict(ft: { with_first_token: number; waiting_past_deadline: number | null; p99_over_deadline_ms: number | null }): P99DeadlineJudgement {
  const p99 = ft.p99_over_deadline_ms === null ? null : againstDeadline(ft.p99_over_deadline_ms);
  const waiting = ft.waiting_past_deadline ?? 0;
  const timed = ft.with_first_token + waiting;
  if (waiting === 0) return { verdict: p99, p99, waiting, timed, by: "p99" };
  if (ft.with_first_token === 0) return { verdict: "over", p99, waiting, timed, by: "waiting_only" };
  if (waiting * 100 > timed) return { verdict: "over", p99, waiting, timed, by: "waiting_over_1pct" };
  return { verdict: p99, p99, waiting, timed, by: "p99_waiting_under_1pct" };
}

/** One job's time is a latency, not a rate (QA: 3308.8/h from the one job of an up stopped 7 s in). */
export const PACE_MIN_JOBS = 2;
/**
 * Under about one job's deadline (the runbook's is 8 s) the finished jobs are
 * one packed batch the worker ran together, and an hourly rate from it is
 * that batch's latency turned upside down, not a drain pace.
 */
export const PACE_MIN_SPAN_MS = 10_000;
/** No finish for this long while jobs wait: the pace is history, and the notes say so. */
export const PACE_STALE_MS = 60_000;

interface Pace {
  fromMs: number | null;
  toMs: number | null;
  perHour: number | null;
  /** Why perHour is null (for the notes); null when there is a pace. */
  naReason: string | null;
}

/**
 * Finished jobs per hour, over the span they were worked: from the first
 * one's slot start (not before the window: a sliding window counts its own
 * part) to the last one's finish. It ends at the last finish, not now nor the
 * last event, for live and finished drills alike: after it the drill stopped
 * (up returned, rollback's deny-all and the rejects that follow it) or the
 * worker had nothing to do, and a span running on would make the figure
 * depend on when the report is read. It starts at work, not at the run's
 * creation: setup and a phase's `at` offset are not drain time.
 * Not over the window, on purpose: the runbook's one-hour drain math check
 * asks whether `queue + drain` clears within the hour at the rate the worker
 * finishes jobs when it has them; the idle minutes of a window (before the
 * pack, after the last finish) would read as a slower worker, and 2 jobs in
 * a 15 min window as 8/h however fast they ran. The report labels it so.
 */
function paceOf(jobs: ReadonlyArray<{ start: number | null; end: number }>, windowFromMs: number): Pace {
  if (jobs.length === 0) return { fromMs: null, toMs: null, perHour: null, naReason: "no job finished in the window" };
  const starts = jobs.map((j) => j.start).filter((t): t is number => t !== null);
  // Without any job's start (no admit, no enqueue_ts) the window's start is the best bound.
  const firstStart = extentOf(starts)?.min ?? null;
  const fromMs = Math.max(windowFromMs, firstStart ?? windowFromMs);
  const toMs = extentOf(jobs.map((j) => j.end))!.max;
  const spanMs = toMs - fromMs;
  const span = `${(Math.max(spanMs, 0) / 1000).toFixed(1)} s`;
  if (jobs.length < PACE_MIN_JOBS) {
    // Its start clipped to the window is said so (QA AE: 1.3 s "from its start" for a job that ran 9.5 s, begun before the window).
    const clipped = firstStart === null || firstStart < windowFromMs;
    const from = clipped ? "from the window's start" : "from its start";
    return { fromMs, toMs, perHour: null, naReason: `only ${jobs.length} job finished in the window (${span} ${from} to its finish): one job's time is a latency, not a rate (a pace needs at least ${PACE_MIN_JOBS})` };
  }
  if (spanMs < PACE_MIN_SPAN_MS) {
    return { fromMs, toMs, perHour: null, naReason: `the ${jobs.length} finished jobs span ${span} from the first one's start to the last one's finish, under ${PACE_MIN_SPAN_MS / 1000} s: one batch, not a rate to extrapolate to hours` };
  }
  return { fromMs, toMs, perHour: Math.round(((jobs.length * 3_600_000) / spanMs) * 10) / 10, naReason: null };
}

const ROLE_TEXT: Record<string, string> = {
  ready: "ready, waiting for a gate",
  processing: "being decided by gate",
  admitted: "admitted, waiting for the worker",
  working: "held by worker",
  done: "finished",
  retry: "nacked to host class",
  dead: "dead (malformed, or past the retry budget)",
  drain: "rollback's drain",
};

/** The lists that hold jobs, their counts, who holds them and whether it is alive; and the ids against `<q>:seq`. */
function jobsWhere(inputs: ReportInputs, notes: string[]): JobsWhere | null {
  const places = inputs.jobPlaces;
  if (places === undefined || places === null) return null;
  const when = inputs.source.kind === "export" ? " at the export" : "";
  const rows = places.lists.map((list): JobListRow => {
    let note = ROLE_TEXT[list.role] ?? list.role;
    if (list.holder !== null) note += ` ${list.holder}`;
    if (list.holderExitedPid != null && list.count !== 0) {
      note += `: DEAD, worker pid ${list.holderExitedPid} exited (its heartbeat ${inputs.queue}:workers:${list.holder} runs out by itself); a running worker moves these jobs back to ${inputs.queue}:admitted, else rollback drains them`;
    } else if (list.holderAlive === false && list.count !== 0) {
      note +=
        list.role === "processing"
          ? `: DEAD, heartbeat ${inputs.queue}:gates:${list.holder} gone${when}; a running gate moves these jobs back to ${inputs.queue}, else rollback drains them`
          : `: DEAD, heartbeat ${inputs.queue}:workers:${list.holder} gone${when}; a running worker moves these jobs back to ${inputs.queue}:admitted, else rollback drains them`;
    } else if (list.holderAlive === false) {
      note += `: heartbeat gone${when}`;
    } else if (list.holderAlive === true) {
      note += ": alive";
    }
    if (list.count === null) note += " (not a list: unreadable)";
    return { key: list.key, role: list.role, holder: list.holder, count: list.count, holder_alive: list.holderAlive, note };
  });
  const total = places.lists.some((l) => l.count === null) ? null : places.lists.reduce((sum, l) => sum + l.count!, 0);
  const heldByDead = places.lists.filter((l) => l.holderAlive === false).reduce((sum, l) => sum + (l.count ?? 0), 0);
  const where = new Map<string, string[]>();
  let withoutId = 0;
  for (const list of places.lists) {
    for (const id of list.ids ?? []) {
      if (id === null) withoutId++;
      else where.set(id, [...(where.get(id) ?? []), list.key]);
    }
  }
  const notFound: string[] = [];
  let notFoundCount: number | null = null;
  if (places.seq !== null && places.lists.every((l) => l.ids !== null)) {
    // Counted from the ids that are there, not by walking 1..seq: a seq of 10^12 (another producer's, or a
    // typo) is a count to say, not a loop or a list of that many ids to build.
    const seq = places.seq;
    let issuedAndThere = 0;
    // An id is one seq issued when it reads as a seq would (parseSeq): "007" is not job 7.
    for (const id of where.keys()) {
      const n = parseSeq(id);
      if (n !== null && n >= 1 && n <= seq) issuedAndThere++;
    }
    notFoundCount = seq - issuedAndThere;
    // Each step lists an id or passes one that is there: at most NOT_FOUND_LISTED + where.size steps.
    for (let id = 1; id <= seq && notFound.length < Math.min(NOT_FOUND_LISTED, notFoundCount); id++) if (!where.has(String(id))) notFound.push(String(id));
  }
  const duplicates = [...where].filter(([, keys]) => keys.length > 1).map(([id, keys]) => ({ id, keys }));
  if (places.seq === null) notes.push(`${inputs.queue}:seq ${places.seqProblem ?? "unreadable"}: ids issued are n/a, lost ids not checked`);
  if (heldByDead > 0) notes.push(`${heldByDead} job(s) are held by a gate or worker whose heartbeat is gone or whose process exited (see "Where the jobs are")`);
  if (notFoundCount !== null && notFoundCount > 0) {
    // drill's pack and up take the id and queue the job in one script (a re-send takes no second id):
    // an id on no list left the lists, or was taken by a producer that INCRs and pushes in two steps.
    notes.push(
      `${notFoundCount} job id(s) issued by ${inputs.queue}:seq are on no list of the queue: lost (drill pack and drill up take an id only with its push), ` +
        `or taken by another producer that died between its INCR and its RPUSH`,
    );
  }
  return { rows, total, held_by_dead: heldByDead, ids_issued: places.seq, distinct_ids: where.size, not_found: notFound, not_found_count: notFoundCount, duplicates, without_id: withoutId };
}

// ---- the builder ------------------------------------------------------------

export interface WindowOptions {
  /** --since was given: the window is what it says, also before the run started. */
  sinceGiven?: boolean;
  /** When the report is made (generated_at); default the clock now. The figures' moment is `nowMs`. */
  generatedAtMs?: number;
}

/** How far a sample may sit from a decision and still be said to cover it: a sidecar samples every second or so. */
const COVERAGE_SLACK_MS = 2_000;

/**
 * Which part of the window the recording covers, and how many decisions fall
 * outside it (QA: a recording cut short read as a calm drill, no PSI and no
 * alarm, beside reject_host_pressure psi=17.53 in the same report).
 */
export function recordingCoverage(
  samples: readonly Pick<WatchSample, "tsMs">[],
  events: readonly Pick<DecisionEvent, "reason" | "tsMs">[] | null,
): Pick<Report["pressure"], "first_sample" | "last_sample" | "decisions_outside_recording"> {
  const span = extentOf(samples.map((s) => s.tsMs).filter((t): t is number => t !== null));
  if (span === null) return { first_sample: null, last_sample: null, decisions_outside_recording: null };
  const { min: first, max: last } = span;
  const decided = events?.filter((e) => isDecisionReason(e.reason)) ?? null;
  const outside = decided === null || decided.length === 0 ? null : decided.filter((e) => e.tsMs !== null && (e.tsMs < first - COVERAGE_SLACK_MS || e.tsMs > last + COVERAGE_SLACK_MS)).length;
  return { first_sample: iso(first), last_sample: iso(last), decisions_outside_recording: outside };
}

export function buildReport(inputs: ReportInputs, nowMs: number, sinceMs: number, options: WindowOptions = {}): Report {
  // The run's start bounds a report on the run's own queue only: another queue
  // (report --queue) holds no data of the run, and clipping would hide its own.
  const runsQueue = inputs.drill?.queue ?? null;
  const otherQueue = runsQueue !== null && runsQueue !== inputs.queue;
  const createdAt = otherQueue ? null : (inputs.drill?.createdAt ?? null);
  const runStartMs = createdAt === null ? NaN : Date.parse(createdAt);
  const ofRun = Number.isFinite(runStartMs) && options.sinceGiven !== true;
  // Without --since the window is the run's last `since`, whenever it is read: it ends when the run did.
  const runEnd = ofRun ? runEndMs(inputs, runStartMs) : null;
  const toMs = runEnd === null ? nowMs : Math.min(nowMs, runEnd);
  const askedFromMs = toMs - sinceMs;
  const clippedToRun = ofRun && runStartMs > askedFromMs;
  const fromMs = clippedToRun ? runStartMs : askedFromMs;
  const notes: string[] = [...inputs.gatherNotes];
  if (otherQueue) notes.push(`queue ${inputs.queue} is not run ${inputs.drill?.runId ?? "?"}'s queue (${runsQueue}): the window is not clipped to the run`);
  notes.push(...earlierRunNotes(inputs, runStartMs, fromMs));
  // Bounded above by the run's end only: a done_ts a little past now (another clock) is still in.
  const untilMs = runEnd ?? Infinity;
  const inWindow = (ts: number | null) => ts !== null && ts >= fromMs && ts <= untilMs;
  const outside = outsideWindowNote(inputs, runStartMs, fromMs, untilMs, options.sinceGiven === true);
  if (outside !== null) notes.push(outside);

  const events = inputs.events === null ? null : inputs.events.filter((e) => inWindow(e.tsMs));
  // From the run's first rollback on, samples measure its teardown, not the drill: the worker killed
  // (CPU idle), its jobs given back (their slack, with no first token again) (QA: a page and -2756 ms).
  const rollbackFromMs = inputs.drill?.rollbackStartedAt == null ? Infinity : Date.parse(inputs.drill.rollbackStartedAt);
  const windowed = inputs.recording === null ? [] : inputs.recording.samples.filter((s) => inWindow(s.tsMs));
  const samples = windowed.filter((s) => !(s.tsMs! >= rollbackFromMs));
  if (samples.length < windowed.length) {
    notes.push(`${windowed.length - samples.length} sample(s) from the rollback's start (${iso(rollbackFromMs)}) on left out: they measure its teardown (the worker killed, its jobs given back), not the drill`);
  }

  let done: DoneEntry[] | null = null;
  if (inputs.done !== null) {
    const undated = inputs.done.filter((d) => doneTime(d) === null).length;
    if (undated > 0) notes.push(`${undated} finished job record(s) carry no done_ts: counted as in the window`);
    done = inputs.done.filter((d) => doneTime(d) === null || inWindow(doneTime(d)));
  }

  // Decisions by reason
  let decisions: Report["decisions"] = null;
  let firstReject: RejectLine | null = null;
  let lastReject: RejectLine | null = null;
  let modeFlips: Report["mode_flips"] = null;
  let rejectsInWindow: number | null = null;
  let retriedInWindow: number | null = null;
  if (events !== null) {
    const counts = new Map<string, number>();
    const notesByReason = new Map<string, Map<string, number>>();
    const noteFor = (reason: string) => notesByReason.get(reason) ?? notesByReason.set(reason, new Map()).get(reason)!;
    modeFlips = [];
    const rejects: DecisionEvent[] = [];
    retriedInWindow = 0;
    // An entry with no reason (written by hand, or by something else than drill) is no decision of any kind:
    // counted apart and said, as a record that is not JSON is (QA: it showed as a blank row).
    let noReason = 0;
    for (const e of events) {
      if (e.reason === "") {
        noReason++;
        continue;
      }
      if (e.reason === "mode") {
        modeFlips.push(modeFlip(e));
        continue;
      }
      bump(counts, e.reason);
      if (e.reason.startsWith("reject_")) {
        rejects.push(e);
        if (/ route=dead$/.test(e.figures)) bump(noteFor(e.reason), "route=dead");
        else if (/ route=retry$/.test(e.figures)) retriedInWindow++;
        if (e.reason === "reject_host_pressure") {
          const cause = hostPressureCause(e.figures);
          if (cause) bump(noteFor(e.reason), cause);
        }
      } else if (e.reason === "dead") {
        bump(noteFor("dead"), /\bcause=(\S+)/.exec(e.figures)?.[1] ?? "unknown");
      }
    }
    const total = [...counts.entries()].filter(([r]) => isDecisionReason(r)).reduce((sum, [, n]) => sum + n, 0);
    const others = [...counts.keys()].filter((r) => !(DECISION_KINDS as readonly string[]).includes(r)).sort((a, b) => {
      // other decisions (dead, unknown reject kinds) before bookkeeping events (recovered, redelivery)
      const rank = (r: string) => (isDecisionReason(r) ? 0 : 1);
      return rank(a) - rank(b) || a.localeCompare(b);
    });
    const reasons = [...DECISION_KINDS, ...others];
    // Shares over the decisions only (bookkeeping events have none), each its count over their total.
    const decided = reasons.filter(isDecisionReason);
    const shares = new Map(sharesOfHundred(decided.map((r) => counts.get(r) ?? 0)).map((share, k) => [decided[k]!, share]));
    const rows = reasons.map((reason): DecisionRow => {
      const count = counts.get(reason) ?? 0;
      const byNote = notesByReason.get(reason);
      return {
        reason,
        count,
        sharePct: shares.get(reason) ?? null,
        note: byNote ? countNote(byNote, reason === "dead" ? "cause=" : "") : "",
      };
    });
    rejectsInWindow = rejects.length;
    decisions = { rows, total, rejects: rejects.length };
    if (noReason > 0) notes.push(`${noReason} ${inputs.queue}:events ${noReason === 1 ? "entry carries" : "entries carry"} no reason: not counted under Decisions`);
    const first = rejects[0];
    const last = rejects.at(-1);
    if (first) firstReject = { ts: iso(first.tsMs), line: rejectLine(first) };
    if (last) lastReject = { ts: iso(last.tsMs), line: rejectLine(last) };
  }

  const trimmed = eventsTrimmed(inputs.eventStream, inputs.events, fromMs);
  if (trimmed !== null) notes.push(eventsTrimmedNote(trimmed, inputs.queue, fromMs));

  // First token of admitted jobs against the deadline: the finished ones, and
  // the admitted ones that never finished (a rollback drains exactly the jobs
  // that blew their deadline): their deadline passed without a first token.
  let firstToken: Report["first_token"] = null;
  if (done !== null) {
    const times = done.map((d) => d.firstTokenMs).filter((v): v is number => v !== null);
    const deadlines = done.map((d) => d.deadlineMs).filter((v): v is number => v !== null);
    // Each job's first token against its own deadline: with mixed deadlines no one deadline judges them all.
    const overOwn = done.flatMap((d) => (d.firstTokenMs !== null && d.deadlineMs !== null ? [d.firstTokenMs - d.deadlineMs] : []));
    const lateFinished = done.filter((d) => d.late ?? (d.firstTokenMs !== null && d.deadlineMs !== null ? d.firstTokenMs > d.deadlineMs : false));
    // Judged when the jobs stopped waiting: the run's first rollback drained them (it ended the run, or came after
    // up's end); else at the window's end (now for a live run). Never the clock of a later read, which counted
    // jobs drained before their deadline late (README: "however long after it is read").
    const drainedMs = otherQueue || inputs.drill?.rollbackAt == null ? NaN : Date.parse(inputs.drill.rollbackAt);
    const unfinished = unfinishedAdmitted(inputs, events, Number.isFinite(drainedMs) ? Math.min(nowMs, drainedMs) : toMs);
    for (const u of unfinished.jobs) {
      deadlines.push(u.deadlineMs);
      if (u.firstTokenMs !== null) {
        times.push(u.firstTokenMs);
        overOwn.push(u.firstTokenMs - u.deadlineMs);
      }
    }
    const lateUnfinished = unfinished.jobs.filter((u) => u.late).map((u) => u.id);
    const lateIds = [...lateFinished.map((d) => d.id ?? "?"), ...lateUnfinished];
    const p99 = percentile(times, 99);
    const deadline = extentOf(deadlines);
    const admittedInWindow = events === null ? null : new Set(events.filter((e) => e.reason === "admit").map((e) => e.job));
    const withFirstToken = times.length;
    const p99OverDeadline = p99 !== null && deadline !== null ? p99 - deadline.min : null;
    const waitingPastDeadline = unfinished.read ? unfinished.jobs.filter((u) => u.late && u.firstTokenMs === null).length : null;
    firstToken = {
      admitted: decisions ? (decisions.rows.find((r) => r.reason === "admit")?.count ?? 0) : null,
      finished: done.length,
      finished_admitted_earlier: admittedInWindow === null ? null : done.filter((d) => d.id === null || !admittedInWindow.has(d.id)).length,
      judged: done.length + unfinished.jobs.length,
      with_first_token: withFirstToken,
      p50_ms: percentile(times, 50),
      p99_ms: p99,
      max_ms: extentOf(times)?.max ?? null,
      deadline_ms: deadline,
      // The smallest deadline when they differ (QA: 3 s jobs and one 60 s job read "within, 49378 ms to spare" beside 3 late).
      p99_over_deadline_ms: p99OverDeadline,
      p99_deadline_ms: deadline?.min ?? null,
      p99_over_own_deadline_ms: percentile(overOwn, 99),
      // The text's verdict, so a script reads "over" where the text says it (QA: null beside 3 jobs waiting past their deadline).
      p99_deadline_verdict: p99DeadlineVerdict({ with_first_token: withFirstToken, waiting_past_deadline: waitingPastDeadline, p99_over_deadline_ms: p99OverDeadline }).verdict,
      late: lateIds.length,
      late_jobs: lateIds,
      late_finished: lateFinished.length,
      late_unfinished: unfinished.read ? lateUnfinished.length : null,
      unfinished_with_first_token: unfinished.read ? unfinished.jobs.filter((u) => u.firstTokenMs !== null).length : null,
      waiting_past_deadline: waitingPastDeadline,
      counted: FIRST_TOKEN_COUNTED,
    };
    const noFirstToken = done.filter((d) => d.firstTokenMs === null).length;
    if (noFirstToken > 0) notes.push(`${noFirstToken} finished job(s) have no first_token_ms: left out of p50/p99`);
    if (unfinished.unplaced > 0) {
      notes.push(`${unfinished.unplaced} job(s) admitted in the window are on no list with their enqueue_ts and deadline_ms (dead, or lost): not judged late or on time`);
    }
    if (!unfinished.read && events !== null && (events.some((e) => e.reason === "admit"))) {
      notes.push(`the unfinished jobs' lists or ${inputs.queue}:first_token could not be read: late jobs and first-token percentiles count finished jobs only`);
    }
  }

  // Totals from the stats hash (whole drill, not windowed)
  const totals: Report["totals"] =
    inputs.stats === null
      ? null
      : {
          tokens_out: statCount(inputs.stats, "tokens_out"),
          retry_count: statCount(inputs.stats, "retry_count"),
          jobs_done: statCount(inputs.stats, "jobs_done"),
          jobs_late: statCount(inputs.stats, "jobs_late"),
        };

  // Pressure from the sidecar recording
  if (inputs.recording === null) {
    notes.push(`no recording${inputs.recordingLooked ? ` (looked for ${inputs.recordingLooked})` : ""}: PSI, cgroup memory, OOM kills and stall_ms are n/a`);
  } else if (samples.length === 0) {
    notes.push(`recording ${inputs.recording.file} has no sample in the window`);
  }
  if (inputs.recording !== null && inputs.recording.badLines > 0) {
    const odd = inputs.recording.implausibleLines ?? 0;
    const why = odd === 0 ? "" : ` (${odd} of them held a value no sample can have: ${(inputs.recording.implausibleExamples ?? []).join(", ")}${odd > 3 ? ", …" : ""})`;
    notes.push(`${inputs.recording.badLines} line(s) of ${inputs.recording.file} were not samples: skipped${why}`);
  }
  const oom = oomKills(samples, inputs.cgroupNow ?? null, inputs.cgroupAtSetup ?? null, fromMs, notes);
  const alarmCounts = new Map<string, number>();
  for (const s of samples) for (const a of s.alarm) bump(alarmCounts, a);
  const lastMax = [...samples].reverse().find((s) => s.cg_mem_max !== null)?.cg_mem_max ?? null;
  const pressure: Report["pressure"] = {
    recording: inputs.recording?.file ?? null,
    samples: samples.length,
    peak_psi_mem_some_avg10: peak(samples, (s) => s.psi_mem_some_avg10),
    peak_psi_mem_some_rate: peak(samples, (s) => s.psi_mem_some_rate),
    peak_cg_psi_mem_some_avg10: peak(samples, (s) => s.cg_psi_mem_some_avg10),
    peak_cg_psi_mem_some_rate: peak(samples, (s) => s.cg_psi_mem_some_rate),
    peak_stall_ms_p99: peak(samples, (s) => s.stall_ms_p99),
    peak_cg_mem_peak: peak(samples, (s) => s.cg_mem_peak),
    peak_cg_mem_current: peak(samples, (s) => s.cg_mem_current),
    // The lowest slack is the peak of its negation.
    lowest_deadline_slack_ms: negated(peak(samples, (s) => (s.deadline_slack_ms === null ? null : -s.deadline_slack_ms))),
    peak_si: peak(samples, (s) => s.si),
    at_worst_stall: worstStall(samples),
    cg_mem_max: lastMax,
    cg_oom_kill_end: oom.end,
    oom_kills_in_window: oom.inWindow,
    alarms: samples.length === 0 ? null : [...alarmCounts.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([alarm, n]) => ({ alarm, samples: n })),
    ...recordingCoverage(samples, events),
  };
  const slackPartial = samples.filter((s) => s.slack_partial).length;
  if (slackPartial > 0) {
    const rest = slackPartial === samples.length ? "the lowest deadline slack is n/a" : "the lowest deadline slack is of the other samples";
    notes.push(`deadline_slack_ms is n/a in ${slackPartial} of ${samples.length} recorded sample(s): ${inputs.queue}:admitted was too long for watch to read whole (the smallest slack was not known); ${rest}`);
  }
  if (pressure.decisions_outside_recording) {
    notes.push(
      `recording ${inputs.recording!.file} covers ${pressure.first_sample} to ${pressure.last_sample} only; ${pressure.decisions_outside_recording} decision(s) in the window fall outside it ` +
        `(cut short, or started late): its PSI, memory and alarm figures say nothing of them`,
    );
  }

  // Admits from every event read, not the window's: a job finished in it may have been admitted before it (gather reads them back to the finished jobs' enqueue_ts).
  const admitAt = new Map<string, number[]>();
  for (const e of inputs.events ?? []) {
    if (e.reason === "admit" && e.tsMs !== null) (admitAt.get(e.job) ?? admitAt.set(e.job, []).get(e.job)!).push(e.tsMs);
  }

  // cost_proxy per finished job
  let costProxy: Report["cost_proxy"] = null;
  if (done !== null) {
    // Oldest first, as stallMsBetween bisects them (parseRecording sorts; a caller's own samples may not be).
    const recorded = [...(inputs.recording?.samples ?? [])].sort((a, b) => a.tsMs - b.tsMs);
    // Jobs with both ends known that no sample covers: their n/a is the recording's, said in a note (QA).
    let outsideRecording = 0;
    const jobs = done.map((d): JobCost => {
      const completion = d.completionTokens ?? d.tokensOut;
      const end = doneTime(d);
      const start = slotStart(d, admitAt);
      const stall = start !== null && end !== null ? stallMsBetween(recorded, start, end) : null;
      if (start !== null && end !== null && stall === null && recorded.length > 0) outsideRecording++;
      const stallMs = stall?.stallMs ?? null;
      const cost =
        d.promptTokens !== null && completion !== null && d.attempt !== null && stallMs !== null
          ? d.promptTokens + completion + d.attempt * d.promptTokens + (stallMs * 1) / 1000
          : null;
      return {
        job: d.id ?? "?",
        prompt_tokens: d.promptTokens,
        completion_tokens: completion,
        retry_count: d.attempt,
        stall_ms: stallMs,
        stall_coverage: stall?.coverage ?? null,
        workers_held: 1,
        cost_proxy: cost === null ? null : Math.round(cost * 1000) / 1000,
      };
    });
    jobs.sort(byJobId);
    const costed = jobs.filter((j) => j.cost_proxy !== null);
    const tokenParts = jobs.map((j) =>
      j.prompt_tokens !== null && j.completion_tokens !== null && j.retry_count !== null ? j.prompt_tokens + j.completion_tokens + j.retry_count * j.prompt_tokens : null,
    );
    const partial = jobs.filter((j) => j.stall_coverage !== null && j.stall_coverage < 1).length;
    if (partial > 0) notes.push(`${partial} job(s) ran partly outside the recording: their stall_ms covers only the recorded part (the per-job table's "covered" column)`);
    if (outsideRecording > 0) notes.push(`${outsideRecording} finished job(s) ran wholly outside the recording (before its first sample or after its last): their stall_ms and cost_proxy are n/a`);
    costProxy = {
      formula: COST_PROXY_FORMULA,
      stall_ms_source: STALL_MS_SOURCE,
      jobs,
      total: costed.length === 0 ? null : Math.round(costed.reduce((sum, j) => sum + j.cost_proxy!, 0) * 1000) / 1000,
      jobs_costed: costed.length,
      jobs_without_cost: jobs.length - costed.length,
      token_part_total: jobs.length === 0 || tokenParts.some((t) => t === null) ? null : tokenParts.reduce<number>((sum, t) => sum + t!, 0),
    };
  }

  // The seed's drain math check
  let headJob: string | null = null;
  let headAgeMs: number | null = null;
  if (inputs.queueHead !== null) {
    const head = decodeJob(inputs.queueHead, nowMs);
    if (head.ok) {
      headJob = head.job.id;
      headAgeMs = nowMs - head.job.enqueue_ts;
    } else {
      headJob = head.id;
      notes.push(`head of ${inputs.queue} is not a valid job (${head.reason}): its age is n/a`);
    }
  } else if (inputs.queueLen === 0) {
    headAgeMs = 0; // an empty queue: nothing waits
  }
  // Undated finished jobs cannot be placed in the span: left out of the pace.
  const dated = done?.flatMap((d) => {
    const end = doneTime(d);
    return end === null ? [] : [{ start: slotStart(d, admitAt), end }];
  });
  const pace = dated === undefined ? null : paceOf(dated, fromMs);
  const donePerHour = pace?.perHour ?? null;
  const backlog = inputs.queueLen !== null && inputs.drainLen !== null ? inputs.queueLen + inputs.drainLen : null;
  const backlogHours = backlog === null ? null : backlog === 0 ? 0 : donePerHour === null ? null : roundHours(backlog / donePerHour);
  // The pace ends at the last finish: a worker that stopped finishing while
  // jobs wait would keep its earlier pace, so the notes say since when.
  if (pace?.toMs != null && inputs.queueLen !== null && inputs.queueLen > 0 && nowMs - pace.toMs > PACE_STALE_MS) {
    notes.push(`no job finished since ${iso(pace.toMs)} (${Math.round((nowMs - pace.toMs) / 1000)} s before this report) while ${inputs.queueLen} wait on ${inputs.queue}: the pace is of before that`);
  }
  if (pace?.naReason) {
    const hours = backlogHours === null && backlog !== null ? `, and so are the hours for the ${backlog} job(s) on ${inputs.queue} + ${inputs.queue}_drain` : "";
    notes.push(`finished per hour while jobs ran is n/a${hours}: ${pace.naReason}`);
  }

  if (inputs.events === null) notes.push(`decision stream ${inputs.queue}:events unreadable: decisions are n/a`);
  if (inputs.done === null) notes.push(`${inputs.queue}:done unreadable: first-token figures, cost_proxy and the pace are n/a`);

  const source: Report["source"] =
    inputs.source.kind === "live"
      ? { kind: "live", where: redactUrl(inputs.source.url) }
      : inputs.source.kind === "aof"
        ? { kind: "aof", where: inputs.source.aofDir }
        : { kind: "export", where: inputs.source.file };
  // The rollback's deny-all of the run on its own queue: after a run that ended first, it is past the window's end (QA).
  // Up to the latest rollback: a first one that could not reach Redis (exit 4) took the drill over, and the next one cut admission off.
  const lastRollbackAt = inputs.drill?.lastRollbackAt ?? inputs.drill?.rollbackAt ?? null;
  // A rollback that took the drill over and recorded nothing yet has cut admission off all the same (QA: no deny-all line until it finished).
  const rollbackAtMs = otherQueue ? NaN : lastRollbackAt !== null ? Date.parse(lastRollbackAt) : unfinishedRollbackStart(inputs.drill) !== null ? nowMs : NaN;
  const cut = inputs.events !== null && Number.isFinite(runStartMs) && Number.isFinite(rollbackAtMs) ? rollbackDenyAll(inputs.events, runStartMs, rollbackAtMs) : null;
  const cutMs = cut?.ts == null ? NaN : Date.parse(cut.ts);
  const denyAll: RollbackDenyAll | null = cut === null ? null : { ...cut, window: cutMs < fromMs ? "before" : cutMs > untilMs ? "after" : "in" };
  // Admission opened on a host already under pressure: doctor warned at up, and the incident note must say it too.
  const opened = modeFlips?.find((m) => m.mode === "admit" && m.psi !== null && m.psi >= 1);
  if (opened) notes.push(`admission opened at ${opened.ts ?? "?"} with host PSI avg10 already ${opened.psi!.toFixed(2)} (>= 1.00): neighbours' pressure is in these figures, not only the drill's`);
  if (inputs.source.kind === "export") notes.push(`read from rollback's export ${inputs.source.file} (${inputs.drill?.earlierRun ? `run ${inputs.drill.runId} is an earlier run: a later up replaced it` : "the drill's Redis, or its queue there, is gone"}); the window ends at ${toMs < nowMs ? "the run's end, before the export" : "the export"}`);

  return {
    label: LAB_LABEL,
    generated_at: new Date(options.generatedAtMs ?? Date.now()).toISOString(),
    drill: inputs.drill
      ? {
          name: inputs.drill.name,
          run_id: inputs.drill.runId,
          drill_file: inputs.drill.drillFile,
          created_at: inputs.drill.createdAt,
          phase: inputs.drill.phase,
          queue: inputs.drill.queue ?? null,
          ended: drillEndedFacts(inputs.drill, (pushedIds) => (otherQueue ? null : jobsNotPushedBy(pushedIds, inputs.events, runStartMs, untilMs))),
        }
      : null,
    queue: inputs.queue,
    source,
    window: {
      since_ms: sinceMs,
      from: new Date(fromMs).toISOString(),
      to: new Date(toMs).toISOString(),
      anchored: toMs < nowMs ? "run_end" : inputs.source.kind === "export" ? "export" : "now",
      run_start: Number.isFinite(runStartMs) ? new Date(runStartMs).toISOString() : null,
      clipped_to_run: clippedToRun,
    },
    decisions,
    events_trimmed: trimmed,
    first_reject: firstReject,
    last_reject: lastReject,
    mode_flips: modeFlips,
    rollback_deny_all: denyAll,
    first_token: firstToken,
    totals,
    tokens_out_split: inputs.stats === null ? null : tokensOutSplit(inputs.stats, inputs.done),
    pressure,
    retries: {
      retry_count_total: totals?.retry_count ?? null,
      nacked_to_retry_in_window: retriedInWindow,
      finished_after_retry: done === null ? null : done.filter((d) => d.attempt !== null && d.attempt > 0).length,
    },
    cost_proxy: costProxy,
    drain: {
      queue_len: inputs.queueLen,
      head_job: headJob,
      head_age_ms: headAgeMs,
      drain_len: inputs.drainLen,
      rejects_in_window: rejectsInWindow,
      done_per_hour: donePerHour,
      backlog_hours: backlogHours,
      pace_from: iso(pace?.fromMs ?? null),
      pace_to: iso(pace?.toMs ?? null),
    },
    jobs_where: jobsWhere(inputs, notes),
    notes,
  };
}
