import type { Limit } from "../cgroup/memoryFiles.js";
import { cpuUsageBetween, type CpuTimes } from "../host/cpu.js";
import type { Reading } from "../host/kernelFile.js";
import { stallRatePct, type Psi } from "../host/psi.js";
import { swapCounters, type Vmstat } from "../host/vmstat.js";
import { decodeJob, deadlineSlackMs, MAX_MARKED_PAYLOAD_BYTES, type Job } from "../queue/job.js";
import { emptyStallWindow, nextStallWindow, stallMsP99, stallReading, type StallWindow } from "../host/stallWindow.js";
import { gateModeOf, modeValueField, UNSET_MODE, type StoredMode } from "../queue/mode.js";
import { parseCount } from "../util/counters.js";

/**
 * The sidecar's pure step (oomd's `next(prev, raw, dt)`): raw readings of one
 * sample in, the JSON sample of DESIGN.md's "Host signals" out. Cumulative
 * counters become rates against the previous state; a signal that cannot be
 * read or computed is null with an entry in `missing`, never 0.
 */

/** The worker cgroup's files of one sample (v1 or v2 already mapped to one shape). */
export interface CgroupRaw {
  /** The dir holding limits and events, for messages. */
  dir: string;
  /** The cgroup's own memory.pressure; a failed reading on legacy v1 (it has none). */
  pressure: Reading<Psi>;
  /** false on legacy v1: its cg PSI figures are absent by layout, not unreadable. */
  hasPressure: boolean;
  pressureFile: string;
  current: Reading<number>;
  max: Reading<Limit>;
  peak: Reading<number>;
  oomKill: Reading<number>;
  swapCurrent: Reading<number>;
  /** memory.swap.max, or v1 memsw.limit − limit: 0 means swap is disabled. */
  swapMax: Reading<Limit>;
}

/** One Redis round trip's worth of queue state (payloads as Buffers: see job.ts). */
export interface QueueRaw {
  /** Where it was read (URL, password redacted), for `missing` entries. */
  source: string;
  /** The queue's name: `missing` entries name its keys (`jobs:mode`), as an operator types them into redis-cli. */
  queue: string;
  queueLen: number;
  /** LINDEX <q> 0: the oldest queued job, null when the queue is empty. */
  head: Buffer | null;
  /** <q>:admitted: admitted, not yet taken by a worker. */
  admitted: Buffer[];
  /** <q>:working:*: held by a worker; waiting for a first token unless marked (see firstTokenSeen). */
  working: Buffer[];
  /** false when the working lists are the `<q>:workers` registry's only: no SCAN found them (huge keyspace, or none done yet). */
  workingScanned: boolean;
  /** Jobs in <q> or <q>:admitted that may be retries on this host class (Redis pre-filters). */
  retryCandidates: Buffer[];
  /** HGETALL <q>:stats. */
  stats: Record<string, string>;
  /** GET <q>:mode (`gate mode` sets it), null when the key is not there. */
  mode: string | null;
  /** Keys holding what drill never writes there: read as empty, their fields null (fieldsOfKey). */
  wrongTyped: WrongTypedKey[];
  /** How much of the ready and admitted lists were read (read.ts SAMPLE_LIST_SCAN_CAP). */
  scan: QueueScan;
}

/** How much of the ready and admitted lists one sample read; `…Scanned < …Len` is a truncated scan. */
export interface QueueScan {
  readyLen: number;
  readyScanned: number;
  admittedLen: number;
  admittedScanned: number;
}

/**
 * How deadline_slack_ms's `missing` reason starts when the sample read only
 * the oldest part of `<q>:admitted`: a smaller slack further back is not
 * seen, so the smallest is not known. The live view and the report find it
 * by this.
 */
export const PARTIAL_ADMITTED_SCAN = "read the oldest";

/** deadline_slack_ms's `missing` reason for a truncated admitted scan: `read the oldest 2000 of 9893 admitted jobs …`. */
export function partialAdmittedReason(scan: QueueScan): string {
  return `${PARTIAL_ADMITTED_SCAN} ${scan.admittedScanned} of ${scan.admittedLen} admitted jobs (a sample reads at most ${scan.admittedScanned}): a smaller slack further back is not seen`;
}

/** The queue keys a sample reads besides the lever (which fails closed on any type: gateModeOf); `working`: any `<q>:working:<worker>`. */
export type QueueKeyRole = "ready" | "admitted" | "stats" | "workers" | "events" | "working";

