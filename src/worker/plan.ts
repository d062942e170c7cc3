import type { Job } from "../queue/job.js";

/**
 * The simulated worker's arithmetic, apart from any I/O: how much work a job
 * is (passes over the weights, KV bytes), and what its outcome was (first
 * token against the deadline). The loop in run.ts only sequences these.
 */

export interface WorkerConfig {
  /** Size of the mmapped weights file; every pass faults all of it. */
  weightsBytes: number;
  /** Anonymous memory held per admitted prompt token while the job is in flight. */
  kvBytesPerToken: number;
  /** Cap on each job's decode rate (models GPU compute time); passes slower than this slow the job. */
  decodeTokensPerS: number;
  /** Prompt tokens one prefill pass handles (chunked prefill). */
  prefillTokensPerPass: number;
  /** Jobs in flight at once on this worker (the seed: 8). */
  concurrency: number;
}

export const defaultWorkerConfig: WorkerConfig = {
  weightsBytes: 1024 ** 3,
  kvBytesPerToken: 4096,
  decodeTokensPerS: 30,
  prefillTokensPerPass: 2048,
  concurrency: 8,
};

/**
 * The work in one job. As on a real server, the first token comes out of the
 * last prefill pass (its logits); every further token is one decode pass.
 */
export interface JobPlan {
  /** ceil(prompt_tokens / prefill_tokens_per_pass), at least 1: the first token needs a forward pass. */
  prefillPasses: number;
  /** completion_tokens − 1 (the first token came from prefill); 0 for a 0- or 1-token completion. */
  decodePasses: number;
  /** Tokens the job produces: completion_tokens. */
  tokensOut: number;
  /** prompt_tokens × kv_bytes_per_token, touched during prefill, held until done. */
  kvBytes: number;
  /** Minimum time per decoded token from the rate cap (0: no cap). */
  decodeIntervalMs: number;
}

export function planJob(job: Pick<Job, "prompt_tokens" | "completion_tokens">, config: Pick<WorkerConfig, "kvBytesPerToken" | "prefillTokensPerPass" | "decodeTokensPerS">): JobPlan {
  return {
    prefillPasses: Math.max(1, Math.ceil(job.prompt_tokens / config.prefillTokensPerPass)),
    decodePasses: Math.max(0, job.completion_tokens - 1),
    tokensOut: job.completion_tokens,
    kvBytes: job.prompt_tokens * config.kvBytesPerToken,
    decodeIntervalMs: config.decodeTokensPerS > 0 ? 1000 / config.decodeTokensPerS : 0,
  };
}

/** The KV bytes prefill pass `pass` (0-based) writes: its share of the prompt's tokens. */
export function prefillKvSlice(pass: number, plan: JobPlan, promptTokens: number, prefillTokensPerPass: number): { start: number; end: number } {
  if (promptTokens === 0) return { start: 0, end: 0 };
  const bytesPerToken = plan.kvBytes / promptTokens;
  const startToken = Math.min(pass * prefillTokensPerPass, promptTokens);
  const endToken = Math.min((pass + 1) * prefillTokensPerPass, promptTokens);
  return { start: startToken * bytesPerToken, end: endToken * bytesPerToken };
}

/** How long to wait after a decode step so the job does not beat the rate cap; never negative. */
export function decodePaceMs(stepStartedAt: number, now: number, intervalMs: number): number {
  return Math.max(0, stepStartedAt + intervalMs - now);
}

export interface JobOutcome {
  /** now − enqueue_ts at the first token (the runbook's "enqueue to first useful token"). */
  firstTokenMs: number;
  late: boolean;
  /** enqueue_ts + deadline_ms − first token: negative when late. */
  slackAtFirstTokenMs: number;
  /** enqueue_ts → done. */
  totalMs: number;
}

export function jobOutcome(job: Pick<Job, "enqueue_ts" | "deadline_ms">, firstTokenAt: number, doneAt: number): JobOutcome {
  const firstTokenMs = firstTokenAt - job.enqueue_ts;
  return {
    firstTokenMs,
    late: firstTokenMs > job.deadline_ms,
    slackAtFirstTokenMs: job.deadline_ms - firstTokenMs,
    totalMs: doneAt - job.enqueue_ts,
  };
}

/** Per-job pass figures: every pass the job waited on, prefill and decode. */
export interface PassStats {
  passes: number;
  passUsTotal: number;
  passUsMax: number;
}

export function emptyPassStats(): PassStats {
  return { passes: 0, passUsTotal: 0, passUsMax: 0 };
}

