import { StringDecoder } from "node:string_decoder";
import { jsonObjectOf } from "../util/jsonObject.js";
import type { DrillEnded, OomKillReading } from "../drill/state.js";
import { CGROUP_ABSENT_REASON, PARTIAL_ADMITTED_SCAN } from "../sampler/step.js";
import { parseSeq, SEQ_RULE } from "../queue/seq.js";
import { JOB_FIELD_RULES } from "../queue/job.js";

/**
 * What `drill report` summarises, as plain values: the decision stream, the
 * finished jobs, the stats hash, the queue lengths, the sidecar recording and
 * the drill state. The gatherer (gather.ts) fills these from a live Redis or
 * from rollback's export file; the builder (build.ts) never does I/O.
 *
 * Every source is tolerant: a field that is absent or not a number becomes
 * null, never 0, and a whole source that could not be read is null.
 */

/** One entry of `<q>:events` (XADD by the gate's Lua scripts and by `gate mode`). */
export interface DecisionEvent {
  /** Stream entry id, e.g. `1764480000123-0`. */
  id: string;
  /** `admit`, `reject_*`, `dead`, `redelivery`, `recovered`, `mode`. */
  reason: string;
  /** Job id; empty for mode flips and dead payloads without an id. */
  job: string;
  /** `decisionFigures()` as the gate stored it, plus ` route=retry|dead` on rejects. */
  figures: string;
  /** ms since the epoch: the `ts` field, else the stream id's time part. */
  tsMs: number | null;
  gate: string | null;
  attempt: number | null;
}

/**
 * One `<q>:done` record (src/worker/plan.ts DoneRecord), read tolerantly:
 *   {"id":"7","first_token_ms":812,"deadline_ms":8000,"late":false,"tokens_out":256,...}
 */
export interface DoneEntry {
  id: string | null;
  firstTokenMs: number | null;
  deadlineMs: number | null;
  late: boolean | null;
  tokensOut: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  attempt: number | null;
  enqueueTs: number | null;
  firstTokenTs: number | null;
  doneTs: number | null;
}

/** The fields of one sidecar sample (DESIGN.md "Host signals") the report reads. */
export interface WatchSample {
  tsMs: number;
  psi_mem_some_avg10: number | null;
  psi_mem_some_rate: number | null;
  cg_psi_mem_some_avg10: number | null;
  cg_psi_mem_some_rate: number | null;
  cg_mem_current: number | null;
  cg_mem_peak: number | null;
  /** A number of bytes, or "max" (no limit). */
  cg_mem_max: number | "max" | null;
  cg_oom_kill: number | null;
  /** watch saw no worker cgroup (its `missing` says so): one recorded later is new, its counters start at 0. */
  cg_absent: boolean;
  stall_ms_p99: number | null;
  /** The seed's contradiction, beside the stall: idle CPU, queue age that looks fine, slack running out, swap-in. */
  cpu_idle_pct: number | null;
  queue_age_ms: number | null;
  deadline_slack_ms: number | null;
  /** deadline_slack_ms is null because watch read only the oldest part of a long admitted list (its `missing` says so). */
  slack_partial: boolean;
  si: number | null;
  alarm: string[];
}

export interface Recording {
  file: string;
  samples: WatchSample[];
  /** Lines that were not a JSON sample with an ISO `ts` (a torn last line, say), or held an impossible value. */
  badLines: number;
  /** Of badLines, those that held an impossible value (first ones named in `implausibleExamples`); absent: none. */
  implausibleLines?: number;
  implausibleExamples?: string[];
}