export const isQueueKeyRole = (role: string): role is QueueKeyRole => ["ready", "admitted", "stats", "workers", "events", "working"].includes(role);

/** A queue key of the wrong type; `reason` is the scripts' wrong_type words, `jobs is a string, not a list (…)`. */
export interface WrongTypedKey {
  role: QueueKeyRole;
  key: string;
  reason: string;
}

/**
 * The sample fields that come from a key: a key of the wrong type nulls only
 * these. The worker registry feeds deadline_slack_ms only when the working
 * lists come from it (huge keyspace); a working list feeds it always (its
 * jobs are not counted: the smallest slack is not known); the events stream
 * feeds the reject lines, no field.
 */
export function fieldsOfKey(role: QueueKeyRole, workingScanned: boolean): string[] {
  switch (role) {
    case "ready":
      return ["queue_len", "queue_age_ms", "queue_head_slack_ms"];
    case "admitted":
    case "working":
      return ["deadline_slack_ms"];
    case "workers":
      return workingScanned ? [] : ["deadline_slack_ms"];
    case "stats":
      return ["tokens_out", "retry_count", "admitted", "rejected"];
    case "events":
      return [];
  }
}

export interface RawReadings {
  /** Monotonic clock (performance.now()): rates must not jump with the wall clock. */
  monoMs: number;
  hostPsi: Reading<Psi>;
  vmstat: Reading<Vmstat>;
  cpu: Reading<CpuTimes>;
  /** Failed when there is no cgroup hierarchy at all or no worker cgroup to name. */
  cgroup: Reading<CgroupRaw>;
  /** The host files read, named in `missing` entries for rates that do not exist yet. */
  files: { hostPsi: string; vmstat: string; cpu: string };
  queue: Reading<QueueRaw>;
}

export type GateModeField = "admit" | "reject_all";

/** A field that is null because its source could not be read (or no rate exists yet). */
export interface MissingSignal {
  field: string;
  file: string;
  reason: string;
}

/** One sample, field names exactly as DESIGN.md. */
export interface Sample {
  ts: string;
  queue_len: number | null;
  queue_age_ms: number | null;
  queue_head_slack_ms: number | null;
  deadline_slack_ms: number | null;
  psi_mem_some_avg10: number | null;
  psi_mem_full_avg10: number | null;
  psi_mem_some_total_us: number | null;
  psi_mem_some_rate: number | null;
  cg_psi_mem_some_avg10: number | null;
  cg_psi_mem_some_rate: number | null;
  si: number | null;
  so: number | null;
  cg_swap_current: number | null;
  refault_rate: number | null;
  cg_mem_current: number | null;
  cg_mem_max: Limit | null;
  cg_mem_peak: number | null;
  cg_oom_kill: number | null;
  cpu_idle_pct: number | null;
  cpu_iowait_pct: number | null;
  tokens_out: number | null;
  retry_count: number | null;
  admitted: number | null;
  rejected: Record<string, number> | null;
  /** The gate's lever (`<q>:mode`): `admit` or `reject_all`; no key is `admit`, as the gate reads it. */
  gate_mode: GateModeField | null;
  stall_ms_p99: number | null;
  /** Active alarms after this sample (filled by the alarm machine). */
  alarm: string[];
  missing: MissingSignal[];
}

/**
 * read.ts's reason when the worker cgroup's dir is not there (yet, or any
 * more); report finds it again in a recorded sample's `missing`.
 */
export const CGROUP_ABSENT_REASON = "worker cgroup does not exist";

/** What the alarms need beyond the JSON fields. */
export interface SampleFacts {
  /** Jobs with attempt > 0 seen in the ready queue or the admitted list. */
  retriedJobs: Array<Pick<Job, "id" | "attempt" | "host_class">>;
  /** Part of the ready or admitted list was not read: a retried job there is not in retriedJobs, so none seen is not none there. */
  retriedJobsPartial: boolean;
  /** The cgroup's swap allowance (0: swap disabled), null when unknown. */
  cgSwapMax: Limit | null;
  cgDir: string | null;
  /** No worker cgroup this sample (not there yet or any more, or none to name): one that shows up later is new. */
  cgAbsent: boolean;
  /**
   * The worker cgroup is there with a memory.pressure file: its null PSI
   * figures are unreadable, not absent (no cgroup, legacy v1, a hybrid twin
   * nobody created).
   */
  cgPsiExpected: boolean;
}

