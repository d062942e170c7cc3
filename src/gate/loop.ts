import os from "node:os";
import { readProcessStat } from "../host/process.js";
import { queueKeys } from "../queue/keys.js";
import { DrillError, type StopSignal } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { checkDecisionRecord, checkUnheardDecision } from "../queue/decisionRecord.js";
import { decodeJob, type Job } from "../queue/job.js";
import { gateModeOf, modeValueField, modeWarning, type StoredMode } from "../queue/mode.js";
import { DrillQueue, namingWrongType, rejectRoute, type DeadGatesRecovery, type RejectRoute, type StoredOutcome } from "../queue/queue.js";
import { BlockingMover, closeRedis, connectRedis, emptyTakeAnsweredAt, hurryOnStop, redactUrl, redisErrorText, WatchdogTimeout } from "../queue/redis.js";
import { unansweredGiveBackLine, type Holding } from "../queue/giveBack.js";
import { decideAdmission, decisionFigures, decisionLineOf, formatDecisionLine, type AdmissionConfig, type AdmissionDecision } from "./policy.js";
import { GateSampler, type CgroupSignals, type WorkerCgroupProbe } from "./signals.js";
import { answeredWithRefusal } from "../queue/refusal.js";
import { claimHeartbeat, gateHolder } from "../worker/heartbeatToken.js";

/**
 * The admission loop (admitd): heartbeat, recover dead gates' lists, take one
 * job (BLMOVE with a watchdog), decode, decide, apply in one Lua script, log
 * one line. The loop only sequences; policy.ts decides, queue.ts applies.
 */

/** BLMOVE's shortest block: its timeout 0 would mean forever. */
const MIN_BLOCK_MS = 10;

export interface GateOptions {
  queue: string;
  gateId: string;
  config: AdmissionConfig;
  retryHostClass: string;
  retryBudget: number;
  dryRun: boolean;
  maxJobs: number | null;
  idleExitMs: number | null;
  json: boolean;
  /** BLMOVE block timeout (a stop unblocks the take at once). */
  blockMs?: number;
  watchdogMarginMs?: number;
  /** Bounds each command (default 5 s); tests set a long one to show a stop does not wait it out. */
  commandTimeoutMs?: number;
  /** Default: 3 intervals, at least 1 s. Another gate recovers our list only after it expires. */
  heartbeatTtlMs?: number;
}

export interface GateDeps {
  redisUrl: string;
  roots: HostRoots;
  /** The worker cgroup's signals; null runs on host signals alone. */
  workerCgroup: WorkerCgroupProbe | null;
  out: (line: string) => void;
  err: (line: string) => void;
  signal: AbortSignal;
  /** Once connected to Redis, before the first sample: where the command says what the gate runs with. */
  onConnected?: () => void;
  /** Wall clock (epoch ms): job slack, heartbeats, timestamps other processes compare. */
  now?: () => number;
  /** Monotonic clock: sample times, PSI age, idle and outage durations. */
  monoNow?: () => number;
  /** DRILL_CRASH_AT: `gate:after-take` SIGKILLs the gate between take and decision (fault tests). */
  crashAt?: string | undefined;
}

export interface GateSummary {
  decided: number;
  byKind: Record<string, number>;
  recovered: number;
  watchdogFires: number;
  stoppedBy: "max_jobs" | "idle" | "signal" | "dry_run";
}

/**
 * The gate's first stderr line, once connected: what it decides on and with
 * which limits, so a gate.log read after the drill says what ran (QA: a gate
 * said nothing until its first decision, and nothing when it stopped).
 */
export function gateStartLine(options: GateOptions, redisUrl: string): string {
  const c = options.config;
  return (
    `gate ${options.gateId}: deciding jobs of queue ${options.queue} on ${redactUrl(redisUrl)}${options.dryRun ? " (dry run: nothing moved)" : ""}:` +
    ` packed_token_limit=${c.packedTokenLimit} slack_limit_ms=${c.slackLimitMs} stall_margin_ms=${c.stallMarginMs} psi_limit=${c.psiLimit.toFixed(2)} psi_rate_limit=${c.psiRateLimit.toFixed(2)} interval_ms=${c.intervalMs}`
  );
}

/** The start line's shape: a log whose last line it is said nothing since (up reads a dead gate's log for its last words). */
export const GATE_START_LINE = /^gate \S+: deciding jobs of queue /;

/** Why the gate stopped as its operator started it: --duration is its own, not a signal's. */
export type GateStop = GateSummary["stoppedBy"] | "duration" | StopSignal;

