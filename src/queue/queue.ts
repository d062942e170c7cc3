import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { nackReason, type GateMode, type RejectKind } from "../gate/policy.js";
import { parseDecisionRecord, type DecisionRecord } from "./decisionRecord.js";
import { decodeJob, encodeJob, type Job } from "./job.js";
import { queueKeys, type QueueKeys } from "./keys.js";
import { gateModeOf, type StoredMode } from "./mode.js";
import { admitScript, deadScript, KEY_REFUSAL_MARK, pushScript, readModeScript, recoverScript, rejectScript, releaseScript, SEQ_EXHAUSTED_MARK, setModeScript } from "./scripts.js";
import { gotNoReply, NotSentAtStop, runScript } from "./redis.js";
import { answeredWithRefusal } from "./refusal.js";

/** What the packer asks for; the queue adds id, enqueue_ts, attempt. */
/** A flip of `<q>:mode` as `<q>:events` records it: the host PSI it was set at, and who set it. */
export interface ModeMeta {
  forced: boolean;
  psi: string;
  /** Host PSI avg60 of a forced re-admit: the refusal reads avg10 and avg60, and either may be what was forced over. */
  psiAvg60?: string;
  /** Who moved the lever: `gate mode` by hand, up opening admission, or rollback's deny-all. */
  by: "gate_mode" | "up" | "rollback" | "rollback_queue";
  nowMs?: number;
}

export interface JobSpec {
  promptTokens: number;
  completionTokens: number;
  files: number;
  deadlineMs: number;
  hostClass: string;
  /** How long the job already waited upstream: enqueue_ts = now − upstreamAgeMs. */
  upstreamAgeMs?: number;
}

/** A job as the packer makes it, before the push script gives it its id. */
export type UnnumberedJob = Pick<Job, "prompt_tokens" | "completion_tokens" | "files" | "enqueue_ts" | "deadline_ms" | "attempt" | "host_class">;

/** The job a spec asks for: enqueue_ts fixed here, once, so every re-send of its push carries the same job. */
export function unnumberedJob(spec: JobSpec, nowMs: number = Date.now()): UnnumberedJob {
  return {
    prompt_tokens: spec.promptTokens,
    completion_tokens: spec.completionTokens,
    files: spec.files,
    enqueue_ts: nowMs - (spec.upstreamAgeMs ?? 0),
    deadline_ms: spec.deadlineMs,
    attempt: 0,
    host_class: spec.hostClass,
  };
}

/**
 * The payload as encodeJob writes it, split where the id goes: the script
 * joins before .. id .. after, so the bytes on the list are encodeJob's.
 */
export function payloadAroundId(job: UnnumberedJob): [string, string] {
  const head = '{"id":"';
  const text = encodeJob({ id: "", ...job }).toString("utf8");
  if (!text.startsWith(`${head}"`)) throw new Error(`payload does not start with its id: ${text.slice(0, 40)}`);
  return [head, text.slice(head.length)];
}

/**
 * How long <q>:pushes remembers a push's token after the last push: longer
 * than any send can wait in a paused server's socket before it runs.
 */
export const PUSH_TOKEN_TTL_MS = 24 * 3_600_000;

/** A scope for push tokens no other producer run shares: `<label>.<random>`; a push's token is `<scope>.<index>`. */
export function pushScope(label: string): string {
  return `${label}.${randomBytes(6).toString("hex")}`;
}

/** Why a send of a push failed, in the words an operator needs. */
export type PushFailure =
  /** No reply in time: the server is paused or overloaded; the send may still run when it wakes. */
  | "no_reply"
  /** Redis answered with an error (OOM, READONLY, MISCONF...). */
  | "refused"
  /** No connection: the server is down or restarting. */
  | "unreachable";

/** A script refused a key (it names it): one holding what drill never writes there, or a <q>:seq with no id left. A send again gets the same answer. */
export function isKeyRefusal(err: unknown): boolean {
  return answeredWithRefusal(err) && (err.message.includes(KEY_REFUSAL_MARK) || err.message.includes(SEQ_EXHAUSTED_MARK));
}