export interface SamplerState {
  monoMs: number;
  pswpin: number | null;
  pswpout: number | null;
  workingsetRefault: number | null;
  hostPsiTotalUs: number | null;
  cgPsiTotalUs: number | null;
  cpu: CpuTimes | null;
  /** stall_ms_p99's window, the gate's step (host/stallWindow.ts). */
  stall: StallWindow;
  /**
   * Valid jobs decoded last sample, by payload bytes: the same payloads come
   * back every second and a full decode each time is most of a sample's CPU.
   */
  decodedJobs: ReadonlyMap<string, Job>;
}

const round2 = (x: number): number => Math.round(x * 100) / 100;

type CounterDelta = { ok: true; delta: number; elapsedMs: number } | { ok: false; reason: string };

/** Delta of a cumulative counter since the previous sample, or why there is none. */
function counterDelta(prev: SamplerState | null, prevValue: number | null, next: number, elapsedMs: number): CounterDelta {
  if (prev === null) return { ok: false, reason: "first sample" };
  if (prevValue === null) return { ok: false, reason: "no previous reading" };
  if (elapsedMs <= 0) return { ok: false, reason: "no time passed" };
  if (next < prevValue) return { ok: false, reason: `counter reset (${prevValue} -> ${next})` };
  return { ok: true, delta: next - prevValue, elapsedMs };
}