/** The gate's last stderr line: `gate g1 stopped (signal): decided=12 admit=5 reject_packed_tokens=7 recovered=0 watchdog_fires=0`. */
export function gateStoppedLine(gateId: string, summary: GateSummary, why: GateStop): string {
  const kinds = Object.entries(summary.byKind)
    .sort(([a], [b]) => (a === "admit" ? -1 : b === "admit" ? 1 : a.localeCompare(b)))
    .map(([kind, n]) => ` ${kind}=${n}`)
    .join("");
  return `gate ${gateId} stopped (${why}): decided=${summary.decided}${kinds} recovered=${summary.recovered} watchdog_fires=${summary.watchdogFires}`;
}

/** Said when the worker cgroup's signals come, go or stop parsing: the gate's cgroup PSI and swap checks follow them. */
export function cgroupSignalsLine(now: CgroupSignals): string {
  switch (now) {
    case "read":
      return "gate: worker cgroup signals read now: it decides on the cgroup's PSI and swap too";
    case "absent":
      return "gate: worker cgroup signals gone (the cgroup, or its --cgroup-pressure file, is not there): it decides on host signals alone until they are back";
    case "unreadable":
      return "gate: worker cgroup PSI unreadable (its memory.pressure is there but does not parse): it decides on host PSI alone until it reads again";
  }
}