export interface DrillInfo {
  name: string;
  runId: string | null;
  drillFile: string | null;
  createdAt: string | null;
  /** When up's schedule clock started (gate and worker ready); null: not recorded (an older run, or it never started). */
  scheduleStartedAt?: string | null;
  phase: string | null;
  /** The queue the run packed on (state.json); absent from older callers. Only a report on it is the run's. */
  queue?: string | null;
  /** up's verdict as state.json records it; null: none recorded (up still running, stopped by a rollback, or died). */
  ended?: DrillEnded | null;
  /** When the first rollback of the run recorded (state.json rollback.at: the one that took the drill over); null: none. */
  rollbackAt?: string | null;
  /** When the run's first rollback started; with phase rolling_back and no rollbackAt, it has not finished (running, or interrupted). */
  rollbackStartedAt?: string | null;
  /** When the latest rollback recorded, when a later one ran (again after an exit 4, a re-drain); null or absent: only the first. */
  lastRollbackAt?: string | null;
  /** Drains of jobs pushed after a complete rollback: when, and the drain's length after it. */
  redrains?: Array<{ at: string; drained: number | null }>;
  /** The run's up is gone (pid and start time no longer match) with the run still starting or running and no end recorded. */
  upGone?: { pid: number } | null;
  /**
   * The rollback as the operator runs it on the state dir and tree the report read (`drill --state-dir S
   * rollback --name X`, rollbackAgain): what finishes an unfinished one. Always given: a bare
   * `drill rollback` pasted runs on the default state dir.
   */
  rollbackCommand: string;
  /** up's own end record when a rollback stopped it (runs/<id>/up-ended.json): what it had packed. */
  upEndedAtRollback?: DrillEnded | null;
  /** Its up-ended.json was there but not taken (not drill's, unreadable, or no end record; a note says why): its counts are n/a. */
  upEndedNotTaken?: boolean;
  /** `report --run <id>` of a run a later up replaced: read from its own export, whatever its Redis holds now. */
  earlierRun?: boolean;
}

/** Where the Redis figures came from. */
export type ReportSource =
  | { kind: "live"; url: string }
  /** The drill's embedded Redis had exited: restarted on its AOF (`aofDir`) for this report, at `url`, and stopped after. */
  | { kind: "aof"; url: string; aofDir: string }
  /** `atMs`: when rollback wrote it (from its name), null when the name does not say. */
  | { kind: "export"; file: string; atMs: number | null };

/** Which list of the queue (DESIGN.md "Redis layout") a key is. */
export type JobListRole = "ready" | "processing" | "admitted" | "working" | "done" | "retry" | "dead" | "drain";

/** One list of the queue that holds jobs, with what is in it. */
export interface JobList {
  key: string;
  role: JobListRole;
  /** The gate (processing), worker (working) or host class (retry) named in the key; null for the fixed keys. */
  holder: string | null;
  /** Its length; null when it could not be read (not a list, say). */
  count: number | null;
  /** Each entry's job id (null: an entry carrying none); null when not read. */
  ids: Array<string | null> | null;
  /**
   * processing and working lists: whether the holder's heartbeat key
   * (`<q>:gates:<gate>`, `<q>:workers:<worker>`) exists, in the export when the
   * source is one; null for the other lists.
   */
  holderAlive: boolean | null;
  /** A working list's worker ran on this host and its process is gone (its heartbeat still counts down): its pid. */
  holderExitedPid?: number | null;
}

/** Every list of the queue that holds jobs, and the id counter: "no job lost" checked from the report. */
export interface JobPlaces {
  lists: JobList[];
  /** `<q>:seq`: the last job id pack issued (0: none); null when unreadable. */
  seq: number | null;
  /** Why `seq` is null (`is "007", not a job id …`), for the report's notes. */
  seqProblem?: string | null;
}

/**
 * `<q>:seq` read as drill pack reads it (parseSeq): absent (null) is 0, no id
 * issued yet; text pack would refuse to push on is unreadable, never a count.
 */
export function seqOfText(text: string | null): Pick<JobPlaces, "seq" | "seqProblem"> {
  if (text === null) return { seq: 0, seqProblem: null };
  const seq = parseSeq(text);
  if (seq !== null) return { seq, seqProblem: null };
  const shown = text.length > 30 ? `${text.slice(0, 30)}…` : text;
  return { seq: null, seqProblem: `is ${JSON.stringify(shown)}, not a job id (${SEQ_RULE})` };
}