/**
 * A WRONGTYPE from a command outside the scripts (the gate registry's HKEYS
 * and HDEL, a BLMOVE's two lists), named the way the scripts' wrong_type
 * names a key, so it reads as the same refusal (isKeyRefusal) and says which
 * key to fix: the first of `keys` whose type is another than `wanted`.
 */
export async function namingWrongType<T>(redis: Redis, keys: string | readonly string[], wanted: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (!(err instanceof Error) || !err.message.startsWith("WRONGTYPE")) throw err;
    const candidates = typeof keys === "string" ? [keys] : keys;
    let named = `${candidates[0] ?? "a key"} is a key of another type`;
    for (const key of candidates) {
      const found = await redis.type(key).catch(() => null);
      if (found === null) break;
      if (found !== "none" && found !== wanted) {
        named = `${key} is a ${found}`;
        break;
      }
    }
    const refusal = new Error(`${named}, not a ${wanted} ${KEY_REFUSAL_MARK}`);
    refusal.name = "ReplyError";
    throw refusal;
  }
}

export function pushFailure(err: unknown): PushFailure {
  if (gotNoReply(err)) return "no_reply";
  if (err instanceof NotSentAtStop) return "unreachable";
  if (answeredWithRefusal(err)) return "refused";
  return "unreachable";
}

/** A failed push as said on the packer's line (`drill pack`, `drill up`). */
export const PUSH_FAILURE_TEXT: Record<PushFailure, string> = {
  no_reply: "no reply from Redis",
  refused: "Redis refused it",
  unreachable: "Redis unreachable",
};

export interface PushRetry {
  signal: AbortSignal;
  /** The wait before the next send, after `failures` failed sends. */
  delayMs(failures: number): number;
  /** Whether to send again after `failures` failed sends and a wait of delayMs. */
  sendAgain(failures: number, delayMs: number): boolean;
  /** Each failed send (e.g. to say so once). */
  onFailure?(err: unknown, failures: number): void;
}

export type PushOutcome =
  | { ok: true; job: Job; failures: number }
  /** Never taken as far as we know; the last send may still run if Redis wakes (then it is queued under the next id). */
  | { ok: false; error: unknown; failures: number };

/**
 * The packer's push (`drill pack` and `drill up`): the same job, under the
 * same token, sent again until Redis takes it or `retry` gives up. A send
 * that times out may still run later; its token makes every other send of
 * this push a no-op that returns the same id.
 */
export async function pushUntilTaken(queue: DrillQueue, job: UnnumberedJob, token: string, retry: PushRetry): Promise<PushOutcome> {
  for (let failures = 0; ; ) {
    try {
      return { ok: true, job: (await queue.pushOnce(job, token)).job, failures };
    } catch (err) {
      failures++;
      retry.onFailure?.(err, failures);
      if (isKeyRefusal(err)) return { ok: false, error: err, failures };
      const delay = retry.delayMs(failures);
      if (retry.signal.aborted || !retry.sendAgain(failures, delay)) return { ok: false, error: err, failures };
      await sleep(delay, undefined, { signal: retry.signal }).catch(() => {});
      if (retry.signal.aborted) return { ok: false, error: err, failures };
    }
  }
}

/** An entry of <q>:dead. `payload` is the original text when it was UTF-8 and small. */
export interface DeadEntry {
  reason: string;
  id: string | null;
  gate: string;
  ts: number;
  attempt?: number;
  payload?: string;
  payload_b64?: string;
  payload_bytes: number;
  truncated?: boolean;
}

/** Dead entries keep at most this much of a poison payload (a 10 MB blob is not a job). */
export const DEAD_PAYLOAD_KEEP_BYTES = 64 * 1024;

export function deadEntry(reason: string, payload: Buffer, meta: { id: string | null; gate: string; ts: number; attempt?: number }): Buffer {
  const kept = payload.subarray(0, DEAD_PAYLOAD_KEEP_BYTES);
  const entry: DeadEntry = { reason, id: meta.id, gate: meta.gate, ts: meta.ts, payload_bytes: payload.length };
  if (meta.attempt !== undefined) entry.attempt = meta.attempt;
  let text: string | null = null;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(kept);
  } catch {
    text = null;
  }
  if (text !== null) entry.payload = text;
  else entry.payload_b64 = kept.toString("base64");
  if (kept.length < payload.length) entry.truncated = true;
  return Buffer.from(JSON.stringify(entry), "utf8");
}