export async function runGate(options: GateOptions, deps: GateDeps): Promise<GateSummary> {
  const now = deps.now ?? Date.now;
  const monoNow = deps.monoNow ?? (() => performance.now());
  const { config, gateId } = options;
  const summary: GateSummary = { decided: 0, byKind: {}, recovered: 0, watchdogFires: 0, stoppedBy: "signal" };
  // A name no queue may have is refused before a connection is open to leak (QA: a gate on `<q>_drain` never exited).
  queueKeys(options.queue);
  const redis = await connectRedis(deps.redisUrl, { name: `drill-gate:${gateId}`, commandTimeoutMs: options.commandTimeoutMs });
  deps.onConnected?.();
  // A stop with Redis paused ends in about a second, not after the command timeout twice.
  hurryOnStop(redis, deps.signal);
  // An error as said, with what this client knows (a timeout while reconnecting is not a pause).
  const message = (err: unknown): string => redisErrorText(err, redis);
  const queue = new DrillQueue(redis, options.queue);

  // After the connect, however long it took, so the first decision's PSI is fresh.
  const sampler = new GateSampler(deps.roots, config, deps.workerCgroup, monoNow);
  sampler.sample();
  // One sample gives avg10 alone: no stall rate, no stall p99. avg10 lags and
  // may never cross its limit (DESIGN), so a gate started during reclaim
  // would admit its backlog on it for a whole interval: the first decision
  // (and a dry run's) waits for the second sample.
  await sleep(config.intervalMs, deps.signal);
  sampler.sample();
  const modeSeen = modeNotice(queue.keys.mode, deps.err);
  if (options.dryRun) {
    try {
      await dryRunPass(queue, sampler, options, deps, summary, now(), modeSeen);
      summary.stoppedBy = "dry_run";
      return summary;
    } catch (err) {
      // Redis answered, with a key drill never writes that way: say which, not a stack trace.
      if (err instanceof Error && (err.name === "ReplyError" || err.name === "CorruptKeyError")) throw new DrillError(`gate --dry-run: redis answered ${err.message}`);
      throw err;
    } finally {
      await closeRedis(redis);
    }
  }

  const ttlMs = options.heartbeatTtlMs ?? Math.max(3 * config.intervalMs, 1000);
  // host, pid and start time name this process, as a worker's token does: a rollback tells a heartbeat still
  // counting down after this gate was killed from a live gate's, whose processing list it must not drain.
  // Unread (a --procfs tree without it), no start time: a rollback then waits for the heartbeat to expire, never drains a live gate's list.
  const self = readProcessStat(deps.roots, "self");
  const info = { pid: process.pid, ...(self.ok ? { start_time: self.value.startTime, host: os.hostname() } : {}), started: now(), interval_ms: config.intervalMs };
  // Claimed before anything is taken: a second gate with a live one's --gate-id is refused (exit 3), as a
  // worker's id is (QA: both shared one processing list, and either, stopping, gave back the other's job).
  // A gate of this id whose process is gone (SIGKILLed) is taken over at once.
  try {
    await claimHeartbeat(redis, deps.roots, { role: "gate", id: gateId, holder: gateHolder }, queue.keys.gateHeartbeat(gateId), JSON.stringify(info), ttlMs);
  } catch (err) {
    await closeRedis(redis);
    throw err;
  }
  const blockMs = options.blockMs ?? 1000;
  // A stop ends the take at once (CLIENT UNBLOCK): a rollback does not wait out the block.
  const mover = new BlockingMover(deps.redisUrl, { name: `drill-gate-take:${gateId}`, watchdogMarginMs: options.watchdogMarginMs ?? 2000, stop: { signal: deps.signal, via: redis } });
  const outage = new OutageLog(deps.err, monoNow, redactUrl(deps.redisUrl), message);

  // Say once when host PSI goes missing (the gate now fails closed) and once when it is back.
  let psiMissing = sampler.state.psiMissingReason;
  if (psiMissing !== null) deps.err(`gate: host memory PSI unreadable (${psiMissing}): rejecting with psi=missing`);
  // And when the worker cgroup comes or goes (QA: silent when it was torn down mid-run): what the gate decides on changes.
  let cgroupSignals = sampler.state.cgroupSignals;
  const sampleTimer = setInterval(() => {
    const sampled = sampler.sample();
    const reason = sampled.psiMissingReason;
    if (reason !== null && psiMissing === null) deps.err(`gate: host memory PSI unreadable (${reason}): rejecting with psi=missing`);
    if (reason === null && psiMissing !== null) deps.err("gate: host memory PSI readable again");
    psiMissing = reason;
    if (deps.workerCgroup && sampled.cgroupSignals !== cgroupSignals) deps.err(cgroupSignalsLine(sampled.cgroupSignals));
    cgroupSignals = sampled.cgroupSignals;
  }, config.intervalMs);
  // An outage shows in the loop's own errors; a refusal of the heartbeat alone (an ACL, a full
  // Redis: SET refused while BLMOVE is not) would not, and its expiry hands this gate's job to another (QA R re-check 3).
  let heartbeatRefused = false;
  const heartbeatTimer = setInterval(() => {
    queue.heartbeat(gateId, ttlMs, info).then(
      () => {
        if (heartbeatRefused) deps.err(`gate: heartbeat ${queue.keys.gateHeartbeat(gateId)} renewed again`);
        heartbeatRefused = false;
      },
      (err: unknown) => {
        if (heartbeatRefused || !answeredWithRefusal(err) || deps.signal.aborted) return;
        heartbeatRefused = true;
        deps.err(`gate: could not renew heartbeat ${queue.keys.gateHeartbeat(gateId)} (${message(err)}); retrying: once it expires (${ttlMs} ms) another gate may take back the job this one holds`);
      },
    );
  }, Math.max(100, Math.floor(ttlMs / 3)));

  let lastJobAt = monoNow();
  let lastRecoveryAt: number | null = null;
  // At start (a restart of this gate id) and after any error: a BLMOVE whose
  // reply was lost, or a decision that failed, leaves its job in our list.
  let processingMayHoldJob = true;
  // The payload whose decision was sent when Redis went away: its script may
  // have run, and removed the job from our list, with the reply lost.
  let unheard: Buffer | null = null;
  // A key refusal in the dead gates' recovery stays until the key is fixed: each said once, not every poll.
  const said = new Set<string>();
  const sayOnce = (line: string): void => {
    if (!said.has(line)) deps.err(line);
    said.add(line);
  };
  try {
    // Registered before anything is taken, after the cold-start samples: `drill
    // up` reads this key as "the gate decides" before its schedule starts.
    await queue.heartbeat(gateId, ttlMs, info);
    while (!deps.signal.aborted) {
      if (options.maxJobs !== null && summary.decided >= options.maxJobs) {
        summary.stoppedBy = "max_jobs";
        break;
      }
      try {
        if (lastRecoveryAt === null || monoNow() - lastRecoveryAt >= config.intervalMs) {
          lastRecoveryAt = monoNow();
          const recovery = await queue.recoverExpiredGates(gateId, options.retryBudget, now());
          for (const job of recovery.jobs) {
            summary.recovered++;
            emit(options, deps, { event: "recovered", job: job.id, from_gate: job.fromGate, attempt: job.attempt, route: job.route }, `recovered job=${job.id ?? "-"} from_gate=${job.fromGate} attempt=${job.attempt ?? "-"} route=${job.route}`);
          }
          const notes = recoveryNotes(queue, recovery);
          for (const line of notes.standing) sayOnce(line);
          for (const line of notes.moved) deps.err(line);
        }
        // A job we took but never decided (lost reply, watchdog, earlier error) comes first.
        // Only then can our processing list hold one: after a decision it is empty.
        const undecided = processingMayHoldJob ? await queue.processingHead(gateId) : null;
        // Still in our list: the script never ran, and it is decided below as any job.
        if (unheard !== null && undecided === null) await sayUnheard(queue, unheard, options, deps, summary, now());
        unheard = null;
        processingMayHoldJob = false;
        // Block no longer than the idle time left, so --idle-exit 200ms means 200 ms, not one whole block.
        const idleLeftMs = options.idleExitMs === null ? blockMs : options.idleExitMs - (monoNow() - lastJobAt);
        const waitMs = Math.min(blockMs, Math.max(MIN_BLOCK_MS, idleLeftMs));
        const takeSentAt = monoNow();
        // A list of another type is named (QA: a bare WRONGTYPE said neither which list nor its type).
        const payload = undecided ?? (await namingWrongType(redis, [queue.keys.ready, queue.keys.processing(gateId)], "list", () => mover.move(queue.keys.ready, queue.keys.processing(gateId), waitMs)));
        outage.replied();
        // A job taken is not yet progress: a decision that keeps failing on it is one outage, said once.
        if (payload === null) outage.recovered(emptyTakeAnsweredAt(takeSentAt, monoNow(), waitMs));
        if (payload === null) {
          if (options.idleExitMs !== null && monoNow() - lastJobAt >= options.idleExitMs) {
            summary.stoppedBy = "idle";
            break;
          }
          continue;
        }
        lastJobAt = monoNow();
        if (deps.crashAt === "gate:after-take") process.kill(process.pid, "SIGKILL");
        unheard = payload;
        await decideOne(queue, sampler, payload, options, deps, summary, now(), modeSeen);
        unheard = null;
        outage.recovered();
      } catch (err) {
        processingMayHoldJob = true;
        if (err instanceof WatchdogTimeout) summary.watchdogFires++;
        // Stopping: nothing is retried; the give-back below says where a job went.
        if (deps.signal.aborted) {
          if (unheard !== null) deps.err(`gate: stopping with ${unheardJob(unheard, now())}'s decision unanswered (${message(err)}): if redis ran it or runs it when it answers, the decision stands (see ${queue.keys.decisions}); else the job goes back with the give-back`);
          else if (!(err instanceof WatchdogTimeout)) deps.err(`gate: stopping, not retried: ${message(err)}`);
          break;
        }
        outage.failed(err, unheard !== null);
        await sleep(outage.backoffMs(), deps.signal);
      }
    }
  } finally {
    clearInterval(sampleTimer);
    clearInterval(heartbeatTimer);
    mover.close();
    // Our list is empty after every decision; a job may be in it after an error, a decision
    // cut short or a take the stop left unanswered.
    const holding: Holding = processingMayHoldJob || unheard !== null ? "maybe" : mover.lastTakeUnanswered ? "if_taken_at_stop" : "nothing";
    const answered = await giveBack(queue, gateId, options.retryBudget, holding, ttlMs, deps.err);
    // A server that did not answer the give-back will not answer QUIT either: no grace for it.
    await closeRedis(redis, answered ? undefined : 0);
  }
  return summary;
}

