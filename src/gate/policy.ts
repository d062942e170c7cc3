import { deadlineSlackMs, type Job } from "../queue/job.js";
import { splitModeNote } from "../queue/mode.js";

/**
 * The admission policy of the runbook, pure: same inputs, same decision.
 * Order (seed): mode reject_all → host PSI missing or stale → host pressure →
 * deadline slack → packed tokens → admit. The packed-token compare is final
 * only in Redis (one Lua script per decision): here it uses a snapshot.
 */

export type GateMode = "admit" | "reject_all";

/** The mode a flip replaced, for people: `<q>:mode` never set (null) is no mode, though the gate admits on it. */
export function previousModeText(previous: GateMode | null): string {
  return previous ?? "unset (admit)";
}

/**
 * What `gate mode <mode>` does. Re-admit under pressure is refused unless
 * forced; but a lever the gate already reads as admit is no admission closed:
 * said as such and left alone (a refusal there read as "still closed").
 */
export function leverAction(mode: GateMode, f: { calm: boolean; force: boolean; current: GateMode | null }): "flip" | "already_admit" | "refuse" {
  if (mode !== "admit" || f.calm || f.force) return "flip";
  // null: never set, which the gate admits on too.
  return f.current === "admit" || f.current === null ? "already_admit" : "refuse";
}

export interface AdmissionConfig {
  /** psi_mem_some_avg10 above this is host pressure (runbook: 10.00). */
  psiLimit: number;
  /** Stall % over the fast window above this is host pressure (avg10 lags). */
  psiRateLimit: number;
  /** Reject when deadline slack is under this (runbook: 1500 ms). */
  slackLimitMs: number;
  /** In-flight packed prompt tokens cap (runbook: 32000 on 2G). */
  packedTokenLimit: number;
  /** The gate's sampling interval; host PSI older than 2 intervals is stale. */
  intervalMs: number;
  /** Tripped pressure clears only after this long below half the limits. */
  pressureClearMs: number;
  /** Runbook: reject if deadline_slack_ms < stall_ms_p99 + 500. */
  stallMarginMs: number;
}

/** The gate's shortest --interval: PSI files are not worth re-reading faster. */
export const MIN_GATE_INTERVAL_MS = 50;

export const defaultAdmissionConfig: AdmissionConfig = {
  psiLimit: 10,
  psiRateLimit: 10,
  slackLimitMs: 1500,
  packedTokenLimit: 32000,
  intervalMs: 1000,
  pressureClearMs: 5000,
  stallMarginMs: 500,
};

/** What tripped host pressure; `hysteresis` = below the limit, not yet cleared. */
export type HostPressureTrigger =
  | "psi_avg10"
  | "stall_rate"
  | "cg_psi_avg10"
  | "cg_stall_rate"
  | "swap_leak"
  | "hysteresis";

/** Why a job got reject_host_pressure: pressure, the deny-all lever, or no PSI to decide on. */
export type HostRejectTrigger = HostPressureTrigger | "reject_all" | "psi_missing" | "psi_stale";

export interface PressureState {
  tripped: boolean;
  /** Since when every reading has stayed below half its limit (null: not calm). */
  calmSinceMs: number | null;
}

export const initialPressureState: PressureState = { tripped: false, calmSinceMs: null };

/** Pressure readings: host ones from /proc/pressure/memory, cg ones from the worker cgroup (null when absent). */
export interface PressureReadings {
  psiSomeAvg10: number | null;
  stallRatePct: number | null;
  cgPsiSomeAvg10: number | null;
  cgStallRatePct: number | null;
  /** Swap used inside a cgroup whose swap is disabled: the cgroup leaked. */
  cgSwapLeak: boolean;
}

export interface AdmissionSignals extends PressureReadings {
  mode: GateMode;
  /** How long ago host memory PSI last read, on a monotonic clock (null: never). */
  psiAgeMs: number | null;
  /** Why host PSI is missing, when it is. */
  psiMissingReason: string | null;
  stallMsP99: number | null;
  /** Snapshot of in-flight packed tokens (null: unknown; Lua decides anyway). */
  inflightTokens: number | null;
  pressure: PressureState;
}

export type AdmissionDecision =
  | { kind: "admit"; packed: number | null; limit: number }
  | {
      kind: "reject_host_pressure";
      psi: number | "missing";
      trigger: HostRejectTrigger;
      /** The figure that tripped it, when not psi itself (rate %, cg psi, stale age ms). */
      figure: number | null;
    }
  | { kind: "reject_deadline_slack"; slackMs: number; limitMs: number; stallMsP99: number | null }
  | { kind: "reject_packed_tokens"; packed: number; limit: number };