export function addPass(stats: PassStats, us: number): void {
  stats.passes++;
  stats.passUsTotal += us;
  if (us > stats.passUsMax) stats.passUsMax = us;
}

/**
 * One entry of `<q>:done` (JSON), also the `--json` line:
 *   {"id":"7","first_token_ms":812,"deadline_ms":8000,"late":false,"tokens_out":256,...}
 */
export interface DoneRecord {
  id: string;
  worker: string;
  first_token_ms: number;
  deadline_ms: number;
  late: boolean;
  slack_ms: number;
  tokens_out: number;
  prompt_tokens: number;
  completion_tokens: number;
  attempt: number;
  host_class: string;
  enqueue_ts: number;
  first_token_ts: number;
  done_ts: number;
  total_ms: number;
  /** Passes this job waited on (prefill + decode) and their summed / worst time in µs: the stall the job saw. */
  passes: number;
  pass_us_total: number;
  pass_us_max: number;
  kv_bytes: number;
}

export function doneRecord(job: Job, worker: string, firstTokenAt: number, doneAt: number, tokensOut: number, passes: PassStats, kvBytes: number): DoneRecord {
  // A first token before a give-back (a rollback, a worker stopped or killed) is the job's first token: the
  // client had it then. QA: jobs on time at 778 ms were recorded late at 10.8 s, their second run's first token.
  const givenBack = job[GIVEN_BACK_FIELD];
  const firstToken = typeof givenBack === "number" && Number.isFinite(givenBack) && givenBack < firstTokenAt ? givenBack : firstTokenAt;
  const outcome = jobOutcome(job, firstToken, doneAt);
  return {
    id: job.id,
    worker,
    first_token_ms: outcome.firstTokenMs,
    deadline_ms: job.deadline_ms,
    late: outcome.late,
    slack_ms: outcome.slackAtFirstTokenMs,
    tokens_out: tokensOut,
    prompt_tokens: job.prompt_tokens,
    completion_tokens: job.completion_tokens,
    attempt: job.attempt,
    host_class: job.host_class,
    enqueue_ts: job.enqueue_ts,
    first_token_ts: firstToken,
    done_ts: doneAt,
    total_ms: outcome.totalMs,
    passes: passes.passes,
    pass_us_total: passes.passUsTotal,
    pass_us_max: passes.passUsMax,
    kv_bytes: kvBytes,
  };
}

/** `done job=7 first_token_ms=812 deadline_ms=8000 late=0 tokens=256 pass_ms_avg=12.4 pass_ms_max=40.1 passes=268 attempt=0` */
export function formatDoneLine(record: DoneRecord): string {
  const avg = record.passes > 0 ? record.pass_us_total / record.passes / 1000 : 0;
  return (
    `done job=${record.id} first_token_ms=${record.first_token_ms} deadline_ms=${record.deadline_ms} late=${record.late ? 1 : 0}` +
    ` tokens=${record.tokens_out} pass_ms_avg=${avg.toFixed(1)} pass_ms_max=${(record.pass_us_max / 1000).toFixed(1)}` +
    ` passes=${record.passes} attempt=${record.attempt}`
  );
}

// ---- first-token mark -------------------------------------------------------
// The sidecar reads the admitted and working lists and skips jobs whose payload
// carries `first_token_ts` (sampler/step.ts firstTokenSeen). The worker marks
// the payload in its working list by appending that field before the closing
// brace, byte for byte otherwise (payloads are Buffers: LREM needs the exact
// bytes), and renames it when it gives the job back (givenBackPayload).

const MARK_FIELD = "first_token_ts";
const MARK_SUFFIX = new RegExp(`,"${MARK_FIELD}":\\d{1,16}(\\s*\\}\\s*)$`);

/** `{"id":"7",...}` → `{"id":"7",...,"first_token_ts":1764480000935}`; null when the payload does not end in `}`. */
export function markFirstToken(payload: Buffer, firstTokenTs: number): Buffer | null {
  // latin1 maps bytes 1:1, so non-UTF-8 bytes elsewhere survive the round trip.
  const text = payload.toString("latin1");
  const close = text.lastIndexOf("}");
  if (close < 0 || text.slice(close + 1).trim() !== "") return null;
  const body = text.slice(0, close).trimEnd();
  const separator = body.endsWith("{") ? "" : ",";
  return Buffer.from(`${text.slice(0, close)}${separator}"${MARK_FIELD}":${Math.round(firstTokenTs)}${text.slice(close)}`, "latin1");
}