async function decideOne(
  queue: DrillQueue,
  sampler: GateSampler,
  payload: Buffer,
  options: GateOptions,
  deps: GateDeps,
  summary: GateSummary,
  nowMs: number,
  modeSeen: (stored: StoredMode) => void,
): Promise<void> {
  const { gateId, config } = options;
  const decoded = decodeJob(payload, nowMs);
  if (!decoded.ok) {
    // A poison payload goes to the dead list with its reason; the gate stays up.
    const applied = await queue.deadLetter(gateId, payload, decoded.reason, decoded.id, nowMs);
    if (applied === "applied") record(summary, "dead");
    emitDead(options, deps, decoded.id, decoded.reason);
    return;
  }
  const { job, fingerprint } = decoded;
  if (!(await rateBeforeDeciding(sampler, config.intervalMs, deps.signal))) return; // stopping: the give-back returns it
  const [stored, inflight] = await Promise.all([queue.readMode(), queue.inflightTokens()]);
  modeSeen(stored);
  let modeField = modeValueField(stored);
  let decision = decideAdmission(job, sampler.signals(gateModeOf(stored), inflight), config, nowMs);
  const ctx = { gate: gateId, payload, job, fingerprint, nowMs };

  // The cap is checked again and changed in the admit script, so two gates
  // cannot overshoot it. A reject_packed_tokens on this snapshot (one round
  // trip old) is not re-checked: it changes no count, and at worst rejects a
  // job that tokens released in that instant would have let in.
  if (decision.kind === "admit") {
    const outcome = await queue.admit(ctx, config.packedTokenLimit);
    if (outcome.kind === "admit") decision = { kind: "admit", packed: outcome.packed, limit: config.packedTokenLimit };
    else if (outcome.kind === "reject_packed_tokens") decision = { kind: "reject_packed_tokens", packed: outcome.packed, limit: config.packedTokenLimit };
    else if (outcome.kind === "reject_all") {
      modeSeen(outcome.stored);
      modeField = modeValueField(outcome.stored);
      decision = { kind: "reject_host_pressure", psi: sampler.state.readings.psiSomeAvg10 ?? "missing", trigger: "reject_all", figure: null };
    } else return emitStored(options, deps, summary, job, outcome);
  }
  const modeNote = modeNoteOf(decision, modeField);
  let route: RejectRoute | null = null;
  if (decision.kind !== "admit") {
    const outcome = await queue.reject(ctx, decision.kind, decisionFigures(decision) + modeNote, { retryHostClass: options.retryHostClass, retryBudget: options.retryBudget });
    if (outcome.kind !== "applied") return emitStored(options, deps, summary, job, outcome);
    route = outcome.route;
  }
  record(summary, decision.kind);
  emitDecision(options, deps, decision, job, gateId, modeNote, route);
}

