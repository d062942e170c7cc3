import { setMaxListeners } from "node:events";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { DrillError, ExitCode, RefusedError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readProcessStat } from "../host/process.js";
import { claimHeartbeat, liveHolderRefusal, parseWorkerToken, workerToken, type HeartbeatClaimant } from "./heartbeatToken.js";
import { WeightsToucher, type PageToucherLine } from "../native/pagetoucher.js";
import { decodeJob, MAX_MARKED_PAYLOAD_BYTES, type Job } from "../queue/job.js";
import { unansweredGiveBackLine, type Holding } from "../queue/giveBack.js";
import { deadEntry, isKeyRefusal, namingWrongType } from "../queue/queue.js";
import { BlockingMover, closeRedis, connectRedis, emptyTakeAnsweredAt, gotNoReply, hurryOnStop, mayHaveRun, redactUrl, redisErrorText, runScript, WatchdogTimeout } from "../queue/redis.js";
import { formatBytes } from "../units.js";
import { PassBatcher } from "./batch.js";
import { KvCache } from "./kv.js";
import {
  addPass,
  decodePaceMs,
  doneRecord,
  emptyPassStats,
  formatDoneLine,
  givenBackPayload,
  markFirstToken,
  planJob,
  planSlots,
  prefillKvSlice,
  strayPayloads,
  weightsReadyTimeoutMs,
  type StopReason,
  type WorkerConfig,
} from "./plan.js";
import {
  doneScript,
  firstTokenScript,
  recoverWorkingScript,
  releaseHeartbeatScript,
  renewHeartbeatScript,
  workerDeadScript,
  workerKeys,
  type WorkerKeys,
} from "./scripts.js";
import { removeStaleWeightsFiles, weightsFileName } from "./weightsFile.js";
import { SELF_EXIT_GRACE_MS } from "../lifetime.js";
import { refusedOrUnavailable } from "../queue/refusal.js";

/**
 * The simulated inference worker's loop: claim the worker id (heartbeat),
 * give back what a previous run of this id left in its working list (and
 * refuse to start when a key it records in has another type), map the
 * weights, then take admitted jobs (BLMOVE with a watchdog) up to the
 * concurrency and run each: prefill passes with its KV cache written, the
 * first token, decode passes at most at the rate cap, done in one script.
 * Every pass is a real pass over the mmapped weights, so reclaim slows it.
 */

export interface WorkerOptions {
  queue: string;
  workerId: string;
  config: WorkerConfig;
  /** Checked by workerAction (checkWeightsDir) before the worker joins its cgroup. */
  weightsDir: string;
  maxJobs: number | null;
  idleExitMs: number | null;
  durationMs: number | null;
  json: boolean;
  /** BLMOVE block timeout (a stop unblocks the take at once). Default 1 s. */
  blockMs?: number;
  /** Heartbeat TTL; another worker recovers our list only after it expires. Default 10 s. */
  heartbeatTtlMs?: number;
  /** How often dead workers' lists are looked for. Default 5 s. */
  peerRecoveryMs?: number;
  /** tokens_out HINCRBY batching. Default 100 ms. */
  statsFlushMs?: number;
  /** Bound on each command to Redis (tests: a paused server answers nothing). Default 5 s. */
  commandTimeoutMs?: number;
}

/** The weights coprocess as the loop uses it (WeightsToucher; a fake in unit tests). */
export interface Weights {
  readonly pid: number;
  readonly file: string;
  readonly fallback: boolean;
  pass(): Promise<number>;
  close(): Promise<unknown>;
}

export interface WorkerDeps {
  redisUrl: string;
  roots: HostRoots;
  /** Where the worker runs, for messages (the cgroup's limits dir). */
  where: string;
  out: (line: string) => void;
  err: (line: string) => void;
  /** SIGINT/SIGTERM. */
  signal: AbortSignal;
  /** The launcher outside the cgroup is gone (its lifeline pipe closed). */
  supervisorGone?: AbortSignal;
  now?: () => number;
  startWeights?: (file: string, sizeBytes: number, maxLifetimeMs: number, onLine: (line: PageToucherLine) => void) => Promise<Weights>;
}

export interface WorkerSummary {
  workerId: string;
  /** Jobs started, strays included: what --max-jobs counts (one given back unstarted is in givenBackAtStop). */
  taken: number;
  done: number;
  late: number;
  dead: number;
  tokensOut: number;
  /** Jobs this worker gave back to the head of admitted (at start: a previous run's; at stop: its own). */
  givenBackAtStart: number;
  givenBackAtStop: number;
  recoveredFromPeers: number;
  passes: number;
  passUsTotal: number;
  weightsFile: string | null;
  stoppedBy: StopReason;
}

class StopJob extends Error {
  constructor() {
    super("worker stopping");
    this.name = "StopJob";
  }
}

const DAY_MS = 24 * 3600 * 1000;