/** The payload as it was before markFirstToken (unchanged when it carries no mark of ours). */
export function unmarkFirstToken(payload: Buffer): Buffer {
  const text = payload.toString("latin1");
  const stripped = text.replace(MARK_SUFFIX, "$1");
  return stripped === text ? payload : Buffer.from(stripped, "latin1");
}

const GIVEN_BACK_FIELD = "given_back_first_token_ts";

/**
 * The payload a give-back returns to admitted: the mark renamed
 * `given_back_first_token_ts`. The job starts over and waits for a first
 * token again (the sidecar reads only `first_token_ts`), while the report can
 * still tell a job whose first token came before a rollback or a peer gave it
 * back from one that never had one (QA: six on-time jobs reported late after a
 * mid-run rollback). A payload given back before keeps its first such time:
 * one key, never two (a repeated key is a bad payload).
 */
export function givenBackPayload(payload: Buffer): Buffer {
  const text = payload.toString("latin1");
  if (!MARK_SUFFIX.test(text)) return payload;
  if (text.includes(`"${GIVEN_BACK_FIELD}":`)) return unmarkFirstToken(payload);
  return Buffer.from(text.replace(MARK_SUFFIX, (mark) => mark.replace(`"${MARK_FIELD}"`, `"${GIVEN_BACK_FIELD}"`)), "latin1");
}

/**
 * Entries of a worker's working list that no job of this run accounts for:
 * what a BLMOVE whose reply was lost left there, to be run. `held` is every
 * payload this run has a job for, the one just taken included (it is listed
 * before it starts); each accounts for one entry, so a payload listed twice
 * with one job is one stray. Compared without the first-token mark: a mark
 * applied with its reply lost lists the marked bytes while the job holds the
 * plain ones.
 */
export function strayPayloads(listed: readonly Buffer[], held: readonly Buffer[]): Buffer[] {
  const key = (payload: Buffer): string => unmarkFirstToken(payload).toString("latin1");
  const counts = new Map<string, number>();
  for (const payload of held) counts.set(key(payload), (counts.get(key(payload)) ?? 0) + 1);
  const strays: Buffer[] = [];
  for (const payload of listed) {
    const n = counts.get(key(payload)) ?? 0;
    if (n > 0) counts.set(key(payload), n - 1);
    else strays.push(payload);
  }
  return strays;
}

// ---- slots ---------------------------------------------------------------------

/**
 * Jobs already in our working list that have not started (strays a lost
 * BLMOVE reply left, the job taken with them) wait for a slot like any job,
 * and start before anything new is taken. --max-jobs counts every job
 * started; what waits past it stays in the working list and goes back to the
 * head of admitted with the stop, as held jobs do on any stop.
 */
export interface SlotState {
  /** Ours (in the working list), not started yet. */
  waiting: number;
  inFlight: number;
  /** Jobs this run has started: what --max-jobs counts. */
  started: number;
}

/** After starting `start` waiting jobs: `take` (BLMOVE), `wait` for a job to finish, or `stop` (--max-jobs reached, none running). */
export interface SlotPlan {
  start: number;
  then: "take" | "wait" | "stop";
}

export function planSlots(state: SlotState, limits: { concurrency: number; maxJobs: number | null }): SlotPlan {
  const free = Math.max(0, limits.concurrency - state.inFlight);
  const allowed = limits.maxJobs === null ? Infinity : Math.max(0, limits.maxJobs - state.started);
  const start = Math.min(state.waiting, free, allowed);
  const inFlight = state.inFlight + start;
  if (allowed - start <= 0) return { start, then: inFlight === 0 ? "stop" : "wait" };
  if (state.waiting - start > 0 || inFlight >= limits.concurrency) return { start, then: "wait" };
  return { start, then: "take" };
}

// ---- worker identity ---------------------------------------------------------

/**
 * Default worker id: the cgroup name, so a restarted worker for the same
 * queue and cgroup finds its own `<q>:working:<id>` list. Characters that
 * cannot be part of a Redis key name here become `-`.
 */
export function defaultWorkerId(cgroupName: string): string {
  const cleaned = cgroupName.replace(/[^A-Za-z0-9_.-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 100);
  return cleaned === "" ? "worker" : cleaned;
}

/** Why the worker stopped; `signal` and `supervisor_gone` give in-flight jobs back. */
export type StopReason = "max_jobs" | "idle" | "duration" | "signal" | "supervisor_gone" | "failed";

/** How long writing the weights may take before the worker gives up: 16 MiB/s at worst, at least 2 min. */
export function weightsReadyTimeoutMs(sizeBytes: number): number {
  return Math.max(120_000, Math.ceil(sizeBytes / (16 * 1024 * 1024)) * 1000);
}