export interface ReportInputs {
  queue: string;
  source: ReportSource;
  drill: DrillInfo | null;
  /** Decision stream entries (already bounded to roughly the window by the reader), oldest first. */
  events: DecisionEvent[] | null;
  /** `<q>:events` as a whole: where it starts now and what it ever took (a trimmed stream misses the window's start). Absent: not read. */
  eventStream?: EventStreamExtent | null;
  done: DoneEntry[] | null;
  /** HGETALL `<q>:stats`; a missing hash is `{}` (never incremented), an unreadable one null. */
  stats: Record<string, string> | null;
  queueLen: number | null;
  /** LINDEX `<q>` 0, as bytes (payloads may not be UTF-8). */
  queueHead: Buffer | null;
  drainLen: number | null;
  /** Where the jobs are: every job list of the queue; null when it could not be read, absent from older callers. */
  jobPlaces?: JobPlaces | null;
  /** null: no recording; `looked` says where. */
  recording: Recording | null;
  /** The recording file looked for (said when there is none). */
  recordingLooked: string | null;
  /** What the gatherer noticed on the way (unparseable records, fallbacks taken). */
  gatherNotes: string[];
  /**
   * The drill's worker cgroup's oom_kill read at gather time, when the cgroup
   * still exists: up stops the instant the worker dies, before watch's next
   * sample, so the recording can miss the kill that ended it. Absent: not read
   * (no cgroup recorded, gone, or an export).
   */
  cgroupNow?: CgroupNow | null;
  /** The worker cgroup's oom_kill as up read it right after setup: the first reading, before watch's first sample. */
  cgroupAtSetup?: OomKillReading | null;
  /**
   * The job payloads on every list but done and dead (ready, processing,
   * admitted, working, retry, drain), with their times: an admitted job that
   * never finished (drained by a rollback, say) can still be late. null: not read.
   */
  unfinished?: JobTiming[] | null;
  /** HGETALL `<q>:first_token` (the worker's job id → first-token ts, ms); null: unreadable. */
  firstTokens?: Record<string, number> | null;
}

/**
 * `<q>:events` as a whole, beside the entries read: the cap (EVENTS_MAXLEN)
 * trims its oldest entries, and a window reaching back past them misses them.
 */
export interface EventStreamExtent {
  /** Its first entry's id now; null: empty (or absent). */
  firstId: string | null;
  /** XLEN. */
  length: number;
  /** The newest id it took when read (XINFO last-generated-id; an export's last entry): entries after it came later than decisionsAdded. */
  lastId: string | null;
  /** XINFO STREAM entries-added (Redis 7+): entries it ever took, trimmed ones included; null: not known (older Redis, an export). */
  entriesAdded: number | null;
  /**
   * The admits and rejects `<q>:stats` counted at the same moment (streamDecisionsCounted):
   * their scripts add the entry and count it in one step, so any fewer in the stream were trimmed.
   * null: a counter that is not a count.
   */
  decisionsAdded: number | null;
}

/** A job payload's id and times, wherever it is now. */
export interface JobTiming {
  id: string;
  role: JobListRole;
  enqueueTs: number | null;
  deadlineMs: number | null;
  /** The worker's mark on the payload in its working list, when it has one. */
  firstTokenTs: number | null;
  /** The first token of a run a give-back ended (worker/plan.ts givenBackPayload); absent: none. */
  givenBackFirstTokenTs?: number | null;
}

/** A list entry (a job payload) → its timing; null when it is not a JSON object with an id. */
export function jobTimingOf(entry: Buffer | string, role: JobListRole): JobTiming | null {
  const r = jsonObjectOf(entry);
  if (r === null) return null;
  const id = stringOrNull(r.id);
  if (id === null || id === "") return null;
  return { id, role, enqueueTs: finiteOrNull(r.enqueue_ts), deadlineMs: finiteOrNull(r.deadline_ms), firstTokenTs: finiteOrNull(r.first_token_ts), givenBackFirstTokenTs: finiteOrNull(r.given_back_first_token_ts) };
}