export async function runWorker(options: WorkerOptions, deps: WorkerDeps): Promise<WorkerSummary> {
  const now = deps.now ?? Date.now;
  const { config, workerId } = options;
  const keys = workerKeys(options.queue);
  const q = keys.queue;
  const working = q.working(workerId);
  const blockMs = options.blockMs ?? 1000;
  const ttlMs = options.heartbeatTtlMs ?? 10_000;
  const startedAt = now();
  const summary: WorkerSummary = {
    workerId,
    taken: 0,
    done: 0,
    late: 0,
    dead: 0,
    tokensOut: 0,
    givenBackAtStart: 0,
    givenBackAtStop: 0,
    recoveredFromPeers: 0,
    passes: 0,
    passUsTotal: 0,
    weightsFile: null,
    stoppedBy: "signal",
  };
  const tag = `worker ${workerId}`;
  const emit = (json: Record<string, unknown>, line: string): void => {
    if (options.json) deps.out(JSON.stringify({ ts: new Date(now()).toISOString(), ...json }));
    else deps.out(line);
  };

  const self = readProcessStat(deps.roots, "self");
  const startTime = self.ok ? self.value.startTime : 0;
  const token = workerToken(process.pid, startTime);
  const info = { pid: process.pid, start_time: startTime, host: os.hostname(), token, started: startedAt, where: deps.where, concurrency: config.concurrency };

  const redis = await connectRedis(deps.redisUrl, { name: `drill-worker:${workerId}`, commandTimeoutMs: options.commandTimeoutMs });
  let weights: Weights | null = null;
  let mover: BlockingMover | null = null;
  const timers: NodeJS.Timeout[] = [];
  // Stops every job between passes: signal, supervisor gone, duration, fatal error.
  const stopJobs = new AbortController();
  // Every job in flight waits on it (its pace sleep), beside the take and the loop: not a leak past Node's 10.
  setMaxListeners(2 * config.concurrency + 10, stopJobs.signal);
  let stopReason: StopReason | null = null;
  let fatal: Error | null = null;
  const stop = (reason: StopReason, error?: Error): void => {
    if (stopReason === null) stopReason = reason;
    if (error && !fatal) fatal = error;
    stopJobs.abort();
  };
  const onSignal = (): void => stop("signal");
  const onSupervisorGone = (): void => stop("supervisor_gone");
  deps.signal.addEventListener("abort", onSignal, { once: true });
  deps.supervisorGone?.addEventListener("abort", onSupervisorGone, { once: true });
  if (deps.signal.aborted) onSignal();
  if (deps.supervisorGone?.aborted) onSupervisorGone();
  // A stop with Redis paused ends in about a second, not after the command timeout twice.
  hurryOnStop(redis, stopJobs.signal);

  // An error as said, with what this client knows (a timeout while reconnecting is not a pause).
  const message = (err: unknown): string => redisErrorText(err, redis);
  let pendingTokens = 0;
  // Sent without a reply: a paused Redis runs them when it wakes, a dropped connection may have.
  // Not sent again, as HINCRBY twice counts twice (QA: tokens_out overcounted after a pause).
  let unansweredTokens = 0;
  // Why tokens_out is not counted: an outage is said by the loop; a key refusal only here, once.
  let flushError: string | null = null;
  let tokensRefused = false;
  const flushTokens = async (): Promise<void> => {
    if (pendingTokens === 0) return;
    const n = pendingTokens;
    pendingTokens = 0;
    try {
      await namingWrongType(redis, q.stats, "hash", () => redis.hincrby(q.stats, "tokens_out", n));
      flushError = null;
      if (tokensRefused) deps.err(`${tag}: tokens_out counted in ${q.stats} again (${n} held token(s) added)`);
      tokensRefused = false;
    } catch (err) {
      if (mayHaveRun(err, redis)) unansweredTokens += n;
      else pendingTokens += n; // next flush carries them
      flushError = message(err);
      if (isKeyRefusal(err) && !tokensRefused) deps.err(`${tag}: could not count tokens_out in ${q.stats} (${flushError}); its tokens are held until that key is fixed`);
      tokensRefused ||= isKeyRefusal(err);
    }
  };

  const inFlight = new Set<Promise<void>>();
  // The bytes each running job has in the working list (marked after its first token).
  const held = new Set<{ current: Buffer }>();
  // Ours, in the working list, not started: they wait for a slot, oldest first.
  const waiting: Buffer[] = [];
  let batcher: PassBatcher | null = null;
  // Since the take that failed: a BLMOVE whose reply was lost may have left a job in our list.
  let outageSince: number | null = null;
  // Jobs that ended without a record taking them off our working list (stopped, or a record lost to the stop).
  let stoppedInList = 0;
  // Whether its heartbeat may be in Redis: until the claim, nothing is registered, taken or to give back.
  let mayBeRegistered = false;
  try {
    await claimHeartbeat(redis, deps.roots, workerClaimant(workerId), keys.heartbeat(workerId), token, ttlMs).catch((err: unknown) => {
      // A claim sent without its reply may have run, or run when a paused Redis wakes.
      if (mayHaveRun(err, redis)) mayBeRegistered = true;
      throw err;
    });
    mayBeRegistered = true;
    const start = await giveBack(redis, keys, workerId, token).catch((err: unknown) => {
      // Its working list or admitted of another type: no job could be given back nor taken.
      if (isKeyRefusal(err)) throw new DrillError(`${tag}: ${message(err)}: it could not give back nor take jobs; nothing taken. Fix or delete that key, then start it again`, ExitCode.usage);
      throw err;
    });
    summary.givenBackAtStart = start.moved;
    if (start.moved > 0) deps.err(`${tag}: gave ${start.moved} job(s) left in ${working} by a previous run back to the head of ${q.admitted}${unrecordedNote(start)}`);
    // Its previous run's jobs are back; with a key it records in of another type it
    // could record no first token nor done (each refused): nothing taken.
    if (start.unrecorded !== null) {
      throw new DrillError(`${tag}: ${start.unrecorded}: it could not record the jobs it runs; nothing taken. Fix or delete that key, then start it again`, ExitCode.usage);
    }
    await redis.hset(keys.workers, workerId, JSON.stringify(info));
    const stale = removeStaleWeightsFiles(deps.roots, options.weightsDir, workerId);
    for (const file of stale.removed) deps.err(`${tag}: removed ${file}, left by a worker that is gone`);
    for (const { file, why } of stale.left) deps.err(`${tag}: could not remove ${file}, left by a worker that is gone: ${why}; remove it yourself once it can be`);

    // Renewals that fail are said once, and what they cost when they work again: with every
    // slot busy the take loop, which says an outage, is not running (QA R 2).
    let renewalsFailedSince: number | null = null;
    timers.push(
      setInterval(() => {
        runScript(redis, renewHeartbeatScript, [keys.heartbeat(workerId)], [token, String(ttlMs)])
          .then((renewed) => {
            const failedFor = renewalsFailedSince === null ? null : `${((now() - renewalsFailedSince) / 1000).toFixed(1)} s`;
            renewalsFailedSince = null;
            // "May": a stop alone takes nothing back (QA: "jobs recovered meanwhile run elsewhere" read as if they had been).
            const mayBeTaken = "a worker started meanwhile under this id, or a rollback, may have taken back the jobs it holds";
            if (renewed === 0 && failedFor !== null) deps.err(`${tag}: heartbeat ${keys.heartbeat(workerId)} expired while its renewals failed (${failedFor}); renewed again; ${mayBeTaken}`);
            else if (renewed === 0) deps.err(`${tag}: heartbeat ${keys.heartbeat(workerId)} was gone (expired: stalled > ${ttlMs} ms? or lost: redis restarted without its data?); ${mayBeTaken}`);
            else if (failedFor !== null) deps.err(`${tag}: heartbeat ${keys.heartbeat(workerId)} renewed again after ${failedFor}`);
          })
          .catch((err: unknown) => {
            if (renewalsFailedSince !== null || stopJobs.signal.aborted) return;
            renewalsFailedSince = now();
            deps.err(`${tag}: could not renew heartbeat ${keys.heartbeat(workerId)} (${message(err)}); retrying: once it expires (${ttlMs} ms) another worker may take back the jobs this one holds`);
          });
      }, Math.max(100, Math.floor(ttlMs / 3))),
      setInterval(() => void flushTokens(), options.statsFlushMs ?? 100),
    );

    // The weights: created fresh from inside the cgroup (we are in it; the coprocess inherits it).
    const file = path.join(options.weightsDir, weightsFileName(workerId, process.pid, startTime));
    summary.weightsFile = file;
    const lifetimeMs = options.durationMs !== null ? options.durationMs + SELF_EXIT_GRACE_MS : DAY_MS;
    deps.err(`${tag}: pid ${process.pid} in ${deps.where}; creating weights ${file} (${formatBytes(config.weightsBytes)})`);
    const fillStarted = now();
    let lastProgress = fillStarted;
    const onLine = (line: PageToucherLine): void => {
      if (line.kind === "touched" && now() - lastProgress >= 1000) {
        lastProgress = now();
        deps.err(`${tag}: weights ${formatBytes(line.bytes)}/${formatBytes(config.weightsBytes)} written`);
      }
    };
    const startWeights = deps.startWeights ?? defaultStartWeights;
    weights = await startWeights(file, config.weightsBytes, lifetimeMs, onLine);
    deps.err(
      `${tag}: weights ready in ${((now() - fillStarted) / 1000).toFixed(1)} s (toucher pid ${weights.pid}${weights.fallback ? ", python fallback: weaker stall" : ""});` +
        ` taking jobs from ${q.admitted} into ${working}, concurrency ${config.concurrency}`,
    );
    // Ready to take jobs: said in the registry, so `drill up` starts its schedule's clock only now.
    await markReady(redis, keys, workerId, { ...info, ready_at: now() }, stopJobs.signal, deps.err);
    const passes = new PassBatcher(weights);
    batcher = passes;

    // A record that could not reach Redis once the stop began is not the worker failing: the job is
    // still in the working list and goes back with the give-back (a key refusal is, and stays fatal).
    const lostToStop = (err: unknown): boolean => stopJobs.signal.aborted && !isKeyRefusal(err);

    const checkStop = (): void => {
      if (stopJobs.signal.aborted) throw new StopJob();
    };

    const runJob = async (payload: Buffer): Promise<void> => {
      const takenAt = now();
      // A job given back after its first token carries our mark: the gate took it without.
      const decoded = decodeJob(payload, takenAt, MAX_MARKED_PAYLOAD_BYTES);
      if (!decoded.ok) {
        const entry = deadEntry(decoded.reason, payload, { id: decoded.id, gate: `worker:${workerId}`, ts: takenAt });
        await retrying(() => runScript(redis, workerDeadScript, [working, q.dead, q.stats, q.inflight], [payload, entry, decoded.id ?? ""]), stopJobs.signal, true);
        summary.dead++;
        const [cause, ...rest] = decoded.reason.split(" ");
        emit({ event: "dead", job: decoded.id, reason: decoded.reason, worker: workerId }, `dead job=${decoded.id ?? "-"} reason=${cause ?? decoded.reason}${rest.length > 0 ? ` detail=${JSON.stringify(rest.join(" "))}` : ""}`);
        return;
      }
      const job: Job = decoded.job;
      const plan = planJob(job, config);
      const kv = new KvCache(plan.kvBytes);
      const jobPasses = emptyPassStats();
      const slot = { current: payload };
      held.add(slot);
      try {
        for (let pass = 0; pass < plan.prefillPasses; pass++) {
          checkStop();
          const step = await passes.step();
          addPass(jobPasses, step.us);
          const slice = prefillKvSlice(pass, plan, job.prompt_tokens, config.prefillTokensPerPass);
          kv.touch(slice.start, slice.end);
        }
        checkStop();
        const firstTokenAt = now();
        let tokens = plan.tokensOut > 0 ? 1 : 0;
        pendingTokens += tokens;
        summary.tokensOut += tokens;
        const marked = markFirstToken(payload, firstTokenAt);
        if (marked) {
          try {
            const applied = await runScript(redis, firstTokenScript, [working, keys.firstToken], [payload, marked, job.id, String(firstTokenAt)]);
            if (applied === 1) slot.current = marked;
          } catch (err) {
            deps.err(`${tag}: job=${job.id}: could not publish its first token (${message(err)}); the sidecar still counts it as waiting`);
          }
        }
        for (let i = 0; i < plan.decodePasses; i++) {
          checkStop();
          const stepStarted = now();
          const step = await passes.step();
          addPass(jobPasses, step.us);
          tokens++;
          pendingTokens++;
          summary.tokensOut++;
          const pace = decodePaceMs(stepStarted, now(), plan.decodeIntervalMs);
          if (pace > 0) await sleep(pace, stopJobs.signal);
        }
        const doneAt = now();
        const record = doneRecord(job, workerId, firstTokenAt, doneAt, tokens, jobPasses, plan.kvBytes);
        // Until it lands or the worker stops, as the gate rides out an outage: a worker that
        // gave up here exited mid-outage with every slot's job unrecorded (QA R 2). Said at once,
        // since a worker with every slot busy takes nothing and so says nothing else.
        let unrecordedSince: number | null = null;
        const unrecorded = (err: unknown): void => {
          unrecordedSince = now();
          deps.err(`${tag}: job=${job.id} finished; redis ${refusedOrUnavailable(err)} at ${redactUrl(deps.redisUrl)} recording it (${message(err)}); retrying until it takes it`);
        };
        const doneEntry = JSON.stringify(record);
        // A try sent but unanswered may have run: its retry then finds the job gone from the list.
        let unansweredTry = false;
        const finish = (bytes: Buffer): Promise<unknown> =>
          retrying(
            () =>
              runScript(redis, doneScript, [working, q.done, q.stats, q.inflight, keys.firstToken], [bytes, doneEntry, job.id, record.late ? "1" : "0", job.attempt > 0 ? "1" : "0"]).catch((err: unknown) => {
                unansweredTry ||= mayHaveRun(err, redis);
                throw err;
              }),
            stopJobs.signal,
            true,
            unrecorded,
            Infinity,
          );
        let applied: unknown;
        let landedUnanswered = false;
        try {
          applied = await finish(slot.current);
          // The mark may have been applied with its reply lost: then the list holds the marked bytes.
          if (applied !== 1 && marked && slot.current !== marked) applied = await finish(marked);
          // Gone after a try that got no reply: that try's own record in <q>:done says it ran (QA R re-check 4:
          // such a job was said "had left" and missing from the worker's done count, though recorded once).
          if (applied !== 1 && unansweredTry && (await doneRecordLanded(redis, q.done, doneEntry))) {
            applied = 1;
            landedUnanswered = true;
          }
          if (landedUnanswered) deps.err(`${tag}: job=${job.id} recorded by a try whose reply was lost (its record is in ${q.done})`);
          else if (applied === 1 && unrecordedSince !== null) deps.err(`${tag}: job=${job.id} recorded after ${((now() - unrecordedSince) / 1000).toFixed(1)} s`);
        } catch (err) {
          // Said here, with the job: it goes back, unless a try that got no reply ran (then it lands once Redis answers);
          // with every try answered (refused, say) there is none to wait for.
          if (!lostToStop(err)) throw err;
          stoppedInList++;
          const pending = unansweredTry ? ", unless a try that timed out lands once redis answers" : "";
          deps.err(`${tag}: job=${job.id} finished, but its done record did not reach redis before the stop (${message(err)}); it goes back with the give-back${pending}`);
          return;
        }
        if (applied !== 1) {
          deps.err(`${tag}: job=${job.id} finished but had left ${working} (recovered by another worker while this one stalled, recorded by an earlier try whose reply was lost, or lost in a redis restart without its data); not recorded twice`);
          return;
        }
        summary.done++;
        if (record.late) summary.late++;
        emit({ event: "done", ...record }, formatDoneLine(record));
      } finally {
        held.delete(slot);
        kv.release();
      }
    };

    const startJob = (payload: Buffer): void => {
      summary.taken++;
      const run: Promise<void> = runJob(payload)
        .catch((err: unknown) => {
          stoppedInList++;
          if (err instanceof StopJob) return; // stays in the working list; given back below
          // A dead record's tries at a stop.
          if (lostToStop(err)) {
            deps.err(`${tag}: a job's record did not reach redis before the stop (${message(err)}); the job goes back with the give-back`);
            return;
          }
          stop("failed", err instanceof Error ? err : new Error(String(err)));
        })
        .finally(() => inFlight.delete(run));
      inFlight.add(run);
    };

    const taker = new BlockingMover(deps.redisUrl, { name: `drill-worker-take:${workerId}`, stop: { signal: stopJobs.signal, via: redis } });
    mover = taker;
    let lastActivity = now();
    let lastPeerCheck = 0;
    // Dead peers' lists a key refusal keeps where they are: each said once, not every round.
    const peerRefusals = new Set<string>();
    // A take refused by a key of another type: Redis answered, no outage; said once, retried until the key is fixed.
    let refusedSince: number | null = null;
    let failures = 0;
    const stopped = new Promise<void>((resolve) => stopJobs.signal.addEventListener("abort", () => resolve(), { once: true }));
    while (!stopJobs.signal.aborted) {
      if (options.durationMs !== null && now() - startedAt >= options.durationMs) {
        stop("duration");
        break;
      }
      const slots = planSlots({ waiting: waiting.length, inFlight: inFlight.size, started: summary.taken }, { concurrency: config.concurrency, maxJobs: options.maxJobs });
      for (const payload of waiting.splice(0, slots.start)) startJob(payload);
      if (slots.start > 0) lastActivity = now();
      if (slots.then === "stop") {
        stopReason ??= "max_jobs";
        if (waiting.length > 0) deps.err(`${tag}: --max-jobs ${options.maxJobs} reached; ${waiting.length} job(s) in ${working} not started go back with the stop`);
        break;
      }
      if (slots.then === "wait") {
        // The second's timer and listener end with the wait: left to run out, each finished job left
        // one more on stopJobs (QA: Node's listener warning at ~150 jobs/s); `stopped` ends it on a stop.
        const waited = new AbortController();
        await Promise.race([Promise.race(inFlight), stopped, sleep(1000, waited.signal)]);
        waited.abort();
        continue;
      }
      // An outage counts from the command that got no reply, not from the
      // watchdog or the timeout that gave up on it seconds later.
      const sentAt = now();
      try {
        if (now() - lastPeerCheck >= (options.peerRecoveryMs ?? 5000)) {
          lastPeerCheck = now();
          for (const got of await recoverDeadPeers(redis, keys, workerId, peerRefusals, (line) => deps.err(`${tag}: ${line}`))) {
            summary.recoveredFromPeers += got.moved;
            emit({ event: "recovered", from_worker: got.worker, jobs: got.moved, worker: workerId }, `recovered jobs=${got.moved} from_worker=${got.worker} to=${q.admitted}`);
            if (got.unrecorded !== null) deps.err(`${tag}: gave ${got.moved} job(s) of dead worker ${got.worker} (${q.working(got.worker)}) back to the head of ${q.admitted}${unrecordedNote(got)}`);
          }
        }
        const takeSentAt = now();
        const payload = await namingWrongType(redis, [q.admitted, working], "list", () => taker.move(q.admitted, working, blockMs));
        if (refusedSince !== null) {
          deps.err(`${tag}: taking jobs again after ${((now() - refusedSince) / 1000).toFixed(1)} s`);
          refusedSince = null;
          failures = 0;
        }
        if (outageSince !== null) {
          const backAt = payload === null ? emptyTakeAnsweredAt(takeSentAt, now(), blockMs) : now();
          deps.err(`${tag}: redis back after ${((backAt - outageSince) / 1000).toFixed(1)} s`);
          outageSince = null;
          failures = 0;
          // A BLMOVE whose reply was lost left its job in our working list: it is
          // ours, older than the one just taken, and waits for a slot before it.
          // The one just taken is listed too but not waiting yet: not a stray.
          waiting.push(...(await strays(redis, working, [...[...held].map((slot) => slot.current), ...waiting], payload)));
        }
        if (payload === null) {
          if (options.idleExitMs !== null && inFlight.size === 0 && waiting.length === 0 && now() - lastActivity >= options.idleExitMs) {
            stopReason ??= "idle";
            break;
          }
          continue;
        }
        lastActivity = now();
        waiting.push(payload); // starts at the top of the loop, after any stray
      } catch (err) {
        // Stopping: nothing is retried; the give-back below says where the jobs went.
        if (stopJobs.signal.aborted) {
          if (!(err instanceof WatchdogTimeout)) deps.err(`${tag}: stopping, not retried: ${message(err)}`);
          break;
        }
        failures++;
        if (isKeyRefusal(err)) {
          if (refusedSince === null) deps.err(`${tag}: could not take jobs from ${q.admitted} into ${working} (${message(err)}); waiting until that key is fixed`);
          refusedSince ??= now();
        } else if (outageSince === null) {
          outageSince = sentAt;
          // An answer that refuses (OOM, READONLY, an ACL) is no outage: said as what it is, with its fix.
          deps.err(`${tag}: redis ${refusedOrUnavailable(err)} at ${redactUrl(deps.redisUrl)} (${message(err)}); retrying`);
        }
        await sleep(Math.min(100 * 2 ** Math.min(failures, 4), 1000), stopJobs.signal);
      }
      // A job that finished frees its slot; idle counts from the last one in flight.
      if (inFlight.size > 0) lastActivity = now();
    }
  } finally {
    for (const timer of timers) clearInterval(timer);
    mover?.close();
    // Jobs still running stop at their next pass and stay in the working list...
    stopJobs.abort();
    await Promise.allSettled([...inFlight]);
    // What our working list may hold now, for the line a give-back Redis does not answer gets.
    const holding: Holding = stoppedInList > 0 || waiting.length > 0 || outageSince !== null ? "maybe" : mover?.lastTakeUnanswered ? "if_taken_at_stop" : "nothing";
    // ...which goes back to the head of admitted, with the jobs still waiting for a slot
    // (past --max-jobs too) and any a lost BLMOVE reply left there. Sent beside the last
    // tokens_out count: with Redis paused the two wait out one reply time, not one each.
    const flushed = flushTokens();
    let answered = true;
    // Never registered: no heartbeat to deregister, no job taken (QA: "could not deregister" a heartbeat never written).
    if (mayBeRegistered) {
      try {
        const back = await giveBack(redis, keys, workerId, token);
        summary.givenBackAtStop = back.moved;
        if (back.moved > 0) deps.err(`${tag}: gave ${back.moved} unfinished job(s) back to the head of ${q.admitted}${unrecordedNote(back)}`);
        await runScript(redis, releaseHeartbeatScript, [keys.heartbeat(workerId), working, keys.workers], [token, workerId]);
      } catch (err) {
        answered = false;
        const heartbeat = keys.heartbeat(workerId);
        const stop = { tag, list: working, heartbeat, ttlMs, recovery: `another worker recovers it once ${heartbeat} expires, or rollback drains it` };
        deps.err(unansweredGiveBackLine(stop, holding, redisErrorText(err, redis)));
      }
    }
    await flushed;
    if (pendingTokens > 0) deps.err(`${tag}: ${pendingTokens} token(s) out not counted in ${q.stats} tokens_out (${flushError ?? "unknown"})`);
    if (unansweredTokens > 0) deps.err(`${tag}: ${unansweredTokens} token(s) out sent to ${q.stats} tokens_out got no reply: counted only if redis ran them (a paused one does once it resumes)`);
    summary.passes = batcher?.passes ?? 0;
    summary.passUsTotal = batcher?.passUsTotal ?? 0;
    // The steps after it run whatever it throws (an unlink refused, EACCES).
    if (weights) {
      const file = weights.file;
      await weights.close().catch((err: unknown) => deps.err(`${tag}: could not remove its weights ${file} (${message(err)}); remove it by hand`));
    }
    deps.signal.removeEventListener("abort", onSignal);
    deps.supervisorGone?.removeEventListener("abort", onSupervisorGone);
    // A server that did not answer the give-back will not answer QUIT either: no grace for it.
    await closeRedis(redis, answered ? undefined : 0);
  }
  summary.stoppedBy = stopReason ?? "signal";
  // A key of another type refuses every try until it is fixed: exit 2, as a start or a push refused by one.
  if (fatal && isKeyRefusal(fatal)) throw new DrillError(`${tag} failed: ${message(fatal)}. Fix or delete that key, then start it again`, ExitCode.usage, { cause: fatal });
  if (fatal) throw new DrillError(`${tag} failed: ${message(fatal)}`, undefined, { cause: fatal });
  return summary;
}