export type AdmitOutcome =
  | { kind: "admit"; packed: number }
  | { kind: "reject_packed_tokens"; packed: number }
  /** The lever, read in the script, is not admit: `stored` is what it holds. */
  | { kind: "reject_all"; stored: StoredMode }
  | StoredOutcome;

/**
 * `gone`: the job is no longer in this gate's processing list (a re-run after
 * a lost reply, or another gate recovered it): nothing was done.
 * `conflict`: the id was decided before for a different payload: now dead.
 * `redelivery`: identical delivery, the stored decision stands, the copy dropped.
 */
export type StoredOutcome = { kind: "gone" | "conflict" | "redelivery"; storedKind: string; storedFigures: string };

/** Where a reject sends its job: `<q>:retry:<class>` (a nack), or `<q>:dead` (past the retry budget, or already on that class). */
export type RejectRoute = "retry" | "dead";
export type RejectOutcome = { kind: "applied"; route: RejectRoute } | StoredOutcome;

export interface DecisionContext {
  gate: string;
  payload: Buffer;
  job: Job;
  fingerprint: string;
  nowMs: number;
}

export interface RecoveredJob {
  fromGate: string;
  id: string | null;
  attempt: number | null;
  route: "ready" | "dead";
}

/** A gate's processing list given back: the jobs this run moved, and the refusal of each key it records in left unwritten (null: all recorded). */
export interface GateRecovery {
  jobs: RecoveredJob[];
  unrecorded: string | null;
}

/** One pass over the dead gates' lists (recoverExpiredGates). */
export interface DeadGatesRecovery {
  jobs: RecoveredJob[];
  /** Dead gates whose jobs moved with a key it records in left unwritten. */
  unrecorded: Array<{ gate: string; moved: number; refusal: string }>;
  /** Dead gates' lists a key refusal keeps where they are: their own list or the ready list of another type. */
  refused: Array<{ gate: string; refusal: string }>;
  /** <q>:gates of another type: only gates with a processing list were looked at. */
  registryRefusal: string | null;
}

/**
 * Why a rejected job goes to the dead list instead of a retry list, or null:
 * past the retry budget, or already on the class it would be retried on (a
 * nack never goes back to where it was rejected).
 */
function rejectDeadReason(job: Job, kind: RejectKind, route: RetryRouting): string | null {
  const cause = deadCause(job, route);
  return cause === null ? null : `${cause} last=${kind}`;
}

/** Where queue.reject sends a reject of this job (whatever its kind): what the gate's dry run and a decision whose reply was lost say. */
export function rejectRoute(job: Job, route: RetryRouting): RejectRoute {
  return deadCause(job, route) === null ? "retry" : "dead";
}

export interface RetryRouting {
  retryHostClass: string;
  retryBudget: number;
}

function deadCause(job: Job, route: RetryRouting): string | null {
  if (job.attempt + 1 > route.retryBudget) return `retry_budget_exceeded budget=${route.retryBudget}`;
  if (job.host_class === route.retryHostClass) return `retry_same_host_class host_class=${job.host_class}`;
  return null;
}

/** A key of the queue holds what drill never writes there: Redis answered, its content is wrong. */
export class CorruptKeyError extends Error {
  override name = "CorruptKeyError";
}

/** The drill's Redis queue: every key derived from one name (DESIGN.md's table). */
export class DrillQueue {
  readonly keys: QueueKeys;
  constructor(
    readonly redis: Redis,
    queue = "jobs",
  ) {
    this.keys = queueKeys(queue);
  }

  /** One job pushed once (a fresh token): tests and one-shot producers. Producers that retry use pushUntilTaken. */
  async push(spec: JobSpec, nowMs: number = Date.now()): Promise<Job> {
    return (await this.pushOnce(unnumberedJob(spec, nowMs), `${pushScope("push")}.0`)).job;
  }