/** The roles whose payloads are unfinished jobs (done holds records, dead wraps what never ran). */
export const UNFINISHED_ROLES: readonly JobListRole[] = ["ready", "processing", "admitted", "working", "retry", "drain"];

/** A `<q>:first_token` hash → id → ts; fields that are not a time are left out. */
export function firstTokenTimes(hash: Record<string, string>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [id, text] of Object.entries(hash)) {
    const ts = finiteOrNull(text);
    if (ts !== null) out[id] = ts;
  }
  return out;
}

/** One read of the worker cgroup's oom_kill counter (v2 memory.events, v1 memory.oom_control). */
export interface CgroupNow {
  tsMs: number;
  file: string;
  /** null: the cgroup is there but the counter could not be read (`reason` says why). */
  oomKill: number | null;
  reason: string | null;
}

// ---- tolerant readers -------------------------------------------------------

/**
 * The role of a key of `queue` that holds jobs, with the gate, worker or host
 * class it names; null for every other key (stats, events, heartbeats, ...).
 */
export function jobListRole(queue: string, key: string): { role: JobListRole; holder: string | null } | null {
  if (key === queue) return { role: "ready", holder: null };
  if (key === `${queue}_drain`) return { role: "drain", holder: null };
  if (key === `${queue}:admitted`) return { role: "admitted", holder: null };
  if (key === `${queue}:done`) return { role: "done", holder: null };
  if (key === `${queue}:dead`) return { role: "dead", holder: null };
  for (const role of ["processing", "working", "retry"] as const) {
    const prefix = `${queue}:${role}:`;
    if (key.startsWith(prefix) && key.length > prefix.length) return { role, holder: key.slice(prefix.length) };
  }
  return null;
}

/** The order of the "where the jobs are" rows: the way a job travels. */
export const JOB_LIST_ORDER: readonly JobListRole[] = ["ready", "processing", "admitted", "working", "done", "retry", "dead", "drain"];

/** The fixed lists, shown even when empty (0 is a figure: nothing there). */
export const FIXED_JOB_LISTS: readonly JobListRole[] = ["ready", "admitted", "done", "dead", "drain"];

export function fixedJobListKey(queue: string, role: JobListRole): string {
  return role === "ready" ? queue : role === "drain" ? `${queue}_drain` : `${queue}:${role}`;
}

/** The heartbeat key of a processing or working list's holder. */
export function holderHeartbeatKey(queue: string, role: JobListRole, holder: string | null): string | null {
  if (holder === null) return null;
  if (role === "processing") return `${queue}:gates:${holder}`;
  if (role === "working") return `${queue}:workers:${holder}`;
  return null;
}

/** Job lists in the travel order, then by key. */
export function sortJobLists(lists: JobList[]): JobList[] {
  return [...lists].sort((a, b) => JOB_LIST_ORDER.indexOf(a.role) - JOB_LIST_ORDER.indexOf(b.role) || a.key.localeCompare(b.key));
}

/**
 * A list entry's job id: a job payload's `id`, a done record's `id`, or a dead
 * entry's `id` (else the id of the payload it wraps); null when it carries none.
 */
export function jobIdOf(entry: Buffer | string): string | null {
  const record = jsonObjectOf(entry);
  if (record === null) return null;
  // A dead entry's id is the one the gate took: null where it refused the payload's (QA: "a|b\nc" counted as a job).
  if (record.id === null && typeof record.payload === "string") return null;
  const id = typeof record.id === "number" && Number.isFinite(record.id) ? String(record.id) : record.id;
  // An id the job's rule refuses is no job's id, whichever list holds it: it will be (or was) dead-lettered.
  if (typeof id === "string" && id !== "") return JOB_FIELD_RULES.id(id) === null ? id : null;
  if (typeof record.payload === "string") return jobIdOf(record.payload);
  return null;
}