export type DecisionKind = AdmissionDecision["kind"];
export type RejectKind = Exclude<DecisionKind, "admit">;

/** The reason a nack carries (runbook: reason=host_pressure). */
export function nackReason(kind: RejectKind): string {
  return kind.replace(/^reject_/, "");
}

/** What is over its limit right now, in the order the seed reads them. */
export function pressureTrigger(readings: PressureReadings, config: AdmissionConfig): HostPressureTrigger | null {
  if (readings.psiSomeAvg10 !== null && readings.psiSomeAvg10 > config.psiLimit) return "psi_avg10";
  if (readings.stallRatePct !== null && readings.stallRatePct > config.psiRateLimit) return "stall_rate";
  if (readings.cgPsiSomeAvg10 !== null && readings.cgPsiSomeAvg10 > config.psiLimit) return "cg_psi_avg10";
  if (readings.cgStallRatePct !== null && readings.cgStallRatePct > config.psiRateLimit) return "cg_stall_rate";
  if (readings.cgSwapLeak) return "swap_leak";
  return null;
}

/**
 * Calm = every reading seen below half its limit. Host PSI is required, as in
 * decideAdmission: unread, it is not calm, or the clear clock would run while
 * the gate is blind (and a latch cleared then admits at PSI 7). The worker
 * cgroup is optional: its readings absent count as calm.
 */
function isCalm(readings: PressureReadings, config: AdmissionConfig): boolean {
  const below = (value: number, limit: number) => value < limit / 2;
  const optionalBelow = (value: number | null, limit: number) => value === null || below(value, limit);
  return (
    !readings.cgSwapLeak &&
    readings.psiSomeAvg10 !== null &&
    below(readings.psiSomeAvg10, config.psiLimit) &&
    readings.stallRatePct !== null &&
    below(readings.stallRatePct, config.psiRateLimit) &&
    optionalBelow(readings.cgPsiSomeAvg10, config.psiLimit) &&
    optionalBelow(readings.cgStallRatePct, config.psiRateLimit)
  );
}

/**
 * Hysteresis: trips as soon as anything is over its limit; clears only after
 * every reading stayed below half its limit for pressureClearMs, so the gate
 * does not flap around the threshold. While host PSI is unknown the latch
 * keeps its state and the calm clock starts over once it is read again.
 * `monoMs` is monotonic: a wall clock stepped back would hold the latch.
 */
export function nextPressureState(
  prev: PressureState,
  readings: PressureReadings,
  config: AdmissionConfig,
  monoMs: number,
): PressureState {
  if (pressureTrigger(readings, config) !== null) return { tripped: true, calmSinceMs: null };
  if (!isCalm(readings, config)) return { tripped: prev.tripped, calmSinceMs: null };
  const calmSinceMs = prev.calmSinceMs ?? monoMs;
  if (prev.tripped && monoMs - calmSinceMs < config.pressureClearMs) return { tripped: true, calmSinceMs };
  return { tripped: false, calmSinceMs };
}

/** `nowMs` is the wall clock (epoch ms, as `enqueue_ts`), for the job's slack only. */
export function decideAdmission(
  job: Pick<Job, "prompt_tokens" | "enqueue_ts" | "deadline_ms">,
  signals: AdmissionSignals,
  config: AdmissionConfig,
  nowMs: number,
): AdmissionDecision {
  const psi = signals.psiSomeAvg10 ?? "missing";
  if (signals.mode === "reject_all") return { kind: "reject_host_pressure", psi, trigger: "reject_all", figure: null };

  // Fail closed on host PSI: without it we cannot see reclaim at all.
  if (signals.psiSomeAvg10 === null || signals.psiAgeMs === null) {
    return { kind: "reject_host_pressure", psi: "missing", trigger: "psi_missing", figure: null };
  }
  if (signals.psiAgeMs > 2 * config.intervalMs) {
    return { kind: "reject_host_pressure", psi: "missing", trigger: "psi_stale", figure: signals.psiAgeMs };
  }

  const trigger = pressureTrigger(signals, config);
  if (trigger !== null) {
    return { kind: "reject_host_pressure", psi: signals.psiSomeAvg10, trigger, figure: triggerFigure(trigger, signals) };
  }
  if (signals.pressure.tripped) {
    return { kind: "reject_host_pressure", psi: signals.psiSomeAvg10, trigger: "hysteresis", figure: null };
  }

  const slackMs = deadlineSlackMs(job, nowMs);
  const stallFloorMs = signals.stallMsP99 === null ? null : signals.stallMsP99 + config.stallMarginMs;
  if (slackMs < config.slackLimitMs || (stallFloorMs !== null && slackMs < stallFloorMs)) {
    return { kind: "reject_deadline_slack", slackMs, limitMs: config.slackLimitMs, stallMsP99: signals.stallMsP99 };
  }

  const limit = config.packedTokenLimit;
  if (signals.inflightTokens === null) return { kind: "admit", packed: null, limit };
  const packed = signals.inflightTokens + job.prompt_tokens;
  if (packed > limit) return { kind: "reject_packed_tokens", packed, limit };
  return { kind: "admit", packed, limit };
}