  /**
   * INCR <q>:seq and RPUSH the job under that id, in one script, once per
   * `token`: a re-send of a push that did run (its reply lost, or timed out
   * on a paused Redis that runs the queued copies when it wakes) finds the
   * token in <q>:pushes and returns the id it took, pushing nothing. So every
   * id issued is on the queue, and no job is pushed twice. `again`: this send
   * found the push already done.
   */
  async pushOnce(job: UnnumberedJob, token: string): Promise<{ job: Job; again: boolean }> {
    const [beforeId, afterId] = payloadAroundId(job);
    const reply = await runScript(this.redis, pushScript, [this.keys.seq, this.keys.ready, this.keys.pushes], [token, beforeId, afterId, String(PUSH_TOKEN_TTL_MS)]);
    const [id, outcome] = replyStrings(reply);
    if (id === undefined || (outcome !== "pushed" && outcome !== "again")) throw new Error(`unexpected push script reply ${String(reply)}`);
    return { job: { id, ...job }, again: outcome === "again" };
  }

  /** Raw bytes onto the ready list (tests, dead-letter replay). */
  async pushRaw(payload: Buffer): Promise<void> {
    await this.redis.rpush(this.keys.ready, payload);
  }

  /** What the gate goes by (gateModeOf): unset or `admit` admits, anything else rejects. */
  async getMode(): Promise<GateMode> {
    return gateModeOf(await this.readMode());
  }

  /** What `<q>:mode` holds, whatever its type (a hash there must not be a WRONGTYPE). */
  async readMode(): Promise<StoredMode> {
    return storedMode(await runScript(this.redis, readModeScript, [this.keys.mode], []));
  }

  /** Returns the mode it replaced as the gate read it: null when none was set (a flip must not claim an `admit` nobody set). */
  async setMode(mode: GateMode, meta: ModeMeta): Promise<GateMode | null> {
    const { previous } = await this.flipMode(mode, meta);
    return previous.type === "none" ? null : gateModeOf(previous);
  }

  /** The flip with what the key held before, and whether <q>:events recorded it (not when it is of the wrong type). */
  async flipMode(mode: GateMode, meta: ModeMeta): Promise<{ previous: StoredMode; recorded: boolean }> {
    const ts = String(meta.nowMs ?? Date.now());
    const reply = await runScript(this.redis, setModeScript, [this.keys.mode, this.keys.events], [mode, meta.psi, meta.forced ? "1" : "0", ts, meta.by, meta.psiAvg60 ?? ""]);
    const recorded = Array.isArray(reply) && Number(reply[2]) === 1;
    return { previous: storedMode(reply), recorded };
  }

  /**
   * Sum of in-flight packed prompt tokens (a snapshot; the admit script decides).
   * Throws on an entry that is not a count, as the admit script refuses: the cap is unknowable, never 0.
   */
  async inflightTokens(): Promise<number> {
    const entries = await this.redis.hgetall(this.keys.inflight).catch((err: unknown) => this.rethrowNamed(err, this.keys.inflight, "hash"));
    let sum = 0;
    for (const [id, tokens] of Object.entries(entries)) {
      if (!/^\d+$/.test(tokens)) throw new CorruptKeyError(`${this.keys.inflight} entry ${id} is not a token count ("${tokens.slice(0, 20)}"): the packed-token cap cannot be checked`);
      sum += Number(tokens);
    }
    return sum;
  }

  /** The worker calls this when a job's prompt no longer holds memory. Returns the tokens released. */
  async releaseTokens(id: string): Promise<number | null> {
    const released = await runScript(this.redis, releaseScript, [this.keys.inflight], [id]);
    return released === null ? null : Number(released);
  }

  // ---- gate heartbeats ------------------------------------------------------

  async heartbeat(gate: string, ttlMs: number, info: Record<string, string | number>): Promise<void> {
    await this.redis
      .multi()
      .set(this.keys.gateHeartbeat(gate), JSON.stringify(info), "PX", ttlMs)
      .hset(this.keys.gates, gate, JSON.stringify(info))
      .exec();
  }

  /** The gates with a live heartbeat: those <q>:gates lists whose heartbeat key has not expired. */
  async liveGateCount(): Promise<number> {
    const gates = await this.redis.hkeys(this.keys.gates);
    return gates.length === 0 ? 0 : await this.redis.exists(...gates.map((gate) => this.keys.gateHeartbeat(gate)));
  }