async function defaultStartWeights(file: string, sizeBytes: number, maxLifetimeMs: number, onLine: (line: PageToucherLine) => void): Promise<Weights> {
  return await WeightsToucher.start({ file, sizeBytes, maxLifetimeMs, readyTimeoutMs: weightsReadyTimeoutMs(sizeBytes), onLine });
}

/**
 * The worker's registry entry (`<q>:workers`) with `ready_at`: the weights are
 * written and it takes jobs next. Retried through a Redis outage; a stop
 * meanwhile skips it (nobody waits for a worker that is stopping).
 */
async function markReady(redis: Redis, keys: WorkerKeys, workerId: string, entry: Record<string, unknown>, signal: AbortSignal, say: (line: string) => void): Promise<void> {
  // An outage here would otherwise be silent for up to the ~30 s of retries.
  let outageSince: number | null = null;
  const sentAt = Date.now();
  const onFirstFailure = (error: unknown): void => {
    // From the first try: a paused server is found out only when its timeout gives up.
    outageSince = sentAt;
    say(`worker ${workerId}: redis ${refusedOrUnavailable(error)} (${message(error)}) marking it ready in ${keys.workers}; retrying`);
  };
  try {
    await retrying(() => namingWrongType(redis, keys.workers, "hash", () => redis.hset(keys.workers, workerId, JSON.stringify(entry))), signal, false, onFirstFailure);
    if (outageSince !== null) say(`worker ${workerId}: redis back after ${((Date.now() - outageSince) / 1000).toFixed(1)} s; marked ready`);
  } catch (err) {
    if (isKeyRefusal(err)) throw new DrillError(`worker ${workerId}: ${message(err)}: it could not mark itself ready. Fix or delete that key, then start it again`, ExitCode.usage);
    if (!signal.aborted) throw err;
  }
}