function triggerFigure(trigger: HostPressureTrigger, readings: PressureReadings): number | null {
  switch (trigger) {
    case "stall_rate":
      return readings.stallRatePct;
    case "cg_psi_avg10":
      return readings.cgPsiSomeAvg10;
    case "cg_stall_rate":
      return readings.cgStallRatePct;
    default:
      return null;
  }
}

const TRIGGER_FIELD: Partial<Record<HostRejectTrigger, string>> = {
  stall_rate: "stall_rate",
  cg_psi_avg10: "cg_psi",
  cg_stall_rate: "cg_stall_rate",
  psi_stale: "stale_ms",
};

/**
 * The k=v part after `job=N`: `packed=48000 limit=32000`, `psi=12.40`,
 * `slack_ms=420`, `psi=0.40 mode=reject_all`. Extra fields only follow the
 * fixed prefix of DESIGN.md.
 */
export function decisionFigures(decision: AdmissionDecision): string {
  switch (decision.kind) {
    case "admit":
      return `packed=${decision.packed ?? "unknown"} limit=${decision.limit}`;
    case "reject_packed_tokens":
      return `packed=${decision.packed} limit=${decision.limit}`;
    case "reject_deadline_slack": {
      const p99 = decision.stallMsP99 !== null && decision.slackMs >= decision.limitMs ? ` stall_ms_p99=${Math.round(decision.stallMsP99)}` : "";
      return `slack_ms=${Math.round(decision.slackMs)}${p99}`;
    }
    case "reject_host_pressure": {
      let figures = `psi=${formatPsi(decision.psi)}`;
      if (decision.trigger === "reject_all") figures += " mode=reject_all";
      else if (decision.trigger === "swap_leak") figures += " swap_leak=1";
      else if (decision.trigger === "hysteresis") figures += " hysteresis=1";
      else {
        const field = TRIGGER_FIELD[decision.trigger];
        if (field !== undefined && decision.figure !== null) {
          figures += ` ${field}=${decision.trigger === "psi_stale" ? Math.round(decision.figure) : decision.figure.toFixed(2)}`;
        }
      }
      return figures;
    }
  }
}

export function formatPsi(psi: number | "missing"): string {
  return psi === "missing" ? "missing" : psi.toFixed(2);
}

/**
 * A fresh decision's line, e.g. `reject_packed_tokens job=7 packed=36012 limit=32000`:
 * the policy's words, what the lever held when it is not a mode (` mode_value=banana`),
 * where a reject went: ` route=retry` (`<q>:retry:<class>`) or ` route=dead`, both
 * said (QA: only dead was, so a retried reject read as unrouted).
 */
export function formatDecisionLine(decision: AdmissionDecision, job: Pick<Job, "id"> & { attempt?: number }, modeNote = "", route: string | null = null): string {
  return lineOf(decision.kind, job.id, decisionFigures(decision), modeNote, job.attempt, route);
}

/**
 * A decision line from what the gate records of it: `figures` as stored in
 * `<q>:decisions` and `<q>:events` (decisionFigures(), then the lever's note
 * when it is not a mode), the copy's attempt, the route a reject took. One
 * order for every line of a decision: the gate's fresh one, one read back from
 * its record (redelivery=1, reply_lost=1 follow), and drill watch's and drill
 * report's rebuild from its event: `psi=0.40 mode=reject_all attempt=2
 * mode_value=banana route=retry`.
 */
export function decisionLineOf(kind: string, job: string, figures: string, attempt: number | undefined, route: string | null = null): string {
  const split = splitModeNote(figures);
  return lineOf(kind, job, split.figures, split.modeNote, attempt, route);
}

/** The line from its parts: a fresh decision has its figures and the lever's note apart (no split on the gate's path). */
function lineOf(kind: string, job: string, figures: string, modeNote: string, attempt: number | undefined, route: string | null): string {
  return `${kind} job=${job}${figures === "" ? "" : ` ${figures}`}${attemptField(attempt)}${modeNote}${route === null ? "" : ` route=${route}`}`;
}

/** ` attempt=2` on a decision line of a retried job (fresh or read back from its record); nothing on a first delivery. */
function attemptField(attempt: number | undefined): string {
  return attempt !== undefined && attempt > 0 ? ` attempt=${attempt}` : "";
}