  async gateIsAlive(gate: string): Promise<boolean> {
    return (await this.redis.exists(this.keys.gateHeartbeat(gate))) === 1;
  }

  /**
   * Gates known from the hash, plus any processing list whose gate never
   * registered or was unlisted. A hash of another type is skipped and its
   * refusal returned: the gates holding jobs are still found by their lists.
   */
  async knownGates(): Promise<{ gates: string[]; registryRefusal: string | null }> {
    const gates = new Set<string>();
    let registryRefusal: string | null = null;
    try {
      for (const gate of await namingWrongType(this.redis, this.keys.gates, "hash", () => this.redis.hkeys(this.keys.gates))) gates.add(gate);
    } catch (err) {
      if (!isKeyRefusal(err)) throw err;
      registryRefusal = (err as Error).message;
    }
    const prefix = this.keys.processing("x").slice(0, -1);
    let cursor = "0";
    do {
      const [next, found] = await this.redis.scan(cursor, "MATCH", this.keys.processingPattern, "COUNT", 200);
      cursor = next;
      for (const key of found) gates.add(key.slice(prefix.length));
    } while (cursor !== "0");
    return { gates: [...gates], registryRefusal };
  }

  /** The head of a gate's own processing list: a job it took but did not decide. */
  async processingHead(gate: string): Promise<Buffer | null> {
    const processing = this.keys.processing(gate);
    return await namingWrongType(this.redis, processing, "list", () => this.redis.lindexBuffer(processing, 0));
  }

  /**
   * Gives back the processing list of every gate whose heartbeat expired, to
   * the head of the ready list, attempt + 1 (past the budget: dead). A list a
   * key refusal keeps where it is (its own type, or the ready list's) is
   * skipped and returned in `refused`; the other gates are still recovered.
   */
  async recoverExpiredGates(selfGate: string, retryBudget: number, nowMs: number = Date.now()): Promise<DeadGatesRecovery> {
    const recovery: DeadGatesRecovery = { jobs: [], unrecorded: [], refused: [], registryRefusal: null };
    const known = await this.knownGates();
    recovery.registryRefusal = known.registryRefusal;
    for (const gate of known.gates) {
      if (gate === selfGate) continue;
      if (await this.gateIsAlive(gate)) continue;
      try {
        const back = await this.recoverGate(gate, { by: selfGate, countAttempt: true, retryBudget, nowMs });
        recovery.jobs.push(...back.jobs);
        if (back.jobs.length > 0 && back.unrecorded !== null) recovery.unrecorded.push({ gate, moved: back.jobs.length, refusal: back.unrecorded });
      } catch (err) {
        if (!isKeyRefusal(err)) throw err;
        recovery.refused.push({ gate, refusal: (err as Error).message });
      }
    }
    return recovery;
  }