export function nextSample(prev: SamplerState | null, raw: RawReadings, nowMs: number): { state: SamplerState; sample: Sample; facts: SampleFacts } {
  const missing: MissingSignal[] = [];
  const lack = (field: string, file: string, reason: string): null => {
    missing.push({ field, file, reason });
    return null;
  };
  const elapsedMs = prev === null ? 0 : raw.monoMs - prev.monoMs;
  const perSecond = (field: string, file: string, prevValue: number | null, next: number | null): number | null => {
    if (next === null) return null; // the reading's own entry says why
    const d = counterDelta(prev, prevValue, next, elapsedMs);
    return d.ok ? round2((d.delta * 1000) / d.elapsedMs) : lack(field, file, d.reason);
  };

  // Host PSI: /proc/pressure/memory
  const hostPsi = raw.hostPsi.ok ? raw.hostPsi.value : null;
  if (!raw.hostPsi.ok) {
    for (const field of ["psi_mem_some_avg10", "psi_mem_full_avg10", "psi_mem_some_total_us", "psi_mem_some_rate"]) {
      lack(field, raw.hostPsi.file, raw.hostPsi.reason);
    }
  }
  const hostFull = hostPsi?.full ?? null;
  if (hostPsi && !hostFull) lack("psi_mem_full_avg10", raw.files.hostPsi, "no full line (older kernel)");
  const psiRate = hostPsi ? stallRate("psi_mem_some_rate", raw.files.hostPsi, prev, prev?.hostPsiTotalUs ?? null, hostPsi.some.total, elapsedMs, lack) : null;

  // Host counters: /proc/vmstat (host-wide: a neighbour's swap-in shows here too)
  const counters = raw.vmstat.ok ? swapCounters(raw.vmstat.value) : { pswpin: null, pswpout: null, workingsetRefault: null };
  const vmstatFile = raw.files.vmstat;
  const counter = (field: string, name: string, value: number | null): number | null => {
    if (!raw.vmstat.ok) return lack(field, raw.vmstat.file, raw.vmstat.reason);
    if (value === null) return lack(field, vmstatFile, `no ${name} counter`);
    return value;
  };
  const pswpin = counter("si", "pswpin", counters.pswpin);
  const pswpout = counter("so", "pswpout", counters.pswpout);
  const refault = counter("refault_rate", "workingset_refault", counters.workingsetRefault);
  const si = perSecond("si", vmstatFile, prev?.pswpin ?? null, pswpin);
  const so = perSecond("so", vmstatFile, prev?.pswpout ?? null, pswpout);
  const refaultRate = perSecond("refault_rate", vmstatFile, prev?.workingsetRefault ?? null, refault);

  // CPU: /proc/stat (idle only; iowait is not spare capacity)
  let cpuIdle: number | null = null;
  let cpuIowait: number | null = null;
  if (!raw.cpu.ok) {
    lack("cpu_idle_pct", raw.cpu.file, raw.cpu.reason);
    lack("cpu_iowait_pct", raw.cpu.file, raw.cpu.reason);
  } else {
    const reason = prev === null ? "first sample" : prev.cpu === null ? "no previous reading" : null;
    const usage = prev?.cpu ? cpuUsageBetween(prev.cpu, raw.cpu.value) : null;
    if (usage) {
      cpuIdle = round2(usage.idlePct);
      cpuIowait = round2(usage.iowaitPct);
    } else {
      const why = reason ?? "no ticks passed or counters went back";
      lack("cpu_idle_pct", raw.files.cpu, why);
      lack("cpu_iowait_pct", raw.files.cpu, why);
    }
  }

  // Worker cgroup
  const cg = raw.cgroup.ok ? raw.cgroup.value : null;
  const cgField = <T>(field: string, reading: Reading<T> | null): T | null => {
    if (!raw.cgroup.ok) return lack(field, raw.cgroup.file, raw.cgroup.reason);
    if (reading === null) return null;
    return reading.ok ? reading.value : lack(field, reading.file, reading.reason);
  };
  const cgPsi = cgField("cg_psi_mem_some_avg10", cg?.pressure ?? null);
  let cgPsiRate: number | null = null;
  if (cg && cgPsi) {
    cgPsiRate = stallRate("cg_psi_mem_some_rate", cg.pressureFile, prev, prev?.cgPsiTotalUs ?? null, cgPsi.some.total, elapsedMs, lack);
  } else if (cg && !cg.pressure.ok) {
    lack("cg_psi_mem_some_rate", cg.pressure.file, cg.pressure.reason);
  } else if (!raw.cgroup.ok) {
    lack("cg_psi_mem_some_rate", raw.cgroup.file, raw.cgroup.reason);
  }

  // stall_ms_p99: the worker cgroup's PSI when readable, else the host's.
  const stallNow = stallReading(cgPsi ? cgPsi.some.total : null, hostPsi ? hostPsi.some.total : null, raw.monoMs);
  const stall = nextStallWindow(prev?.stall ?? emptyStallWindow, stallNow);
  const stallP99 = stallMsP99(stall);
  if (stallP99 === null) {
    const file = stallNow?.source === "cgroup" && cg ? cg.pressureFile : raw.files.hostPsi;
    lack("stall_ms_p99", file, stallNow === null ? "no PSI readable" : prev === null ? "first sample" : "no stall rate in the window yet");
  }

  // Queue (one Redis round trip; null + missing when Redis is unreachable)
  const decodedJobs = new Map<string, Job>();
  const decode = (payload: Buffer): Job | string => {
    const key = payload.toString("latin1");
    const cached = prev?.decodedJobs.get(key) ?? decodedJobs.get(key);
    if (cached) {
      decodedJobs.set(key, cached);
      return cached;
    }
    // Admitted and working payloads may carry the worker's marks (MAX_MARKED_PAYLOAD_BYTES).
    const decoded = decodeJob(payload, nowMs, MAX_MARKED_PAYLOAD_BYTES);
    if (!decoded.ok) return decoded.reason;
    decodedJobs.set(key, decoded.job);
    return decoded.job;
  };
  const queue = readQueueFields(raw.queue, nowMs, lack, decode);

  const sample: Sample = {
    ts: new Date(nowMs).toISOString(),
    queue_len: queue.queueLen,
    queue_age_ms: queue.queueAgeMs,
    queue_head_slack_ms: queue.queueHeadSlackMs,
    deadline_slack_ms: queue.deadlineSlackMs,
    psi_mem_some_avg10: hostPsi ? hostPsi.some.avg10 : null,
    psi_mem_full_avg10: hostFull ? hostFull.avg10 : null,
    psi_mem_some_total_us: hostPsi ? hostPsi.some.total : null,
    psi_mem_some_rate: psiRate,
    cg_psi_mem_some_avg10: cgPsi ? cgPsi.some.avg10 : null,
    cg_psi_mem_some_rate: cgPsiRate,
    si,
    so,
    cg_swap_current: cgField("cg_swap_current", cg?.swapCurrent ?? null),
    refault_rate: refaultRate,
    cg_mem_current: cgField("cg_mem_current", cg?.current ?? null),
    cg_mem_max: cgField("cg_mem_max", cg?.max ?? null),
    cg_mem_peak: cgField("cg_mem_peak", cg?.peak ?? null),
    cg_oom_kill: cgField("cg_oom_kill", cg?.oomKill ?? null),
    cpu_idle_pct: cpuIdle,
    cpu_iowait_pct: cpuIowait,
    tokens_out: queue.tokensOut,
    retry_count: queue.retryCount,
    admitted: queue.admitted,
    rejected: queue.rejected,
    gate_mode: queue.gateMode,
    stall_ms_p99: stallP99 === null ? null : round2(stallP99),
    alarm: [],
    missing,
  };
  const state: SamplerState = {
    monoMs: raw.monoMs,
    pswpin,
    pswpout,
    workingsetRefault: refault,
    hostPsiTotalUs: hostPsi ? hostPsi.some.total : null,
    cgPsiTotalUs: cgPsi ? cgPsi.some.total : null,
    cpu: raw.cpu.ok ? raw.cpu.value : null,
    stall,
    decodedJobs,
  };
  const swapMax = cg && cg.swapMax.ok ? cg.swapMax.value : null;
  const facts: SampleFacts = {
    retriedJobs: queue.retriedJobs,
    retriedJobsPartial: queue.retriedJobsPartial,
    cgSwapMax: swapMax,
    cgDir: cg ? cg.dir : null,
    cgAbsent: cg === null,
    cgPsiExpected: cg !== null && cg.hasPressure && (cg.pressure.ok || cg.pressure.reason !== "missing"),
  };
  return { state, sample, facts };
}