/** This worker as the claimant of its heartbeat (claimHeartbeat, liveHolderRefusal). */
function workerClaimant(workerId: string): HeartbeatClaimant {
  return { role: "worker", id: workerId, holder: parseWorkerToken };
}

/**
 * The launcher's check, before it joins the cgroup: a worker id a live worker
 * holds is refused here, not by a worker already started inside (QA: "joining
 * <cgroup>" printed, the twin's weights mapped in the cgroup, then the
 * refusal). A Redis that does not answer is left to the worker inside, which
 * waits for it and says so; the worker's own claim stays the one that counts.
 */
export async function refuseLiveWorkerId(redisUrl: string, queue: string, workerId: string, roots: HostRoots): Promise<void> {
  let redis: Redis;
  try {
    redis = await connectRedis(redisUrl, { name: "drill-worker-check", commandTimeoutMs: 2_000 });
  } catch {
    return;
  }
  try {
    const heartbeat = workerKeys(queue).heartbeat(workerId);
    const [holder, ttlMs] = await Promise.all([redis.get(heartbeat), redis.pttl(heartbeat)]);
    const refusal = holder === null ? null : liveHolderRefusal(roots, workerClaimant(workerId), heartbeat, holder, ttlMs);
    if (refusal) throw refusal;
  } catch (err) {
    if (err instanceof RefusedError) throw err; // anything else (a key of another type): the worker inside says it
  } finally {
    await closeRedis(redis);
  }
}