  /**
   * Moves a gate's processing list back to the head of the ready list, only if
   * its heartbeat is gone. A gate stopping cleanly deletes its own heartbeat
   * and calls this with countAttempt false: it never tried those jobs.
   * Its list or the ready list of another type throws a key refusal
   * (isKeyRefusal); a key it only records in of another type is left
   * unwritten and named in `unrecorded` (recoverScript).
   */
  async recoverGate(gate: string, options: { by: string; countAttempt: boolean; retryBudget: number; nowMs?: number }): Promise<GateRecovery> {
    const nowMs = options.nowMs ?? Date.now();
    const k = this.keys;
    const payloads = await namingWrongType(this.redis, k.processing(gate), "list", () => this.redis.lrangeBuffer(k.processing(gate), 0, -1));
    if (payloads.length === 0) {
      if (await this.gateIsAlive(gate)) return { jobs: [], unrecorded: null };
      try {
        await namingWrongType(this.redis, k.gates, "hash", () => this.redis.hdel(k.gates, gate));
      } catch (err) {
        if (!isKeyRefusal(err)) throw err;
        return { jobs: [], unrecorded: (err as Error).message };
      }
      return { jobs: [], unrecorded: null };
    }
    const args: (string | Buffer)[] = [String(nowMs), gate, options.by];
    const jobs: RecoveredJob[] = [];
    for (const payload of payloads) {
      const decoded = decodeJob(payload, nowMs);
      if (!decoded.ok) {
        // Not a job: the ready list would only bounce it back; leave it for the gate to dead-letter.
        args.push(payload, payload, "ready", decoded.id ?? "", "");
        jobs.push({ fromGate: gate, id: decoded.id, attempt: null, route: "ready" });
        continue;
      }
      const attempt = decoded.job.attempt + (options.countAttempt ? 1 : 0);
      if (attempt > options.retryBudget) {
        const entry = deadEntry(`retry_budget_exceeded recovered from gate ${gate}`, payload, { id: decoded.job.id, gate: options.by, ts: nowMs, attempt });
        args.push(payload, entry, "dead", decoded.job.id, String(attempt));
        jobs.push({ fromGate: gate, id: decoded.job.id, attempt, route: "dead" });
      } else {
        args.push(payload, encodeJob({ ...decoded.job, attempt }), "ready", decoded.job.id, String(attempt));
        jobs.push({ fromGate: gate, id: decoded.job.id, attempt, route: "ready" });
      }
    }
    const reply = await runScript(this.redis, recoverScript, [k.gateHeartbeat(gate), k.processing(gate), k.ready, k.dead, k.events, k.stats, k.gates], args);
    if (reply === -1) return { jobs: [], unrecorded: null };
    if (!Array.isArray(reply) || reply.length !== 3 || !Array.isArray(reply[0]) || !Array.isArray(reply[1])) throw new Error(`unexpected recover script reply ${String(reply)}`);
    const [moved, asTaken, unrecorded] = reply as [unknown[], unknown[], unknown];
    const backAsTaken = new Set(asTaken.map(Number));
    // Only what this run moved: another gate recovering the same list at once moved the rest.
    const recovered = moved.map((position) => {
      const job = jobs[Number(position)];
      if (job === undefined) throw new Error(`unexpected recover script reply: position ${String(position)}`);
      // <q>:dead of another type: back to ready as it was taken, its attempt not counted.
      if (backAsTaken.has(Number(position))) return { ...job, attempt: job.attempt === null ? null : job.attempt - (options.countAttempt ? 1 : 0), route: "ready" as const };
      return job;
    });
    const text = Buffer.isBuffer(unrecorded) ? unrecorded.toString("utf8") : String(unrecorded);
    return { jobs: recovered, unrecorded: text === "" ? null : text };
  }

  // ---- decisions ------------------------------------------------------------

  /** The decision records of these ids as they stand (read-only): id → record, absent when none. */
  async decisionRecords(ids: string[]): Promise<Map<string, DecisionRecord>> {
    const records = new Map<string, DecisionRecord>();
    const unique = [...new Set(ids)];
    if (unique.length === 0) return records; // HMGET needs a field
    const texts = await this.redis.hmget(this.keys.decisions, ...unique).catch((err: unknown) => this.rethrowNamed(err, this.keys.decisions, "hash"));
    unique.forEach((id, i) => {
      const record = parseDecisionRecord(texts[i] ?? null);
      if (record !== null) records.set(id, record);
    });
    return records;
  }

  /** Admit if the packed-token cap allows, checked and changed in one script. */
  async admit(ctx: DecisionContext, limit: number): Promise<AdmitOutcome> {
    const k = this.keys;
    const reply = await runScript(
      this.redis,
      admitScript,
      [k.processing(ctx.gate), k.admitted, k.inflight, k.decisions, k.events, k.stats, k.mode, k.dead],
      [ctx.payload, ctx.job.id, ctx.fingerprint, String(ctx.job.attempt), String(ctx.job.prompt_tokens), String(limit), String(ctx.nowMs), ctx.gate, this.conflictEntry(ctx)],
    );
    const [kind, a, b] = replyStrings(reply);
    if (kind === "admit" || kind === "reject_packed_tokens") return { kind, packed: Number(a) };
    if (kind === "reject_all") return { kind, stored: { type: a ?? "none", value: a === "string" ? (b ?? "") : null } };
    return storedOutcome(kind, a, b);
  }