/**
 * The stall rate before a decision, as at start (runGate's second sample).
 * Its window starts over when host PSI comes back after missing, and after a
 * gap (this gate stopped, SIGSTOP or a debugger, or its loop stalled): the
 * next interval's jobs were decided on avg10 alone, which lags (QA: a gate
 * resumed mid-reclaim admitted its backlog at a 47 % stall rate). PSI older
 * than two intervals is this gate's own gap, not the host's: sampled now
 * rather than rejected as stale. False when stopped meanwhile.
 */
async function rateBeforeDeciding(sampler: GateSampler, intervalMs: number, signal: AbortSignal): Promise<boolean> {
  const age = sampler.psiAgeMs();
  if (age !== null && age > 2 * intervalMs) sampler.sample();
  if (!sampler.awaitingRate) return true;
  await sleep(intervalMs, signal);
  if (signal.aborted) return false;
  sampler.sample();
  return true;
}

/** A lever that is not a mode rejects (fail closed): the reject's figures end with what the key held (modeValueField), else "". */
function modeNoteOf(decision: AdmissionDecision, modeField: string | null): string {
  return decision.kind === "reject_host_pressure" && decision.trigger === "reject_all" && modeField !== null ? ` ${modeField}` : "";
}

/** A fresh decision's line, or its JSON (the typed fields, the lever's note, the text line). */
function emitDecision(options: GateOptions, deps: GateDeps, decision: AdmissionDecision, job: Job, gateId: string, modeNote: string, route: RejectRoute | null): void {
  emit(options, deps, { ...decisionJson(decision, job, gateId, route), ...modeJson(modeNote) }, formatDecisionLine(decision, job, modeNote, route));
}

/**
 * After an outage, for the job whose decision was sent but never answered and
 * that is no longer in our list: the line its decision would have printed,
 * from the record the script wrote (`reply_lost=1`), so every decision this
 * gate applied has its line; or a word that it left another way.
 */
async function sayUnheard(queue: DrillQueue, payload: Buffer, options: GateOptions, deps: GateDeps, summary: GateSummary, nowMs: number): Promise<void> {
  const decoded = decodeJob(payload, nowMs);
  const list = queue.keys.processing(options.gateId);
  if (!decoded.ok) {
    deps.err(`gate: the reply to dead-lettering job=${decoded.id ?? "-"} (${decoded.reason.split(" ")[0]}) was lost while redis was unreachable; it left ${list}: see ${queue.keys.dead}`);
    return;
  }
  const { job, fingerprint } = decoded;
  const records = await queue.decisionRecords([job.id]);
  const seen = checkUnheardDecision(records.get(job.id) ?? null, fingerprint, job.attempt);
  if (seen.kind === "not_ours") {
    const stored = seen.stored === null ? "no decision recorded" : `recorded: ${seen.stored.kind} at attempt ${seen.stored.attempt}`;
    deps.err(`gate: job=${job.id} left ${list} while redis was unreachable, not by this gate's decision (${stored}): another gate recovered it once this gate's heartbeat expired`);
    return;
  }
  emitStoredDecision(options, deps, summary, job, seen, "reply_lost");
}

/**
 * A stored record's figures (`packed=36012 limit=32000`, `psi=missing`) as
 * the typed fields a fresh decision's JSON has: numbers as numbers, `missing`
 * as null, anything else as text.
 */