export function finiteOrNull(value: unknown): number | null {
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value === "string" && value.trim() !== "") {
    const n = Number(value);
    return Number.isFinite(n) ? n : null;
  }
  return null;
}

function stringOrNull(value: unknown): string | null {
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  return null;
}

/** `1764480000123-0` → 1764480000123. */
export function streamIdMs(id: string): number | null {
  const match = /^(\d+)-\d+$/.exec(id);
  return match ? Number(match[1]) : null;
}

/** `a` is at or before `b` in stream order (`<ms>-<seq>`, compared as numbers); false when either is not an id. */
export function streamIdAtMost(a: string, b: string): boolean {
  const pa = /^(\d+)-(\d+)$/.exec(a);
  const pb = /^(\d+)-(\d+)$/.exec(b);
  if (!pa || !pb) return false;
  const [ma, sa, mb, sb] = [pa[1]!, pa[2]!, pb[1]!, pb[2]!].map(BigInt) as [bigint, bigint, bigint, bigint];
  return ma < mb || (ma === mb && sa <= sb);
}

/**
 * XINFO STREAM's reply (a flat name, value list) → the stream's extent;
 * `decisionsAdded` is the caller's, from `<q>:stats` read with it.
 *   length 100019 … last-generated-id 1764480000123-0 … entries-added 120000 … first-entry [1764479990000-0, […]]
 * entries-added is Redis 7's: null before.
 */
export function eventStreamFromXinfo(reply: unknown, decisionsAdded: number | null): EventStreamExtent | null {
  if (!Array.isArray(reply)) return null;
  const fields = new Map<string, unknown>();
  for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), reply[i + 1]);
  const count = (v: unknown) => (typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? v : null);
  const length = count(fields.get("length"));
  if (length === null) return null;
  const first = fields.get("first-entry");
  const lastId = fields.get("last-generated-id");
  return {
    firstId: Array.isArray(first) && typeof first[0] === "string" ? first[0] : null,
    lastId: typeof lastId === "string" ? lastId : null,
    length,
    entriesAdded: count(fields.get("entries-added")),
    decisionsAdded,
  };
}

/** An XRANGE entry `[id, [field, value, …]]` → a DecisionEvent. */
export function eventFromEntry(id: string, flat: readonly string[]): DecisionEvent {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i]!, flat[i + 1]!);
  const ts = finiteOrNull(fields.get("ts"));
  const attemptText = fields.get("attempt");
  return {
    id,
    reason: fields.get("reason") ?? "",
    job: fields.get("job") ?? "",
    figures: fields.get("figures") ?? "",
    tsMs: ts ?? streamIdMs(id),
    gate: fields.get("gate") ?? null,
    attempt: attemptText === undefined || attemptText === "" ? null : finiteOrNull(attemptText),
  };
}

/** One `<q>:done` element (JSON text) → a DoneEntry; null when it is not a JSON object. */
export function parseDoneEntry(text: string): DoneEntry | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  const r = parsed as Record<string, unknown>;
  return {
    id: stringOrNull(r.id),
    firstTokenMs: finiteOrNull(r.first_token_ms),
    deadlineMs: finiteOrNull(r.deadline_ms),
    late: typeof r.late === "boolean" ? r.late : null,
    tokensOut: finiteOrNull(r.tokens_out),
    promptTokens: finiteOrNull(r.prompt_tokens),
    completionTokens: finiteOrNull(r.completion_tokens),
    attempt: finiteOrNull(r.attempt),
    enqueueTs: finiteOrNull(r.enqueue_ts),
    firstTokenTs: finiteOrNull(r.first_token_ts),
    doneTs: finiteOrNull(r.done_ts),
  };
}