/**
 * Payloads in our working list that no job of this run accounts for (a lost
 * BLMOVE reply). `holding`: running jobs' bytes and those waiting for a slot;
 * `taken`: the one just moved, not waiting yet.
 */
async function strays(redis: Redis, working: string, holding: readonly Buffer[], taken: Buffer | null): Promise<Buffer[]> {
  // Held as of before the read: a job that finishes meanwhile has left the list too.
  return strayPayloads(await redis.lrangeBuffer(working, 0, -1), taken === null ? holding : [...holding, taken]);
}

/** A working list given back: how many moved, and the refusal of each key it records in left unwritten (null: all recorded). */
interface GivenBack {
  moved: number;
  unrecorded: string | null;
}

/** " as taken, unrecorded (<refusal>)" after a give-back line when a key it records in was left unwritten. */
function unrecordedNote(back: GivenBack): string {
  return back.unrecorded === null ? "" : ` as taken, unrecorded (${back.unrecorded})`;
}

/**
 * A worker's working list back to the head of admitted, in the order taken,
 * first-token marks renamed (givenBackPayload): with `token` its own (at
 * start and stop), with "" a dead peer's, only when its heartbeat is gone. Run even for an empty list:
 * its reply says whether every key it records in has drill's type. A working
 * list or admitted of another type throws a key refusal (isKeyRefusal).
 */