  /**
   * A reject: nack to <q>:retry:<retryHostClass> with reason and attempt + 1,
   * never back to the ready list; dead past the retry budget, or when the
   * retry would land in the host class the job is already in.
   */
  async reject(
    ctx: DecisionContext,
    kind: RejectKind,
    figures: string,
    route: { retryHostClass: string; retryBudget: number },
  ): Promise<RejectOutcome> {
    const k = this.keys;
    const attempt = ctx.job.attempt + 1;
    let target = k.retry(route.retryHostClass);
    let routeName: "retry" | "dead" = "retry";
    let routed: Buffer = encodeJob({ ...ctx.job, attempt, reason: nackReason(kind), host_class: route.retryHostClass });
    const deadReason = rejectDeadReason(ctx.job, kind, route);
    if (deadReason !== null) {
      target = k.dead;
      routeName = "dead";
      routed = deadEntry(deadReason, ctx.payload, { id: ctx.job.id, gate: ctx.gate, ts: ctx.nowMs, attempt });
    }
    const reply = await runScript(
      this.redis,
      rejectScript,
      [k.processing(ctx.gate), target, k.decisions, k.events, k.stats, k.dead],
      [ctx.payload, ctx.job.id, ctx.fingerprint, String(ctx.job.attempt), kind, figures, String(ctx.nowMs), ctx.gate, routed, routeName, this.conflictEntry(ctx)],
    );
    const [outcome, a, b] = replyStrings(reply);
    if (outcome === "applied") return { kind: "applied", route: a === "dead" ? "dead" : "retry" };
    return storedOutcome(outcome, a, b);
  }

  /** A payload that is not a valid job: processing → dead, with the reason. */
  async deadLetter(gate: string, payload: Buffer, reason: string, id: string | null, nowMs: number = Date.now()): Promise<"applied" | "gone"> {
    const k = this.keys;
    const entry = deadEntry(reason, payload, { id, gate, ts: nowMs });
    const cause = reason.split(" ")[0] ?? reason;
    const reply = await runScript(this.redis, deadScript, [k.processing(gate), k.dead, k.events, k.stats], [payload, entry, id ?? "", cause, String(nowMs), gate]);
    return replyStrings(reply)[0] === "applied" ? "applied" : "gone";
  }

  /** A bare WRONGTYPE names no key: say which, and what it is, as the scripts' refusals do. */
  private async rethrowNamed(err: unknown, key: string, want: string): Promise<never> {
    if (!(err instanceof Error) || !err.message.startsWith("WRONGTYPE")) throw err;
    const found = await this.redis.type(key).catch(() => "key of another type");
    throw new CorruptKeyError(`${key} is a ${found}, not a ${want} ${KEY_REFUSAL_MARK}`);
  }

  private conflictEntry(ctx: DecisionContext): Buffer {
    return deadEntry("id_reused_with_different_payload", ctx.payload, { id: ctx.job.id, gate: ctx.gate, ts: ctx.nowMs, attempt: ctx.job.attempt });
  }
}

/** {type, value} from read_mode; value is false (nil) unless the key is a string. */
function storedMode(reply: unknown): StoredMode {
  if (!Array.isArray(reply) || reply.length < 1) throw new Error(`unexpected mode script reply ${String(reply)}`);
  const [type, value] = reply as unknown[];
  const text = (v: unknown) => (Buffer.isBuffer(v) ? v.toString("utf8") : String(v));
  return { type: text(type), value: value === null || value === undefined ? null : text(value) };
}

function replyStrings(reply: unknown): string[] {
  if (!Array.isArray(reply)) throw new Error(`unexpected script reply ${String(reply)}`);
  return reply.map((v) => (Buffer.isBuffer(v) ? v.toString("utf8") : String(v)));
}

function storedOutcome(kind: string | undefined, storedKind: string | undefined, storedFigures: string | undefined): StoredOutcome {
  if (kind !== "gone" && kind !== "conflict" && kind !== "redelivery") throw new Error(`unexpected script reply ${String(kind)}`);
  return { kind, storedKind: storedKind ?? "", storedFigures: storedFigures ?? "" };
}