/**
 * What a sample's field can be: PSI averages and stall rates are shares of
 * time (0–100; the kernel's avg10 never passes 100, the sampler caps its rate
 * at 100), memory and counters are never negative. A line with a value
 * outside is not the sidecar's sample (hand-edited, corrupted): skipped, so
 * it never becomes a peak.
 */
const PLAUSIBLE: ReadonlyArray<[keyof WatchSample, number, number]> = [
  ["psi_mem_some_avg10", 0, 100],
  ["psi_mem_some_rate", 0, 100],
  ["cg_psi_mem_some_avg10", 0, 100],
  ["cg_psi_mem_some_rate", 0, 100],
  ["cg_mem_current", 0, Number.MAX_SAFE_INTEGER],
  ["cg_mem_peak", 0, Number.MAX_SAFE_INTEGER],
  ["cg_mem_max", 0, Number.MAX_SAFE_INTEGER],
  ["cg_oom_kill", 0, Number.MAX_SAFE_INTEGER],
  ["stall_ms_p99", 0, Number.MAX_SAFE_INTEGER],
  ["cpu_idle_pct", 0, 100],
  ["queue_age_ms", 0, Number.MAX_SAFE_INTEGER],
  ["deadline_slack_ms", -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  ["si", 0, Number.MAX_SAFE_INTEGER],
];

/** The first field of a sample outside what it can be, as `field=value`; null when all are plausible. */
export function implausibleField(sample: WatchSample): string | null {
  for (const [field, min, max] of PLAUSIBLE) {
    const value = sample[field];
    if (typeof value === "number" && (value < min || value > max)) return `${field}=${value}`;
  }
  return null;
}

/**
 * An ISO-8601 date and time with its zone, as watch writes `ts`
 * (`2026-12-05T11:00:00.000Z`; an offset too) → ms; NaN for anything else.
 * Not Date.parse alone: it takes `"12"` or `"hello 1"` (years 2001-2012) and
 * rolls `2026-02-31` over into March (QA).
 */
export function isoTimestampMs(text: string): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/.exec(text);
  if (m === null) return NaN;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const date = new Date(Date.UTC(year, month - 1, day));
  if (date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day || hour > 23 || minute > 59 || second > 59) return NaN;
  return Date.parse(text);
}

/** The fields a watch sample carries, null when unread; a line with none of them (a gate's `--json` line) is no sample. */
const SAMPLE_FIELDS = [
  "psi_mem_some_avg10",
  "psi_mem_some_rate",
  "cg_psi_mem_some_avg10",
  "cg_psi_mem_some_rate",
  "cg_mem_current",
  "cg_mem_peak",
  "cg_mem_max",
  "cg_oom_kill",
  "stall_ms_p99",
  "cpu_idle_pct",
  "queue_age_ms",
  "deadline_slack_ms",
  "si",
] as const;

/**
 * One line of `watch --record` → a WatchSample; null when it is not a sample:
 * no ISO-8601 `ts`, or none of a sample's fields (every line of `drill --json
 * gate` has a `ts`: QA, each counted as a sample of nulls).
 */