async function giveBack(redis: Redis, keys: WorkerKeys, workerId: string, token: string): Promise<GivenBack> {
  const working = keys.queue.working(workerId);
  const payloads = await namingWrongType(redis, working, "list", () => redis.lrangeBuffer(working, 0, -1));
  const args: (string | Buffer)[] = [token, workerId];
  for (const payload of payloads) {
    const decoded = decodeJob(payload, Date.now(), MAX_MARKED_PAYLOAD_BYTES);
    args.push(payload, givenBackPayload(payload), decoded.ok ? decoded.job.id : (decoded.id ?? ""));
  }
  const reply = await runScript(redis, recoverWorkingScript, [keys.heartbeat(workerId), working, keys.queue.admitted, keys.firstToken, keys.queue.stats, keys.workers], args);
  if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`unexpected recover script reply ${String(reply)}`);
  const [moved, unrecorded] = reply as unknown[];
  return { moved: Math.max(Number(moved), 0), unrecorded: unrecorded === "" ? null : String(unrecorded) };
}

/**
 * Working lists of other workers whose heartbeat expired: back to admitted.
 * One a key refusal keeps there (its list or admitted of another type) is
 * said once through `say` and skipped: not a Redis outage, and the others
 * are still recovered.
 */
async function recoverDeadPeers(redis: Redis, keys: WorkerKeys, self: string, refusalsSaid: Set<string>, say: (line: string) => void): Promise<Array<{ worker: string } & GivenBack>> {
  const prefix = keys.queue.working("x").slice(0, -1);
  const found: Array<{ worker: string } & GivenBack> = [];
  let cursor = "0";
  do {
    const [next, names] = await redis.scan(cursor, "MATCH", keys.queue.workingPattern, "COUNT", 200);
    cursor = next;
    for (const name of names) {
      const worker = name.slice(prefix.length);
      if (worker === self || (await redis.exists(keys.heartbeat(worker))) === 1) continue;
      try {
        // Token '' matches no live heartbeat: the script moves only when it is gone.
        const back = await giveBack(redis, keys, worker, "");
        if (back.moved > 0) found.push({ worker, ...back });
      } catch (err) {
        if (!isKeyRefusal(err)) throw err;
        const said = `${worker}\n${message(err)}`;
        if (!refusalsSaid.has(said)) say(`could not recover ${name} of dead worker ${worker} (${message(err)}); its jobs stay there until that key is fixed`);
        refusalsSaid.add(said);
      }
    }
  } while (cursor !== "0");
  return found;
}