function stallRate(
  field: string,
  file: string,
  prev: SamplerState | null,
  prevTotalUs: number | null,
  totalUs: number,
  elapsedMs: number,
  lack: (field: string, file: string, reason: string) => null,
): number | null {
  const d = counterDelta(prev, prevTotalUs, totalUs, elapsedMs);
  if (!d.ok) return lack(field, file, d.reason);
  const pct = stallRatePct(prevTotalUs ?? 0, totalUs, d.elapsedMs);
  return pct === null ? lack(field, file, "no rate") : round2(pct);
}

/**
 * How gate_mode's `missing` reason starts when <q>:mode is not a mode: the gate
 * rejects every job on it (fail closed). The text views show reject_all from it.
 */
export const MODE_FAILS_CLOSED = "the gate reads it as reject_all (fail closed):";

/** The sample script's <q>:mode (read.ts) as read_mode saw it: null unset, `(a hash)` a key of another type, else its string. */
function storedModeOf(mode: string | null): StoredMode {
  if (mode === null) return UNSET_MODE;
  const other = /^\(a (\w+)\)$/.exec(mode);
  return other ? { type: other[1]!, value: null } : { type: "string", value: mode };
}

interface QueueFields {
  queueLen: number | null;
  queueAgeMs: number | null;
  queueHeadSlackMs: number | null;
  deadlineSlackMs: number | null;
  tokensOut: number | null;
  retryCount: number | null;
  admitted: number | null;
  rejected: Record<string, number> | null;
  gateMode: GateModeField | null;
  retriedJobs: SampleFacts["retriedJobs"];
  retriedJobsPartial: boolean;
}

const QUEUE_FIELDS = ["queue_len", "queue_age_ms", "queue_head_slack_ms", "deadline_slack_ms", "tokens_out", "retry_count", "admitted", "rejected", "gate_mode"];