export function parseSampleLine(line: string): WatchSample | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  const r = parsed as Record<string, unknown>;
  const tsMs = typeof r.ts === "string" ? isoTimestampMs(r.ts) : NaN;
  if (!Number.isFinite(tsMs) || !SAMPLE_FIELDS.some((field) => Object.hasOwn(r, field))) return null;
  return {
    tsMs,
    psi_mem_some_avg10: finiteOrNull(r.psi_mem_some_avg10),
    psi_mem_some_rate: finiteOrNull(r.psi_mem_some_rate),
    cg_psi_mem_some_avg10: finiteOrNull(r.cg_psi_mem_some_avg10),
    cg_psi_mem_some_rate: finiteOrNull(r.cg_psi_mem_some_rate),
    cg_mem_current: finiteOrNull(r.cg_mem_current),
    cg_mem_peak: finiteOrNull(r.cg_mem_peak),
    cg_mem_max: r.cg_mem_max === "max" ? "max" : finiteOrNull(r.cg_mem_max),
    cg_oom_kill: finiteOrNull(r.cg_oom_kill),
    cg_absent: Array.isArray(r.missing) && r.missing.some((m) => isMissing(m, "cg_oom_kill", (reason) => reason === CGROUP_ABSENT_REASON)),
    stall_ms_p99: finiteOrNull(r.stall_ms_p99),
    cpu_idle_pct: finiteOrNull(r.cpu_idle_pct),
    queue_age_ms: finiteOrNull(r.queue_age_ms),
    deadline_slack_ms: finiteOrNull(r.deadline_slack_ms),
    slack_partial: Array.isArray(r.missing) && r.missing.some((m) => isMissing(m, "deadline_slack_ms", (reason) => reason.startsWith(PARTIAL_ADMITTED_SCAN))),
    si: finiteOrNull(r.si),
    alarm: Array.isArray(r.alarm) ? r.alarm.filter((a): a is string => typeof a === "string") : [],
  };
}

/** A recorded sample's `missing` entry for `field` whose reason is the one `why` looks for. */
function isMissing(entry: unknown, field: string, why: (reason: string) => boolean): boolean {
  if (typeof entry !== "object" || entry === null) return false;
  const m = entry as Record<string, unknown>;
  return m.field === field && typeof m.reason === "string" && why(m.reason);
}

export function parseRecording(file: string, text: string): Recording {
  const reader = recordingReader(file);
  for (const line of text.split("\n")) reader.line(line);
  return reader.end();
}

/**
 * A recording read line by line as it arrives: a long-lived sidecar's file
 * can pass the longest string V8 makes (about 512 MiB), which a read of the
 * whole text could not hold ("Invalid string length").
 */
export function recordingReader(file: string): { line: (line: string) => void; end: () => Recording } {
  const samples: WatchSample[] = [];
  let badLines = 0;
  let implausibleLines = 0;
  const implausibleExamples: string[] = [];
  return {
    line(line: string): void {
      if (line.trim() === "") return;
      const sample = parseSampleLine(line);
      const odd = sample === null ? null : implausibleField(sample);
      if (sample && odd === null) {
        samples.push(sample);
        return;
      }
      badLines++;
      if (odd !== null) {
        implausibleLines++;
        if (implausibleExamples.length < 3) implausibleExamples.push(odd);
      }
    },
    end(): Recording {
      samples.sort((a, b) => a.tsMs - b.tsMs);
      return { file, samples, badLines, implausibleLines, implausibleExamples };
    },
  };
}

/**
 * Reads a recording from `input` (a file's or a pipe's stream) a line at a
 * time, never the whole text as one string; rejects on the stream's error.
 */
export function readRecordingStream(file: string, input: NodeJS.ReadableStream & { destroy: (err?: Error) => void }): Promise<Recording> {
  const reader = recordingReader(file);
  const decoder = new StringDecoder("utf8");
  // The unfinished line's pieces, joined once its newline comes: a line
  // spanning many chunks is not re-copied and re-split on every chunk.
  let carry: string[] = [];
  return new Promise((resolve, reject) => {
    input.on("data", (chunk: Buffer) => {
      try {
        const text = decoder.write(chunk);
        const lines = text.split("\n");
        const tail = lines.pop() ?? "";
        if (lines.length > 0) {
          carry.push(lines[0]!);
          lines[0] = carry.join("");
          carry = [];
        }
        for (const line of lines) reader.line(line);
        if (tail !== "") carry.push(tail);
      } catch (err) {
        // A line longer than a string can be: no sample, and no way to read on.
        input.destroy(err as Error);
      }
    });
    input.once("end", () => {
      carry.push(decoder.end());
      reader.line(carry.join(""));
      resolve(reader.end());
    });
    input.once("error", reject);
  });
}