/**
 * Whether this exact done record is in the done list: searched from its tail,
 * where a record written moments ago is, within the last 10 000 entries. A
 * failed look is a no (the job is then said as gone, as before).
 */
async function doneRecordLanded(redis: Redis, done: string, entry: string): Promise<boolean> {
  try {
    return (await redis.call("LPOS", done, entry, "RANK", "-1", "MAXLEN", "10000")) !== null;
  } catch {
    return false;
  }
}

/**
 * Re-runs an idempotent script through a Redis outage; gives up after ~30 s
 * (`tries` 40), or never while not stopping (Infinity).
 * Stopping, it gives up at once, or with `evenWhenStopping` once a try begun
 * after the stop failed too: each try can wait out a command timeout, and a
 * stop with Redis paused must end (what it could not record goes back with
 * the give-back). After a try that got no reply (timed out, or given up by
 * the stop) nothing is sent once stopping: the server that did not answer it
 * will not answer the next within the stop either. The wait between tries
 * ends at the stop. A key refusal (isKeyRefusal) is thrown at once: a key of
 * another type does not fix itself.
 */
export async function retrying<T>(fn: () => Promise<T>, signal: AbortSignal, evenWhenStopping: boolean, onFirstFailure?: (err: unknown) => void, tries = 40): Promise<T> {
  let lastError: unknown = null;
  for (let attempt = 0; attempt < tries; attempt++) {
    const begunStopped = signal.aborted;
    try {
      return await fn();
    } catch (err) {
      if (isKeyRefusal(err)) throw err;
      if (attempt === 0) onFirstFailure?.(err);
      lastError = err;
      const unanswered = gotNoReply(err);
      if (signal.aborted && (!evenWhenStopping || begunStopped || unanswered)) break;
      await sleep(Math.min(100 * 2 ** Math.min(attempt, 4), 1000), signal);
      if (signal.aborted && (!evenWhenStopping || unanswered)) break;
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Outside runWorker: errors said without the client's state. */
const message = (err: unknown): string => redisErrorText(err);