function readQueueFields(
  reading: Reading<QueueRaw>,
  nowMs: number,
  lack: (field: string, file: string, reason: string) => null,
  decode: (payload: Buffer) => Job | string,
): QueueFields {
  if (!reading.ok) {
    for (const field of QUEUE_FIELDS) lack(field, reading.file, reading.reason);
    return {
      queueLen: null,
      queueAgeMs: null,
      queueHeadSlackMs: null,
      deadlineSlackMs: null,
      tokensOut: null,
      retryCount: null,
      admitted: null,
      rejected: null,
      gateMode: null,
      retriedJobs: [],
      retriedJobsPartial: false,
    };
  }
  const q = reading.value;
  const wrongFields = new Set<string>();
  for (const wrong of q.wrongTyped) {
    for (const field of fieldsOfKey(wrong.role, q.workingScanned)) {
      wrongFields.add(field);
      lack(field, `${q.source} ${wrong.key}`, `redis key ${wrong.reason}`);
    }
  }
  const unlessWrong = <T>(field: string, value: T): T | null => (wrongFields.has(field) ? null : value);
  // An empty queue has no waiting work: age 0 (it "looks fine"), no head slack.
  let queueAgeMs: number | null = 0;
  let queueHeadSlackMs: number | null = null;
  if (q.head !== null) {
    const head = decode(q.head);
    if (typeof head !== "string") {
      queueAgeMs = nowMs - head.enqueue_ts;
      queueHeadSlackMs = deadlineSlackMs(head, nowMs);
    } else {
      lack("queue_age_ms", `${q.source} LINDEX ${q.queue} 0`, `undecodable head job: ${head}`);
      lack("queue_head_slack_ms", `${q.source} LINDEX ${q.queue} 0`, `undecodable head job: ${head}`);
      queueAgeMs = null;
    }
  }

  // Smallest slack over admitted jobs still waiting for their first token;
  // unknown when only the oldest part of the admitted list was read.
  const admittedPartial = q.scan.admittedScanned < q.scan.admittedLen;
  if (admittedPartial) lack("deadline_slack_ms", `${q.source} ${q.queue}:admitted`, partialAdmittedReason(q.scan));
  let slack: number | null = null;
  for (const held of admittedPartial ? [] : [q.admitted, q.working]) {
    for (let k = 0; k < held.length; k++) {
      const job = decode(held[k]!);
      if (typeof job === "string" || firstTokenSeen(job)) continue; // malformed: the gate dead-letters it
      const s = deadlineSlackMs(job, nowMs);
      if (slack === null || s < slack) slack = s;
    }
  }

  const retriedJobs: SampleFacts["retriedJobs"] = [];
  for (const payload of q.retryCandidates) {
    const job = decode(payload);
    if (typeof job !== "string" && job.attempt > 0) retriedJobs.push({ id: job.id, attempt: job.attempt, host_class: job.host_class });
  }

  // Counters HINCRBY'd by the gate and worker: absent means never incremented, i.e. 0.
  const statsFile = `${q.source} ${q.queue}:stats`;
  const stat = (field: string, key: string): number | null => {
    const text = q.stats[key];
    if (text === undefined) return 0;
    return parseCount(text) ?? lack(field, statsFile, `${key} is not a count: "${text.slice(0, 20)}"`);
  };
  const rejected: Record<string, number> = {};
  for (const [key, value] of Object.entries(q.stats).sort(([a], [b]) => a.localeCompare(b))) {
    const count = key.startsWith("reject_") ? parseCount(value) : null;
    if (count !== null) rejected[key] = count;
  }
  // As the gate reads it (gateModeOf): no key is admit. Anything else is not a
  // mode: null, and the reason says what the gate does with it, in its words.
  const stored = storedModeOf(q.mode);
  const notAMode = modeValueField(stored);
  const gateMode = notAMode === null ? gateModeOf(stored) : lack("gate_mode", `${q.source} ${q.queue}:mode`, `${MODE_FAILS_CLOSED} ${notAMode}`);
  return {
    queueLen: unlessWrong("queue_len", q.queueLen),
    queueAgeMs: unlessWrong("queue_age_ms", queueAgeMs),
    queueHeadSlackMs: unlessWrong("queue_head_slack_ms", queueHeadSlackMs),
    deadlineSlackMs: admittedPartial ? null : unlessWrong("deadline_slack_ms", slack),
    tokensOut: unlessWrong("tokens_out", stat("tokens_out", "tokens_out")),
    retryCount: unlessWrong("retry_count", stat("retry_count", "retry_count")),
    admitted: unlessWrong("admitted", stat("admitted", "admitted")),
    rejected: unlessWrong("rejected", rejected),
    gateMode,
    retriedJobs,
    retriedJobsPartial: admittedPartial || q.scan.readyScanned < q.scan.readyLen,
  };
}

/**
 * A job the worker holds counts as waiting for its first token unless its
 * payload says otherwise (`first_token_ts`, ms since the epoch). Assumption
 * shared with the worker: it marks (LSETs) or moves a job at its first token.
 */
export function firstTokenSeen(job: Job): boolean {
  const mark = (job as Record<string, unknown>).first_token_ts;
  return typeof mark === "number" && Number.isFinite(mark);
}