function figuresJson(figures: string): Record<string, number | string | null> {
  const fields: Record<string, number | string | null> = {};
  // A value is a bare word, or a JSON string (modeValueField quotes a lever's value with spaces or quotes in it).
  for (const [, key, quoted, bare] of figures.matchAll(/(?:^| )([^\s=]+)=(?:("(?:[^"\\]|\\.)*")|(\S*))/g)) {
    // The lever's value is text, whatever it looks like: "123" is not a figure.
    const text = key === "mode_value" || key === "mode_type";
    fields[key!] = quoted !== undefined ? (JSON.parse(quoted) as string) : bare === "missing" && !text ? null : !text && /^-?\d+(\.\d+)?$/.test(bare!) ? Number(bare) : bare!;
  }
  return fields;
}

/** ` mode_value=banana` → {mode_value: "banana"} for --json, as a stored decision's figures are read (` mode_value="reject all"` → "reject all"). */
function modeJson(modeNote: string): Record<string, string> {
  return figuresJson(modeNote.trim()) as Record<string, string>;
}

/** Says once on stderr when the lever is not a mode (and so rejects everything), and once when it is one again. */
function modeNotice(key: string, err: (line: string) => void): (stored: StoredMode) => void {
  let said: string | null = null;
  return (stored) => {
    const warning = modeWarning(key, stored, "the gate reads it as reject_all and rejects every job (set admit or reject_all with `drill gate mode`)");
    if (warning !== null && warning !== said) err(`gate: ${warning}`);
    if (warning === null && said !== null) err(`gate: ${key} holds a mode again`);
    said = warning;
  };
}

/**
 * --dry-run: one pass over the ready list as it stands, deciding without
 * moving anything, as the gate would: each job first meets its id's decision
 * record, the stored one or the one a copy earlier in this pass would have left.
 */
async function dryRunPass(
  queue: DrillQueue,
  sampler: GateSampler,
  options: GateOptions,
  deps: GateDeps,
  summary: GateSummary,
  nowMs: number,
  modeSeen: (stored: StoredMode) => void,
): Promise<void> {
  const payloads = await namingWrongType(queue.redis, queue.keys.ready, "list", () => queue.redis.lrangeBuffer(queue.keys.ready, 0, (options.maxJobs ?? 1000) - 1));
  const decodedJobs = payloads.map((payload) => decodeJob(payload, nowMs));
  const stored = await queue.readMode();
  modeSeen(stored);
  const mode = gateModeOf(stored);
  const modeField = modeValueField(stored);
  let inflight = await queue.inflightTokens();
  // <q>:decisions as the decision scripts would leave it after each job of this pass.
  const records = await queue.decisionRecords(decodedJobs.flatMap((decoded) => (decoded.ok ? [decoded.job.id] : [])));
  for (const decoded of decodedJobs) {
    if (!decoded.ok) {
      record(summary, "dead");
      emitDead(options, deps, decoded.id, decoded.reason);
      continue;
    }
    const { job, fingerprint } = decoded;
    const seen = checkDecisionRecord(records.get(job.id) ?? null, fingerprint, job.attempt);
    if (seen.kind !== "fresh") {
      emitStored(options, deps, summary, job, seen);
      continue;
    }
    const decision = decideAdmission(job, sampler.signals(mode, inflight), options.config, nowMs);
    if (decision.kind === "admit") inflight += job.prompt_tokens; // as if admitted, for the next job's packed figure
    const modeNote = modeNoteOf(decision, modeField);
    records.set(job.id, { fingerprint, attempt: String(job.attempt), kind: decision.kind, figures: decisionFigures(decision) + modeNote });
    // Where the reject would send it, as queue.reject routes it.
    const route: RejectRoute | null = decision.kind === "admit" ? null : rejectRoute(job, options);
    record(summary, decision.kind);
    emitDecision(options, deps, decision, job, options.gateId, modeNote, route);
  }
}

/**
 * What a pass over the dead gates' lists leaves to say: `moved`, jobs moved
 * with a key they record in left unwritten (each time); `standing`, key
 * refusals that stay until the key is fixed (the loop says each once). None
 * is a Redis outage: Redis answered, and the other gates' lists were still
 * recovered.
 */
function recoveryNotes(queue: DrillQueue, recovery: DeadGatesRecovery): { moved: string[]; standing: string[] } {
  const moved = recovery.unrecorded.map(
    ({ gate, moved: n, refusal }) => `gate: recovered ${n} job(s) of dead gate ${gate} (${queue.keys.processing(gate)}) to the head of ${queue.keys.ready}, unrecorded (${refusal})`,
  );
  const standing = recovery.refused.map(
    ({ gate, refusal }) => `gate: could not recover ${queue.keys.processing(gate)} of dead gate ${gate} (${refusal}); its jobs stay there until that key is fixed`,
  );
  if (recovery.registryRefusal !== null) standing.unshift(`gate: ${recovery.registryRefusal}: dead gates are found by their processing lists alone until that key is fixed`);
  return { moved, standing };
}

/**
 * On stop: our heartbeat goes first, then whatever we hold goes back to the
 * head of the ready list. Every stop after a take ends here; false when Redis
 * did not answer. A key the recover script only records in of another type
 * (as the decision that held the job was refused) is left unwritten and named:
 * the job still goes back, or it would wait in our list, which nobody reads,
 * until a rollback's re-drain. Unanswered, what the line says depends on
 * what the list may hold (`holding`).
 */
async function giveBack(queue: DrillQueue, gateId: string, retryBudget: number, holding: Holding, ttlMs: number, err: (line: string) => void): Promise<boolean> {
  try {
    await queue.redis.del(queue.keys.gateHeartbeat(gateId));
    const back = await queue.recoverGate(gateId, { by: gateId, countAttempt: false, retryBudget });
    const note = back.unrecorded === null ? "" : ` as taken, unrecorded (${back.unrecorded})`;
    if (back.jobs.length > 0) err(`gate: gave ${back.jobs.length} undecided job(s) back to the head of ${queue.keys.ready}${note}`);
    return true;
  } catch (e) {
    // Refused (a replica, an ACL) while its list is empty: nothing held, nothing to say (QA R re-check 5:
    // a gate refused at its start warned of a give-back it did not need).
    if (answeredWithRefusal(e) && (await queue.redis.llen(queue.keys.processing(gateId)).catch(() => null)) === 0) return true;
    const stop = { tag: "gate", list: queue.keys.processing(gateId), heartbeat: queue.keys.gateHeartbeat(gateId), ttlMs, recovery: "another gate recovers it once the heartbeat expires, or rollback drains it" };
    err(unansweredGiveBackLine(stop, holding, redisErrorText(e, queue.redis)));
    return false;
  }
}

function emitStored(options: GateOptions, deps: GateDeps, summary: GateSummary, job: Job, outcome: StoredOutcome): void {
  if (outcome.kind === "gone") {
    deps.err(`gate: job=${job.id} left ${options.gateId}'s processing list before its decision (recovered by another gate); skipped`);
    return;
  }
  if (outcome.kind === "conflict") {
    record(summary, "dead");
    emitDead(options, deps, job.id, `id_reused_with_different_payload first=${outcome.storedKind}`);
    return;
  }
  emitStoredDecision(options, deps, summary, job, outcome, "redelivery");
}

/**
 * A decision read back from the job's record, not made now: a redelivery
 * (the stored decision re-applied) or one whose reply was lost. Its line is
 * the record's, with this copy's attempt= where a fresh line has it (before the
 * lever's note the record's figures end with: decisionLineOf), flagged; its
 * JSON has a fresh decision's typed fields.
 * A reject whose reply was lost went where this gate sent it (rejectRoute:
 * this job, this attempt, this gate's retry options), said as a fresh
 * reject's ` route=` is. A redelivered copy has none: it is dropped, and the
 * route was its first delivery's, said on that one's line (the record keeps
 * no route, and another gate, with other retry options, may have decided it).
 */
function emitStoredDecision(
  options: GateOptions,
  deps: GateDeps,
  summary: GateSummary,
  job: Job,
  stored: { storedKind: string; storedFigures: string },
  flag: "redelivery" | "reply_lost",
): void {
  record(summary, flag === "redelivery" ? "redelivery" : stored.storedKind);
  const route = flag === "reply_lost" && stored.storedKind.startsWith("reject_") ? rejectRoute(job, options) : null;
  emit(
    options,
    deps,
    { event: "decision", decision: stored.storedKind, job: job.id, attempt: job.attempt, gate: options.gateId, ...figuresJson(stored.storedFigures), ...(route === null ? {} : { route }), [flag]: true },
    `${decisionLineOf(stored.storedKind, job.id, stored.storedFigures, job.attempt, route)} ${flag}=1`,
  );
}

function emitDead(options: GateOptions, deps: GateDeps, id: string | null, reason: string): void {
  const [cause, ...rest] = reason.split(" ");
  const detail = rest.length > 0 ? ` detail=${JSON.stringify(rest.join(" "))}` : "";
  const line = `dead job=${id ?? "-"} reason=${cause ?? reason}${detail}`;
  // The cause alone in `reason`, its figures in `detail`, as the text line has them (QA: folded into one string in --json).
  emit(options, deps, { event: "dead", job: id, reason: cause ?? reason, detail: rest.length > 0 ? rest.join(" ") : null, gate: options.gateId }, line);
}

function decisionJson(decision: AdmissionDecision, job: Job, gate: string, route: RejectRoute | null): Record<string, unknown> {
  const base: Record<string, unknown> = { event: "decision", decision: decision.kind, job: job.id, attempt: job.attempt, gate };
  switch (decision.kind) {
    case "admit":
    case "reject_packed_tokens":
      Object.assign(base, { packed: decision.packed, limit: decision.limit });
      break;
    case "reject_deadline_slack":
      Object.assign(base, { slack_ms: Math.round(decision.slackMs), slack_limit_ms: decision.limitMs, stall_ms_p99: decision.stallMsP99 });
      break;
    case "reject_host_pressure":
      Object.assign(base, { psi: decision.psi === "missing" ? null : Number(decision.psi.toFixed(2)), trigger: decision.trigger, figure: decision.figure });
      if (decision.trigger === "reject_all") base.mode = "reject_all";
      break;
  }
  if (route !== null) base.route = route;
  return base;
}

/**
 * The line is made once, for both outputs: the JSON object's `line` is the
 * text line, every k=v of it (QA: mode_value and dry_run=1 were left out).
 * A dry run marks every line and object it prints: none of it was applied.
 */
function emit(options: GateOptions, deps: GateDeps, json: Record<string, unknown>, text: string): void {
  const line = options.dryRun ? `${text} dry_run=1` : text;
  if (options.json) deps.out(JSON.stringify({ ts: new Date((deps.now ?? Date.now)()).toISOString(), ...json, line, ...(options.dryRun ? { dry_run: true } : {}) }));
  else deps.out(line);
}

/** Every payload handled counts towards --max-jobs, dead and redelivered ones included. */
function record(summary: GateSummary, kind: string): void {
  summary.decided++;
  summary.byKind[kind] = (summary.byKind[kind] ?? 0) + 1;
}

/**
 * One stderr line when Redis goes away and one when it is back, not one per
 * retry. The outage counts from the last reply before it, not from the
 * failure: a paused server is found out only when the watchdog or the
 * command timeout gives up, seconds in (QA: "back after 2.0 s" for 5 s).
 * It may still read up to one take's block long: when in that block the
 * server stopped is not known.
 */
class OutageLog {
  private since: number | null = null;
  private lastReply: number;
  /** Redis answered, with an error or content drill never writes: the decision failed, Redis is not gone. */
  private answered = false;
  private failures = 0;
  constructor(
    private readonly err: (line: string) => void,
    private readonly now: () => number,
    /** The Redis URL, password hidden: which Redis is gone, as watch says it. */
    private readonly url: string,
    private readonly describe: (err: unknown) => string,
  ) {
    this.lastReply = now();
  }
  /** Redis answered: the next command goes out about now. */
  replied(): void {
    this.lastReply = this.now();
  }
  /** `deciding`: a job was taken (its decision failed); else the take itself did (QA R 4: a refused BLMOVE said "decision failed"). */
  failed(error: unknown, deciding = true): void {
    this.failures++;
    if (this.since === null) {
      this.since = this.lastReply;
      // A reply that is an error (a script refusing a corrupt entry) is Redis answering, not Redis gone.
      this.answered = answeredWithRefusal(error) || (error instanceof Error && error.name === "CorruptKeyError");
      const what = deciding ? "decision failed" : "could not take a job";
      this.err(this.answered ? `gate: ${what}: redis answered ${this.describe(error)}; retrying` : `gate: redis unavailable at ${this.url} (${this.describe(error)}); retrying`);
    }
  }
  /** `answeredAt`: when Redis answered again, if before now (an empty blocking take). */
  recovered(answeredAt?: number): void {
    if (this.since !== null) {
      const after = `${(((answeredAt ?? this.now()) - this.since) / 1000).toFixed(1)} s`;
      this.err(this.answered ? `gate: deciding again after ${after}` : `gate: redis back after ${after}`);
      this.since = null;
      this.failures = 0;
    }
    this.replied();
  }
  backoffMs(): number {
    return Math.min(100 * 2 ** Math.min(this.failures, 4), 1000);
  }
}

/** `job=17` of a payload, or its failure to decode. */
function unheardJob(payload: Buffer, nowMs: number): string {
  const decoded = decodeJob(payload, nowMs);
  return `job=${(decoded.ok ? decoded.job.id : decoded.id) ?? "-"}`;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

