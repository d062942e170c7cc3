import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdirSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { HOG_OUTCOMES, type HogOutcome } from "../cgroup/hog.js";
import { GATE_START_LINE } from "../gate/loop.js";
import { requireLayout } from "../cgroup/layout.js";
import { readOomKillCount } from "../cgroup/memoryFiles.js";
import { DEFAULT_CGROUP_NAME, validateParent } from "../cgroup/names.js";
import { DEFAULT_FILE_DIR } from "../host/filesystem.js";
import { resolveWorkerCgroup } from "../cgroup/paths.js";
import { applySetup, inspectForSetup, planSetup } from "../cgroup/setup.js";
import { stateDirError, writeJsonDurably } from "../cgroup/stateFiles.js";
import { evaluateChecks, type Check } from "../doctor/checks.js";
import { gatherFacts } from "../doctor/gather.js";
import { DrillError, RefusedError, UsageError } from "../errors.js";
import { readOnlineCpus, vcpusMismatch } from "../host/cpu.js";
import { readKernelText, type HostRoots } from "../host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../host/process.js";
import { findPackageRoot } from "../native/pagetoucher.js";
import type { Job } from "../queue/job.js";
import { DrillQueue, PUSH_FAILURE_TEXT, pushFailure, pushUntilTaken, unnumberedJob, type PushFailure } from "../queue/queue.js";
import { queueKeys } from "../queue/keys.js";
import { closeRedis, connectRedis, mayHaveRun, redactUrl, redisErrorText, sameRedis } from "../queue/redis.js";
import { formatStatusLine } from "../sampler/render.js";
import type { Sample } from "../sampler/step.js";
import { formatBytes, formatDuration, formatPlainDecimal } from "../units.js";
import type { DrillFile, InjectStep, PackStep } from "./drillFile.js";
import { queueServingRun, scanKeys, type ServingRun } from "./drain.js";
import { drillOfRunId, servingRunRollback } from "./rollback.js";
import { embeddedRedisDrill, freePort, startEmbeddedRedis, type EmbeddedRedis } from "./embeddedRedis.js";
import { acquireDrillLock, stateDirRefusal } from "./lock.js";
import { stopRecordedProcess } from "./processes.js";
import { realDir } from "./strays.js";
import { drillCommandAt, drillCommandFor, hiddenPasswordNoteAfter, leverCommand, reportAgain, reportQueueAgain, rollbackAgain, shellWord } from "../context.js";
import { drillDir, intendProcess, isDrillUp, keptRunStatePath, listDrills, readState, readStateEntries, runDir, runsDir, startedNothing, startedParts, statePath, withdrawIntent, writeState, writeUpEnded, type DrillEnded, type DrillState, type ProcessRecord, type ProcessRole } from "./state.js";
import { decidedJob, injectHold, nextFollowAction, nextPackAction, pushRetryDelayMs, splitPhases, type ScheduledPhase } from "./schedule.js";
import { LineTail } from "./tail.js";
import { readStalls, StallWatch, stillThere } from "./stalls.js";
import { notReadyText, readReadiness, readyTimeoutMs, type Readiness } from "./ready.js";
import { SELF_EXIT_GRACE_MS } from "../lifetime.js";
import { makeDirs } from "../util/makeDirs.js";
import { OWN_DIR_MODE, openOwnFile } from "../util/ownFiles.js";

/** The embedded Redis outlives the children's self-exit by this much. */
const REDIS_STOPS_LAST_MS = 30_000;
/** How often `up` prints the sidecar's status line between decision lines. */
const STATUS_EVERY_MS = 5000;
/** After the drill's end, how long `up` waits for the gate to decide the jobs pushed last. */
const DECISIONS_WAIT_MS = 15_000;

export interface UpOptions {
  roots: HostRoots;
  stateDir: string;
  procfs: string;
  sysfs: string;
  drill: DrillFile;
  drillFile: string;
  redisUrl: string | undefined;
  queue: string;
  cgroupName: string;
  parent: string | undefined;
  fileDir: string;
  /** The drill file's overrides as typed (`--duration 12s`, …): a command up prints to run it again runs the same drill (QA). */
  overrides?: string[];
  signal: AbortSignal;
  log: (line: string) => void;
  /** A stage once everything runs (`--detach` waits for it). */
  onRunning?: (state: DrillState) => void;
  crashAt?: string;
  /** The pid of the `up --detach` that holds up.lock for this (background) up, which takes it over. */
  lockFrom?: number;
}

export interface UpResult {
  state: DrillState;
  interrupted: boolean;
  pushed: string[];
  /** Jobs of started packs that the drill's end cut off (never pushed). */
  notPacked: number;
  /** Of notPacked, pushes that got no reply as the drill stopped: queued (under the next id) only if Redis ran them. */
  unansweredPushes: number;
  /** Jobs of phases that start past the drill's end (--duration shorter than the file): skipped, not counted in notPacked. */
  skippedJobs: number;
  /** Gate, worker or watch gone before the drill's end: the drill stopped there. */
  exitedEarly: EarlyExit[];
  /** A rollback of this run started while it ran (it stops `up` as its second step). */
  rollbackUnderWay: boolean;
  /** How long up waited for gate and worker before the schedule's clock started; null when it stopped first. */
  readyMs: number | null;
  /** The state dir refused the write of the drill's end (full, read-only): why; state.json holds what was recorded before. */
  endUnrecorded: string | null;
}

/** up's verdict: a signal to up first, then a child or the Redis gone, else the drill ran to its end. */
export function upVerdict(result: Pick<UpResult, "interrupted" | "exitedEarly">): DrillEnded["verdict"] {
  return result.interrupted ? "interrupted" : result.exitedEarly.length > 0 ? "stopped_early" : "ran";
}

/** The state's record of how the schedule ended (pure: the moment is given). */
export function drillEnded(result: Pick<UpResult, "interrupted" | "exitedEarly" | "pushed" | "notPacked" | "unansweredPushes" | "skippedJobs">, nowMs: number, signal: string | null = null): DrillEnded {
  const verdict = upVerdict(result);
  const gone = result.exitedEarly.map((e) => `${e.key} ${e.how}`).join(", ");
  const reason =
    verdict === "interrupted" ? `up was stopped by ${signal ?? "a signal (SIGINT/SIGTERM)"}${gone === "" ? "" : `; ${gone}`}`
    : verdict === "stopped_early" ? gone
    : null;
  // Stopped early: when up saw it and said "N s into the drill", not when it got to write this (QA: 7 s live, 8 s in the report).
  const seen = verdict === "stopped_early" ? result.exitedEarly.map((e) => e.atMs).filter((t): t is number => t !== undefined) : [];
  const atMs = seen.length > 0 ? Math.min(...seen) : nowMs;
  return { verdict, at: new Date(atMs).toISOString(), reason, pushed: result.pushed.length, notPacked: result.notPacked, unansweredPushes: result.unansweredPushes, skippedJobs: result.skippedJobs, pushedIds: [...result.pushed] };
}

/** What stopped the drill before its end: a child gone, or the Redis it packs into. */
export interface EarlyExit {
  /** gate, worker, watch, or redis. */
  key: string;
  /** e.g. "exited (code 2)", "exited (killed by a signal)", "gone (pid 7)", "did not answer a push for 16s". */
  how: string;
  /** The child's exit code; null for a signal or when it is not our child. */
  code: number | null;
  /** Its log; null when there is none worth reading (a given Redis, a stopped one). */
  log: string | null;
  /** A child exited; the embedded Redis is gone; a push Redis never took (why); or gate or worker never got ready. */
  cause: "exited" | "gone" | PushFailure | "not_ready" | "oom_killed" | "state_unwritten";
  /** The last line it wrote to its log (the usual reason), or the error seen. */
  lastLine: string | null;
  /** lastLine is the last thing it did on stdout (a decision, a sample), not a word on why it stopped: said as such. */
  lastLineIsOutput?: boolean;
  /** When up saw it (ms since the epoch), set as it is said: the run's recorded end. */
  atMs?: number;
}

/**
 * Pure: the cgroup's oom_kill count before → after, when the worker's launcher
 * said its worker was killed by the OOM killer (worker.run.ts: "… killed by
 * SIGKILL: the OOM killer (cgroup oom_kill 0 → 1); …"), else null. A "likely"
 * (count unreadable) or a kill -9 is not one.
 */
export function workerOomKill(lastLine: string | null): { before: number; after: number } | null {
  const match = lastLine === null ? null : /killed by SIGKILL: the OOM killer \(cgroup oom_kill (\d+) → (\d+)\)/.exec(lastLine);
  return match ? { before: Number(match[1]), after: Number(match[2]) } : null;
}

/** Pure: whether up failed (exit 1) for what stopped it early; an OOM kill in the cgroup is the drill's outcome, not a failure (RELIABILITY 4). */
export function stoppedByFailure(exitedEarly: ReadonlyArray<Pick<EarlyExit, "cause">>): boolean {
  return exitedEarly.some((e) => e.cause !== "oom_killed");
}

/**
 * DRILL_CRASH_AT (fault tests): `<step>` SIGKILLs up there, `<step>:stop` stops it (a wedged up), `<step>:throw` throws there (a bug in up).
 * Several, comma-separated: a test stops up at one step to refuse its writes, and at a later one to let them through again.
 */
function crashAt(options: Pick<UpOptions, "crashAt">, step: string): void {
  const at = options.crashAt?.split(",") ?? [];
  if (at.includes(step)) process.kill(process.pid, "SIGKILL");
  else if (at.includes(`${step}:stop`)) process.kill(process.pid, "SIGSTOP");
  else if (at.includes(`${step}:throw`)) throw new Error(`DRILL_CRASH_AT=${step}:throw`);
}

/**
 * `drill up`: the runbook's lab topology from a drill file. Every mkdir and
 * spawn is preceded by its intent in state.json (fsynced) and followed by the
 * pid with its start time, and every child carries DRILL_RUN_ID, so a crash at
 * any point leaves rollback what it needs.
 */
export async function runUp(options: UpOptions): Promise<UpResult> {
  const { drill, roots, stateDir, log } = options;
  const name = drill.name;
  // Checked before anything is touched (the drill file's when it was read), and
  // blamed on where it came from: the flag wins over the file.
  const parent = options.parent ?? drill.cgroup.parent;
  const parentSpec = validateParent(parent, options.parent !== undefined ? "--parent" : `${options.drillFile}: cgroup.parent`);
  const lock = acquireDrillLock(drillDir(stateDir, name), "up", "up", undefined, options.lockFrom ?? null);
  const crash = (step: string) => crashAt(options, step);
  crash("lock");
  const children: Array<{ record: ProcessRecord; exited: Promise<number | null> }> = [];
  try {
    // The drill's last run, put back if this start is refused after its first state write.
    const previous = readState(stateDir, name);
    refuseWhileUp(previous, name, drillCommandFor(stateDir, roots));

    log(`doctor: checking the host`);
    const facts = await gatherFacts({
      roots,
      parent: parentSpec,
      redisUrl: options.redisUrl,
      hogDir: options.fileDir,
      hogBytes: fileDirBytes(drill),
      stateDir,
      drillDirs: [drillDir(stateDir, name), runsDir(stateDir, name)],
    });
    // A database the server does not have is a wrong --redis (exit 2, as every other command says), not a host doctor refuses.
    if (facts.redis.given && facts.redis.databaseRefused) throw new UsageError(facts.redis.error ?? `redis ${redactUrl(facts.redis.url)}: database refused`);
    const doctor = doctorOutcome(evaluateChecks(facts));
    for (const warning of doctor.warnings) log(warning);
    const otherBox = vcpusMismatch(drill.host.vcpus, readOnlineCpus(roots), options.drillFile);
    if (otherBox !== null) log(`drill file: warning: ${otherBox}`);
    if (doctor.refusal !== null) throw new RefusedError(doctor.refusal);
    if (options.redisUrl) await refuseQueueInUse(options.redisUrl, options);

    const runId = `${name}-${new Date().toISOString().replace(/[-:T]/g, "").slice(0, 14)}-${randomBytes(3).toString("hex")}`;
    // This run's embedded Redis and its children's output (runDir says why).
    const dir = runDir(stateDir, name, runId);
    // The worker cgroup is judged before anything starts: a name another drill
    // runs in (or anything with tasks) is refused with nothing to roll back.
    const layout = requireLayout(roots);
    const cgroup = resolveWorkerCgroup(roots, layout, options.cgroupName, parentSpec);
    const setupOptions = { memoryMax: drill.cgroup.memory_max, swapMax: drill.cgroup.swap_max, owner: { drill: name, runId } };
    planSetup(cgroup, inspectForSetup(roots, cgroup, stateDir), setupOptions);

    const self = readProcessStat(roots, process.pid);
    const state: DrillState = {
      version: 1,
      name,
      runId,
      drillFile: options.drillFile,
      createdAt: new Date().toISOString(),
      phase: "starting",
      queue: options.queue,
      redis: { url: options.redisUrl ?? "", embedded: null },
      cgroup: null,
      processes: [],
      fileDir: null,
      owner: { pid: process.pid, startTime: self.ok ? self.value.startTime : null },
    };
    keepPreviousRun(stateDir, previous, state.runId, log, drillCommandFor(stateDir, roots));
    writeState(stateDir, state);
    crash("state");
    // A rollback that took the drill over while it starts (its "rolling_back"
    // on disk, before its step 2 stops this up) owns state.json: nothing more
    // is recorded or started. Each act's intent is written first, so a refused
    // write stops the act too.
    const takenOver = (): boolean => rollbackOwnsState(readStateQuietly(stateDir, name), runId);
    const stopIfTakenOver = (): void => {
      if (takenOver()) throw new DrillError(`drill rollback took ${name} over while it was starting (${statePath(stateDir, name)} says rolling_back): nothing more is started here; the rollback finishes it`);
    };
    const save = (): void => {
      stopIfTakenOver();
      writeState(stateDir, state);
    };
    // Never an existing dir (EEXIST): a run dir is nobody else's. Refused (full, read-only): said as a state write (up.run.ts).
    try {
      makeDirs(path.dirname(dir));
      mkdirSync(dir, { mode: OWN_DIR_MODE });
    } catch (err) {
      throw stateDirError("create the run dir", dir, err);
    }
    // The state dir too, absolute: a rollback pointed at another one finds them and says where to look.
    const env = { ...process.env, DRILL_RUN_ID: runId, DRILL_STATE_DIR: path.resolve(stateDir) };

    // A state write the state dir refused while setting up (full, read-only), once a Redis answers: the drill stops there, as at a
    // Ctrl-C: nothing is started after it (its intent could not be recorded), and the schedule says what it made.
    // One refused before (no Redis to read a summary from) fails up with what it left (up.run.ts).
    let setupRefused: EarlyExit | null = null;
    const refusedWhileSettingUp = (what: string, err: unknown): void => {
      setupRefused = stateUnwritten(what, err);
      if (setupRefused === null) throw err;
    };
    // Once this run's embedded Redis is started (or the given one is in use), an unexpected error (a bug, a Redis error or
    // refusal, as of the admission lever's write or of the connection to it) is recorded as the run's end, as in the
    // schedule: state.json saying starting (or running) with its up gone read as a drill that something still set up (QA).
    // One before (nothing runs yet) is said as such (up.run.ts).
    let startUndone = false;
    const failed = (err: unknown): unknown => {
      // A refused start undone (undoRefusedStart): nothing of this run is left to record.
      if (startUndone) return err;
      // Taken over by a rollback (it stops this up next): it owns state.json, and up says only that.
      if (rollbackOwnsState(readStateQuietly(stateDir, name), runId)) return err instanceof ScheduleFailed ? err.error : err;
      // A bug: recorded as the run's end, or state.json would say starting or running with nothing running it (QA).
      return scheduleFailure(stateDir, state, err, drillCommandFor(stateDir, roots), upCommand(options, options.redisUrl, options.queue));
    };
    // Redis: the one given, or an embedded server with AOF in this run's dir.
    let embedded: EmbeddedRedis | null = null;
    if (!options.redisUrl) {
      const redisDir = path.join(dir, "redis");
      // Port and dir are known before the spawn, so rollback can reach and find it after a crash.
      const port = await freePort();
      state.redis = { url: `redis://127.0.0.1:${port}`, embedded: { dir: redisDir, port } };
      const record = intendProcess(state, "redis", "redis");
      save();
      crash("redis-intent");
      // It holds the drain and stops last, as in rollback: the children, gone at
      // duration + 5 min, never find it gone (or somebody else's on its port).
      embedded = await startEmbeddedRedis({ dir: redisDir, port, detached: true, env, lifetimeMs: drill.duration + SELF_EXIT_GRACE_MS + REDIS_STOPS_LAST_MS }).catch((err: unknown) => {
        // Its dir or its stderr file refused (a plain fs error, or its own exit for a dir that refuses its files):
        // a state dir refusal, said by up.run.ts (the end may not be writable either).
        const refusal = err instanceof DrillError ? err : stateDirError("start the embedded Redis in", redisDir, err);
        if (stateDirRefusal(refusal) !== null) throw refusal;
        // Its own failure (it exited at start, or never answered: stopped then) leaves no Redis: its intent taken back, the
        // run's end is recorded as any from here, closed, as nothing of it is left to roll back (QA: state.json stayed
        // "starting" with up gone, and the next up was refused as "already up").
        withdrawIntent(state, record);
        state.redis = { url: "", embedded: null };
        throw failed(err);
      });
      // Its pid in the record at once (written next): the recorded end of a failure from here names it, and its rollback stops it
      // (QA: an error before the connection left state.json "starting" and the Redis unnamed).
      fillPid(roots, record, embedded.pid);
      state.redis = { url: embedded.url, embedded: { dir: redisDir, port: embedded.port } };
    }
    let redis: Redis;
    try {
      if (embedded !== null) {
        crash("redis-spawn");
        try {
          save();
        } catch (err) {
          // Its intent (port, dir) is recorded: rollback finds it by its dir; it answers, so the drill stops with a summary.
          refusedWhileSettingUp("the embedded Redis's record", err);
        }
        log(`redis: embedded redis-server pid ${embedded.pid} at ${embedded.url} (appendonly, appendfsync always) in ${embedded.dir}`);
      } else {
        log(`redis: ${redactUrl(state.redis.url)}`);
      }
      log(`redis: deny-all by hand: ${leverCommand(state.redis.url, options.queue, "reject_all")} (pack, gate, watch and worker find this Redis in ${statePath(stateDir, name)} while the drill is up)${hiddenPasswordNoteAfter([state.redis.url])}`);
      // QA: connecting failed after the embedded Redis answered its PING (its ready check): state.json stayed "starting".
      redis = await connectRedis(state.redis.url, { name: "drill-up", commandTimeoutMs: 5000 });
    } catch (err) {
      throw failed(err);
    }
    try {
      const queue = new DrillQueue(redis, options.queue);
      let result;
      try {
        // The worker cgroup, judged again (the host moved on while Redis started).
        // A refusal (judged here, or by applySetup under the cgroup's lock) records
        // no cgroup: this drill's rollback must never tear down the one it was
        // refused. Once claimed, intent first; setup writes its own marker before mkdir.
        let setup = null;
        // Not after a refused write (the Redis's record): nothing is claimed unrecorded.
        if (setupRefused === null) {
          try {
            const plan = planSetup(cgroup, inspectForSetup(roots, cgroup, stateDir), setupOptions);
            setup = applySetup(plan, stateDir, undefined, () => {
              state.cgroup = { name: options.cgroupName, parent: parent ?? "/", dirs: cgroup.dirs.map((d) => d.dir) };
              save();
            });
          } catch (err) {
            // Refused (another drill took the cgroup while Redis started): nothing
            // of this run may stay behind, or its refusal would leave a Redis
            // running and a "starting" state in place of the drill's last run.
            if (err instanceof RefusedError && state.cgroup === null) {
              await undoRefusedStart(roots, stateDir, state, previous, dir);
              startUndone = true;
            }
            // Its record or its marker refused: setup made no cgroup dir (it undoes its mkdirs).
            refusedWhileSettingUp("the worker cgroup's record", err);
          }
        }
        crash("cgroup");
        // The counter before anything runs in it: an OOM kill at the drill's first seconds
        // (a worker whose KV overfills the cgroup) can come before watch's first sample.
        const oomKillAtSetup = readOomKillCount(cgroup.limits);
        if (setup !== null && oomKillAtSetup.ok && state.cgroup !== null) {
          state.cgroup.oomKillAtSetup = { tsMs: Date.now(), count: oomKillAtSetup.value };
          try {
            save();
          } catch (err) {
            refusedWhileSettingUp("the cgroup's oom_kill count", err);
          }
        }
        // After the cgroup is claimed: a refused start wrote nothing into a given Redis.
        // Never over a rollback's deny-all (it pulls the lever again once it has stopped this up).
        stopIfTakenOver();
        // Stopped while it set up (Ctrl-C, SIGTERM): nothing is opened or started after the stop (QA: the lever
        // opened and three children started after it); the schedule then ends at once and says what to roll back.
        const stopped = (): boolean => options.signal.aborted || setupRefused !== null;
        let admissionOpened = false;
        if (!stopped()) {
          // Refused or failed (a Redis error: read-only, NOREPLICAS, OOM, NOPERM): said as such, one line (not a bug's stack).
          await queue.setMode("admit", { forced: false, psi: facts.hostPsi.avg10?.toFixed(2) ?? "missing", by: "up" }).catch((err: unknown) => {
            const lever = `(${queue.keys.mode} admit) on redis ${redactUrl(state.redis.url)}`;
            // Sent and never answered (a timeout, the connection lost): Redis may have run it, so admission may be open.
            throw new DrillError(
              mayHaveRun(err, redis) ? `the admission lever's write ${lever} got no reply (${redisErrorText(err, redis)}): it may have been applied, so admission may be open; the rollback pulls the lever either way`
              : `cannot open admission ${lever}: ${redisErrorText(err, redis)}`,
              undefined,
              { cause: err },
            );
          });
          admissionOpened = true;
        }
        if (setup !== null) {
          log(`cgroup: ${cgroup.limits.dir} memory.max ${formatBytes(drill.cgroup.memory_max)}, swap ${formatBytes(drill.cgroup.swap_max)} (lab expectation)`);
          for (const warning of setup.warnings) log(`cgroup: warning: ${warning}`);
        }

        // Files of the hog and the worker: one directory per run, removed by rollback.
        const fileDir = path.join(options.fileDir, `drill-${runId}`);
        if (setupRefused === null) {
          state.fileDir = fileDir;
          try {
            save();
            makeDirs(fileDir);
          } catch (err) {
            state.fileDir = null;
            refusedWhileSettingUp("the file dir's record", err);
          }
        }
        crash("files");

        const selfExitMs = drill.duration + SELF_EXIT_GRACE_MS;
        const globalArgs = ["--procfs", options.procfs, "--sysfs", options.sysfs, "--state-dir", stateDir];
        // The Redis URL in the environment, not argv: /proc/<pid>/cmdline is readable by every user, environ only by the owner (QA: a password there).
        const childEnv = { ...env, DRILL_REDIS_URL: state.redis.url };
        const target = ["--name", options.cgroupName, ...(parent ? ["--parent", parent] : [])];
        const spawnChild = (role: ProcessRole, key: string, args: string[], files: string[] = []): SpawnedChild | null => {
          // A rollback that took the drill over (before its step 2 stops this up)
          // owns state.json: a hog spawned now would write "running" over its
          // "rolling_back", and its record would be lost to the rollback's own copy.
          if (takenOver() || stopped()) return null;
          const record = intendProcess(state, role, key, files);
          let child;
          try {
            writeState(stateDir, state);
            crash(`${key}-intent`);
            child = spawnDrill([...globalArgs, ...args], path.join(dir, outputName(key)), path.join(dir, `${key}.log`), childEnv);
          } catch (err) {
            // Never spawned (its intent or its log refused): a pid-less record in the run's end would read as a child to stop.
            withdrawIntent(state, record);
            throw err;
          }
          crash(`${key}-spawn`);
          const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
          if (child.pid !== undefined) fillPid(roots, record, child.pid);
          // Watched for an early exit even when its pid's write is refused next.
          children.push({ record, exited });
          writeState(stateDir, state);
          return { record, exited };
        };
        const startChild = (role: ProcessRole, args: string[]): void => {
          try {
            spawnChild(role, role, args);
          } catch (err) {
            refusedWhileSettingUp(`${role}'s record or log`, err);
          }
        };

        const g = drill.gate;
        startChild("gate", [
          "gate", "--queue", options.queue, ...target,
          "--psi-limit", formatPlainDecimal(g.psi_limit), "--psi-rate-limit", formatPlainDecimal(g.psi_rate_limit),
          "--slack-limit", `${g.slack_limit}ms`, "--packed-token-limit", String(g.packed_token_limit),
          "--interval", `${g.interval}ms`, "--retry-host-class", g.retry_host_class,
          "--duration", `${selfExitMs}ms`,
        ]);
        const w = drill.worker;
        startChild("worker", [
          "worker", "--queue", options.queue, ...target,
          "--weights", String(w.weights), "--file-dir", fileDir,
          "--kv-bytes-per-token", String(w.kv_bytes_per_token), "--decode-tokens-per-s", formatPlainDecimal(w.decode_tokens_per_s),
          "--prefill-tokens-per-pass", String(w.prefill_tokens_per_pass), "--duration", `${selfExitMs}ms`,
        ]);
        startChild("watch", [
          "--json", "watch", "--queue", options.queue, ...target, "--interval", `${g.interval}ms`,
          "--psi-limit", formatPlainDecimal(g.psi_limit), "--psi-rate-limit", formatPlainDecimal(g.psi_rate_limit), "--duration", `${selfExitMs}ms`,
        ]);
        // Opened before the stop, or as it came (while the lever was being written): said so, the rollback pulls it (QA).
        const admission = admissionOpened ? "admission opened (the rollback pulls the lever)" : "admission not opened";
        const notStarted = (["gate", "worker", "watch"] as const).filter((key) => !children.some((c) => c.record.key === key));
        const left = notStarted.length === 0 ? "gate, worker and watch started" : `${notStarted.length === 3 ? "gate, worker and watch" : notStarted.join(" and ")} not started`;
        const stop = setupRefused === null ? `stopped by ${typeof options.signal.reason === "string" ? options.signal.reason : "a signal"} while setting up:` : `stopped while setting up: ${(setupRefused as EarlyExit).lastLine};`;
        if (stopped()) log(`${stop} ${admission}, ${left}`);
        else log(`started gate, worker (in the cgroup) and watch; logs in ${dir}`);
        crash("children");
        stopIfTakenOver();

        const gatePid = children.find((c) => c.record.role === "gate")?.record.pid ?? null;
        result = await runSchedule(options, state, queue, spawnChild, target, dir, [...children], setupRefused, {
          timeoutMs: readyTimeoutMs(drill.worker.weights, drill.gate.interval),
          read: () => readReadiness(redis, options.queue, gatePid, options.cgroupName),
          stopIfTakenOver,
          onReady: () => {
            stopIfTakenOver();
            state.phase = "running";
            state.scheduleStartedAt = new Date().toISOString();
            writeState(stateDir, state);
            options.onRunning?.(state);
          },
        });
      } catch (err) {
        throw failed(err);
      }
      // A rollback that stopped this up (its step 2) owns the state file now:
      // "stopped" written over its "rolling_back" would hide that it runs.
      const rollbackUnderWay = rollbackOwnsState(readStateQuietly(stateDir, name), runId);
      const ended = drillEnded(result, Date.now(), typeof options.signal.reason === "string" ? options.signal.reason : null);
      // The rollback owns state.json: what was packed goes beside the run's logs for the report (QA: pushed/not_packed null after a mid-run rollback).
      if (rollbackUnderWay) writeUpEnded(dir, ended);
      // onInterrupt aborts with the signal's name: the report says which (Ctrl-C, or a supervisor's SIGTERM).
      const endUnrecorded = rollbackUnderWay ? null : recordEnd(stateDir, state, ended);
      return { state, interrupted: result.interrupted, pushed: result.pushed, notPacked: result.notPacked, unansweredPushes: result.unansweredPushes, skippedJobs: result.skippedJobs, exitedEarly: result.exitedEarly, rollbackUnderWay, readyMs: result.readyMs, endUnrecorded };
    } finally {
      await closeRedis(redis);
    }
  } finally {
    lock.release();
  }
}

/**
 * The run's end in state.json: stopped, its processes and cgroup staying
 * until rollback. Null, or why the state dir refused it (full, read-only):
 * what ran is said all the same, and what to roll back (QA: exit 1 and no summary).
 */
function recordEnd(stateDir: string, state: DrillState, ended: DrillEnded, phase: "stopped" | "complete" = "stopped"): string | null {
  state.phase = phase;
  state.ended = ended;
  if (phase === "complete") state.completedAt = ended.at;
  try {
    writeState(stateDir, state);
    return null;
  } catch (err) {
    if (stateDirRefusal(err) === null) throw err;
    return (err as Error).message;
  }
}

/**
 * An unexpected error in up's schedule (packing stopped by then), or once it
 * started its children, before the schedule: recorded as the run's end,
 * stopped early, as after any stop (its processes and cgroup stay for the
 * rollback); the error says it with the rollback to run. A run that started
 * nothing and has no Redis (its embedded one failed to start) is recorded
 * closed (complete): a rollback would have nothing to stop, drain or export,
 * and the next `up` (`upAgain`) needs none first.
 */
function scheduleFailure(stateDir: string, state: DrillState, err: unknown, drillCmd: string, upAgain: string): DrillError {
  const what = err instanceof Error ? err.message : String(err);
  // ScheduleFailed counts what was packed; anything else came before packing could start.
  const counted = err instanceof ScheduleFailed ? drillEnded({ ...err.counts, interrupted: false, exitedEarly: [] }, Date.now()) : { at: new Date().toISOString(), pushed: null, notPacked: null };
  const closed = startedNothing(state);
  let unrecorded: string | null;
  try {
    unrecorded = recordEnd(stateDir, state, { ...counted, verdict: "stopped_early", reason: `drill up failed: ${what}` }, closed ? "complete" : "stopped");
  } catch (writeErr) {
    unrecorded = (writeErr as Error).message;
  }
  const recorded = unrecorded === null ? `${statePath(stateDir, state.name)} records it ${closed ? "ended" : "stopped"}` : `its end is not recorded (${unrecorded})`;
  // A bug (not drill's own error): its stack below the line, for the bug report, as main prints an unexpected error's.
  const cause = err instanceof ScheduleFailed ? err.error : err;
  const trace = !(cause instanceof DrillError) && cause instanceof Error && cause.stack !== undefined ? `\n${cause.stack}` : "";
  const where = err instanceof ScheduleFailed ? `in run ${state.runId}'s schedule: ${what}; it stopped packing and exits` : `setting up run ${state.runId}, before its schedule started: ${what}; it exits`;
  // drill's own error keeps its exit code (a refusal its 3), recorded all the same.
  const exitCode = cause instanceof DrillError ? cause.exitCode : undefined;
  const next = closed && unrecorded === null
    ? `it started nothing (no Redis, process or cgroup): nothing to roll back; run \`${upAgain}\` again once that is fixed`
    : `${staysUntilRollback(state)}: run \`${rollbackAgain(drillCmd, {}, state.name)}\``;
  return new DrillError(`up failed ${where}, ${recorded}; ${next}${trace}`, exitCode);
}

/** What of a run stays for its rollback, as recorded: its processes (or only its embedded Redis) and cgroup, those it has. */
function staysUntilRollback(state: Pick<DrillState, "processes" | "cgroup">): string {
  const parts = startedParts(state);
  if (parts.length === 0) return "nothing of it runs (no process or cgroup); the rollback closes the run";
  return `its ${parts.join(" and ")} ${parts.length === 1 ? "stays" : "stay"} until rollback`;
}

/**
 * doctor's value column, which its table shows beside the detail (the PSI
 * figure, the Redis policy, the file looked for): a line without it names a
 * problem but not the figure. A text the detail already says is not repeated.
 */
function valueNotSaid(c: Check): string {
  if (c.value === null) return "";
  if (typeof c.value === "string" && c.detail.includes(c.value)) return "";
  return ` (${c.name} = ${String(c.value)})`;
}

/**
 * doctor's checks as up says them: a line for each warning, in doctor's words
 * (up runs with them, as doctor says "ready, read the warnings above"; an
 * operator who never ran doctor reads them here), and the refusal when a check
 * fails. Warnings are said on a refusal too: they are what doctor would print.
 */
export function doctorOutcome(checks: Check[]): { warnings: string[]; refusal: string | null } {
  const warnings = checks.filter((c) => c.status === "warn").map((c) => `doctor: warning: ${c.name}: ${c.detail}${valueNotSaid(c)}`);
  const fails = checks.filter((c) => c.status === "fail");
  return { warnings, refusal: fails.length > 0 ? `doctor refused: ${fails.map((c) => `${c.name}: ${c.detail}${valueNotSaid(c)}`).join("; ")}` : null };
}

/**
 * Undoes a start refused before it claimed the cgroup: stops the embedded
 * Redis it started, removes its run dir, and puts the drill's last state
 * back (or none), so the refusal leaves nothing to roll back and the last
 * run's report reads as before. Called under up.lock.
 */
export async function undoRefusedStart(roots: HostRoots, stateDir: string, state: DrillState, previous: DrillState | null, dir: string): Promise<void> {
  const redis = state.processes.find((p) => p.role === "redis");
  if (redis) await stopRecordedProcess(roots, redis, 3000);
  rmSync(dir, { recursive: true, force: true });
  try {
    rmdirSync(path.dirname(dir)); // runs/, when this was the drill's first run
  } catch {
    // holds earlier runs: theirs to keep
  }
  if (previous) writeState(stateDir, previous);
  else rmSync(statePath(stateDir, state.name), { force: true });
}

/** A child up started (its state record and its exit), or null when a rollback has taken the drill over: nothing is started then. */
type SpawnChild = (role: ProcessRole, key: string, args: string[], files?: string[]) => SpawnedChild | null;
interface SpawnedChild {
  record: ProcessRecord;
  exited: Promise<number | null>;
}

/** The state on disk is this run's, and a rollback has taken it over. */
export function rollbackOwnsState(onDisk: DrillState | null, runId: string): boolean {
  return onDisk !== null && onDisk.runId === runId && (onDisk.phase === "rolling_back" || onDisk.phase === "complete");
}

function readStateQuietly(stateDir: string, name: string): DrillState | null {
  try {
    return readState(stateDir, name);
  } catch {
    return null; // unreadable (moved aside, say): up's own view stands
  }
}

/**
 * What the drill puts on --file-dir at once: the worker's weights file for
 * the whole drill, plus the largest thrash hog's file (an anon hog has none;
 * injects run one after another). doctor's room check is on this.
 */
export function fileDirBytes(drill: Pick<DrillFile, "worker" | "phases">): number {
  const thrash = drill.phases.map((p) => (p.inject?.mode === "thrash" ? p.inject.size : 0));
  return drill.worker.weights + Math.max(0, ...thrash);
}

/** How a phase reads in "already up": "stopped" alone read as nothing left to roll back (QA). */
const UP_PHASE_WORDS: Record<DrillState["phase"], string> = {
  starting: "starting",
  running: "running",
  stopped: "stopped: its schedule ended, its processes and cgroup stay until rollback",
  rolling_back: "rolling back",
  complete: "complete",
};

/** A drill whose state is not complete is up: one run at a time per name. `where` adds to what is named (e.g. its log). */
export function refuseWhileUp(existing: DrillState | null, name: string, drillCmd: string, where = ""): void {
  if (existing && isDrillUp(existing)) {
    throw new RefusedError(`drill ${name} is already up (run ${existing.runId}, ${UP_PHASE_WORDS[existing.phase]}${where}); run ${rollbackAgain(drillCmd, {}, name)} first`);
  }
}

/** A state write the state dir refused (full, read-only), as what stops the drill; null for any other error. */
function stateUnwritten(what: string, err: unknown): EarlyExit | null {
  return stateDirRefusal(err) === null ? null : { key: "state", how: `not written (${what})`, code: null, log: null, lastLine: (err as Error).message, cause: "state_unwritten" };
}

/** What up's schedule threw (`error`), once its packing stopped: what it packed by then, for the run's end record. */
class ScheduleFailed extends Error {
  constructor(
    readonly error: unknown,
    readonly counts: Pick<UpResult, "pushed" | "notPacked" | "unansweredPushes" | "skippedJobs">,
  ) {
    super(error instanceof Error ? error.message : String(error));
  }
}

/** What the schedule waits for before its clock starts (ready.ts). */
interface ReadyWait {
  timeoutMs: number;
  read: () => Promise<Readiness>;
  /** Throws when a rollback has taken the drill over: nothing is pushed then. */
  stopIfTakenOver: () => void;
  /** Gate and worker are ready: the drill runs from here. */
  onReady: () => void;
}

async function runSchedule(
  options: UpOptions,
  state: DrillState,
  queue: DrillQueue,
  spawnChild: SpawnChild,
  target: string[],
  dir: string,
  core: ReadonlyArray<{ record: ProcessRecord; exited: Promise<number | null> }>,
  /** A state write refused while setting up: the drill stopped before its schedule. */
  setupRefused: EarlyExit | null,
  ready: ReadyWait,
): Promise<{ interrupted: boolean; pushed: string[]; notPacked: number; unansweredPushes: number; skippedJobs: number; exitedEarly: EarlyExit[]; readyMs: number | null }> {
  const { drill, log, signal, roots } = options;
  // Set again when gate and worker are ready: the phases' `at:` count from there.
  let start = Date.now();
  let clockStarted = false;
  const elapsed = () => Date.now() - start;
  const pushed: string[] = [];
  const decided = new Set<string>();
  const gateTail = new LineTail(path.join(dir, "gate.out"));
  const watchTail = new LineTail(path.join(dir, outputName("watch")));
  // Under --json the sidecar prints its PAGE/CLEAR lines on stderr: its log.
  const watchLog = new LineTail(path.join(dir, "watch.log"));
  let lastStatusAt = 0;
  // up set it to admit before the gate started.
  let gateMode: string = "admit";
  const { run: phases, skipped } = splitPhases(drill.phases, drill.duration);
  let next = 0;
  // A part stopped or frozen answers nothing and never exits: said as it stalls and as it resumes (QA).
  const stalls = new StallWatch();
  const watchedProcesses = core.flatMap((c) => (c.record.pid === null ? [] : [{ role: c.record.role, pid: c.record.pid }]));
  // Prints what the gate, the sidecar and its log wrote since the last call.
  // Called before up says the drill stopped and before its closing lines, so
  // a decision shows before the lines that come after it.
  const follow = () => {
    for (const line of gateTail.read()) {
      log(`  ${line}`);
      const id = decidedJob(line);
      if (id !== null) decided.add(id);
    }
    for (const line of watchLog.read()) if (/^(PAGE|CLEAR) /.test(line)) log(`  ${line}`);
    let latest: Sample | null = null;
    for (const line of watchTail.read()) {
      const sample = parseSample(line);
      if (sample === null) continue;
      latest = sample;
      // The deny-all lever pulled by hand (or let go) shows here, when the sidecar sees it.
      if (sample.gate_mode !== null && sample.gate_mode !== undefined && sample.gate_mode !== gateMode) {
        log(`  gate mode: ${sample.gate_mode} (was ${gateMode})`);
        gateMode = sample.gate_mode;
      }
    }
    if (latest && Date.now() - lastStatusAt >= STATUS_EVERY_MS) {
      lastStatusAt = Date.now();
      log(`  t=${Math.round(elapsed() / 1000)}s ${formatStatusLine(latest)}`);
    }
    for (const line of stalls.poll(readStalls(roots, watchedProcesses, state.cgroup?.dirs ?? []), (part) => stillThere(roots, part))) log(`up: ${line}`);
    // A child's output file removed (or replaced) under it: it writes on into the removed file, out of up's and the report's sight.
    for (const [tail, writer, lost] of [
      [gateTail, "the gate", "its decisions show in the queue's events stream, and in `drill report`, all the same; up follows them no more"],
      [watchTail, "the sidecar", "`drill report` reads no samples from it (its pressure rows are n/a)"],
    ] as const) {
      const loss = tail.takeLoss();
      if (loss !== null) log(`up: ${tail.file} was ${loss} while the drill ran: ${writer} goes on writing into the file it opened, which is no longer there; ${lost}`);
    }
  };
  // Gate, worker and watch live past the drill's end (they stop themselves 5
  // minutes after it, or at rollback): one that exits during the drill took
  // the rehearsal with it (no decisions, no work, no sidecar). Said at once,
  // and the drill stops packing into a queue nobody serves.
  // The same for the Redis it packs into: the embedded server gone, or a push it never took.
  const exitedEarly: EarlyExit[] = setupRefused === null ? [] : [{ ...setupRefused, atMs: Date.now() }];
  let scheduleOver = false;
  // Packing stops at an interrupt or at such an exit.
  const stopPacking = new AbortController();
  const onInterrupt = () => stopPacking.abort();
  signal.addEventListener("abort", onInterrupt, { once: true });
  const stopEarly = (early: EarlyExit) => {
    if (scheduleOver || signal.aborted || exitedEarly.some((e) => e.key === early.key)) return;
    exitedEarly.push({ ...early, atMs: Date.now() });
    stopPacking.abort();
    follow();
    const when = clockStarted ? `${Math.round(elapsed() / 1000)}s into the drill` : "before the schedule started (up was waiting for gate and worker to be ready)";
    // An OOM kill is what the drill rehearses: said as its outcome, not as a crash (the worker's own line only repeats it).
    // Its last output is not its reason (QA: "killed by a signal …: reject_deadline_slack job=5" read as the cause).
    const said =
      early.cause === "oom_killed" ? ": the OOM the drill rehearses, reported, not a tool failure; nobody serves the queue now"
      : early.lastLine === null ? ""
      : early.lastLineIsOutput ? `, nothing said on stderr; its last output line: ${early.lastLine}`
      : `: ${early.lastLine}`;
    log(`${early.key}: ${early.how} ${when}${said}; the drill stops here${early.log ? ` (log: ${early.log})` : ""}`);
  };
  for (const child of core) {
    void child.exited.then((code) => {
      // Its error line when it wrote one; else (killed, no word on stderr) the last thing it did on stdout.
      const errLog = path.join(dir, `${child.record.key}.log`);
      const outLog = path.join(dir, outputName(child.record.key));
      // The gate's start line is no last word: killed with nothing said since, what it did last is on stdout.
      const lastSaid = lastLogLine(errLog);
      const said = lastSaid !== null && GATE_START_LINE.test(lastSaid) ? null : lastSaid;
      const did = said === null ? lastLogLine(outLog) : null;
      const oom = child.record.role === "worker" ? workerOomKill(said) : null;
      if (oom) {
        stopEarly({ key: child.record.key, how: `OOM-killed in its cgroup (oom_kill ${oom.before} → ${oom.after})`, code, log: errLog, lastLine: said, cause: "oom_killed" });
        return;
      }
      stopEarly({ key: child.record.key, how: `exited (${code === null ? "killed by a signal" : `code ${code}`})`, code, log: did === null ? errLog : outLog, lastLine: said ?? did, lastLineIsOutput: said === null && did !== null, cause: "exited" });
    });
  }
  const embeddedRedis = state.redis.embedded ? state.processes.find((p) => p.role === "redis") : undefined;
  // A given Redis has no log of ours: its URL is named instead.
  const redisLog = state.redis.embedded ? path.join(state.redis.embedded.dir, "redis.log") : null;
  const checkRedis = () => {
    if (embeddedRedis?.pid && embeddedRedis.startTime !== null && !isSameProcess(roots, embeddedRedis.pid, embeddedRedis.startTime)) {
      stopEarly({ key: "redis", how: `gone (pid ${embeddedRedis.pid})`, code: null, log: redisLog, lastLine: redisLog && redisGoneText(lastLogLine(redisLog)), cause: "gone" });
    }
  };
  let unansweredPushes = 0;
  const pushUnanswered = () => {
    unansweredPushes++;
  };
  const pushFailed = (err: unknown, sinceMs: number) => {
    const seen = embeddedRedis ? embeddedRedisSeen(roots, embeddedRedis) : null;
    if (seen?.state === "gone") {
      checkRedis();
      return;
    }
    const failure = pushFailure(err);
    stopEarly({
      key: "redis",
      how: `${PUSH_GAVE_UP_TEXT[failure]} for ${formatDuration(Math.max(0, elapsed() - sinceMs))}`,
      code: null,
      // A stopped server wrote nothing about it: its log would only mislead.
      log: seen?.state === "stopped" ? null : redisLog,
      lastLine: `${redisErrorText(err, queue.redis)}; ${seen ? seen.note : `at ${redactUrl(state.redis.url)}`}`,
      cause: failure,
    });
  };
  // A state write the state dir refused (full, read-only) mid-drill: nothing more is started unrecorded; the drill stops, says what it did.
  const stateRefused = (what: string, err: unknown): void => {
    const early = stateUnwritten(what, err);
    if (early === null) throw err;
    stopEarly(early);
  };
  const packing: Promise<number>[] = [];
  // Each pack stops by the drill's end (or at stopPacking): this waits for at most one push in flight.
  const packsNotPacked = async () => (await Promise.allSettled(packing)).reduce((sum, r) => sum + (r.status === "fulfilled" ? r.value : 0), 0);
  const skippedJobs = skipped.reduce((sum, phase) => sum + (phase.pack?.jobs ?? 0), 0);
  try {
    const readyMs = await untilReady(ready, dir, log, signal, () => signal.aborted || exitedEarly.length > 0, stopEarly, checkRedis);
    if (readyMs !== null) {
      try {
        ready.onReady();
      } catch (err) {
        stateRefused("that the drill runs", err);
      }
    }
    if (readyMs !== null) {
      start = Date.now();
      clockStarted = true;
    }
    // Not ready (stopped while waiting): no phase starts, each is said not started below.
    // An early stop (said as it came) starts no phase after it.
    while (readyMs !== null && !signal.aborted && exitedEarly.length === 0) {
      const now = elapsed();
      while (next < phases.length && phases[next]!.at <= now && exitedEarly.length === 0) {
        const phase = phases[next++]!;
        if (phase.pack) packing.push(pack(queue, phase.pack, phase.index, { log, pushed, signal: stopPacking.signal, elapsed, durationMs: drill.duration, runId: state.runId, pushFailed, pushUnanswered }));
        if (phase.inject) {
          try {
            inject({ ...phase, inject: phase.inject }, drill.duration, state, spawnChild, target, dir, log);
          } catch (err) {
            stateRefused(`phase ${phase.index}'s hog`, err);
          }
        }
        crashAt(options, `phase-${phase.index}`);
      }
      checkRedis();
      if (now >= drill.duration || exitedEarly.length > 0) break;
      follow();
      await sleep(Math.min(250, drill.duration - now), undefined, { signal }).catch(() => {});
    }
    let notPacked = await packsNotPacked();
    // The loop above stops without following: decisions made until now print
    // before the phases that never ran (QA: after them, and after the summary's
    // first lines, once up stopped early).
    follow();
    // The phases that never ran, after those that did, in the file's order:
    // cut by an early stop (an interrupt, or something it needs gone; their jobs
    // are not packed either), or starting past the drill's end.
    for (const phase of [...phases.slice(next), ...skipped].sort((a, b) => a.index - b.index)) {
      const what = phase.pack ? `${phase.pack.jobs} jobs not packed` : phase.inject ? `inject ${phase.inject.mode} ${formatBytes(phase.inject.size)} not run` : "nothing run";
      if (skipped.includes(phase)) {
        log(`phase ${phase.index}: skipped: starts at ${formatDuration(phase.at)}, not before the drill's end at ${formatDuration(drill.duration)}`);
        continue;
      }
      log(`phase ${phase.index}: not started: the drill stopped before ${formatDuration(phase.at)}; ${what}`);
      if (phase.pack) notPacked += phase.pack.jobs;
    }
    // The jobs pushed last are decided after the end: follow the gate until it
    // has decided them all, bounded so a stopped gate cannot hold `up`.
    const until = Date.now() + DECISIONS_WAIT_MS;
    for (;;) {
      checkRedis();
      // Stopped: what the gate decided is printed (just above, or as the stop was said); what it decides now is the report's.
      if (signal.aborted || exitedEarly.length > 0) break;
      follow();
      // Its output file gone (said as it went): its decisions cannot be followed, and jobs it did decide must not read as undecided (QA).
      if (gateTail.lost) {
        log(`gate: decisions not followed to the end: ${gateTail.file} is gone (said above); \`drill report\` counts them from the queue's events`);
        break;
      }
      const action = nextFollowAction(pushed, decided, Date.now(), until);
      if (action.kind === "all_decided") {
        if (pushed.length > 0) log(`gate: decided every packed job (${pushed.length})`);
        break;
      }
      if (action.kind === "gave_up") {
        const shown = action.undecided.slice(0, 10).map((id) => `job=${id}`).join(" ");
        log(`gate: ${action.undecided.length} of ${pushed.length} packed jobs not decided ${DECISIONS_WAIT_MS / 1000} s after the drill's end (${shown}${action.undecided.length > 10 ? " …" : ""}); stopped following, see ${path.join(dir, "gate.out")}`);
        break;
      }
      await sleep(250, undefined, { signal }).catch(() => {});
    }
    return { interrupted: signal.aborted, pushed, notPacked, unansweredPushes, skippedJobs, exitedEarly, readyMs };
  } catch (err) {
    // A bug, or a rollback that took the drill over (runUp tells which): packing stops before up goes, and what it packed is counted.
    // A child stopped meanwhile (by that rollback) is no news.
    scheduleOver = true;
    stopPacking.abort();
    const notStarted = phases.slice(next).reduce((sum, phase) => sum + (phase.pack?.jobs ?? 0), 0);
    throw new ScheduleFailed(err, { pushed, notPacked: (await packsNotPacked()) + notStarted, unansweredPushes, skippedJobs });
  } finally {
    scheduleOver = true;
    signal.removeEventListener("abort", onInterrupt);
  }
}

/**
 * What the embedded redis-server's log says of its end. It is not up's child,
 * so no exit status is known: a shutdown or a crash writes its last words,
 * a SIGKILL (or the OOM killer) writes nothing, and quoting the start-up line
 * that is then last would read as its cause (QA).
 */
export function redisGoneText(lastLine: string | null): string | null {
  if (lastLine === null) return null;
  // Its shutdown ends "ready to exit, bye bye..."; a crash report ends with advice on reporting it.
  if (/ready to exit|BUG REPORT|crashed by signal|--check-system|--test-memory|redis\/issues/i.test(lastLine)) return lastLine;
  // Its own fatal exits end "Exiting..." ("# Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...").
  if (/AOF write error/i.test(lastLine)) return `its AOF could not be written (a full disk, most likely: df its dir), so it exited: ${lastLine}`;
  if (/Exiting\.*$/i.test(lastLine)) return lastLine;
  return `no exit message in its log: killed by a signal (SIGKILL, or the OOM killer); its last line: ${lastLine}`;
}

/**
 * The run this up replaces in state.json, kept in its own run dir (beside its
 * logs and AOF) and said: `drill report` reads the new run from here on, and
 * `--run <id>` the kept one (QA: a second up replaced the run report reads
 * without a word, and the first run could not be reported again).
 */
function keepPreviousRun(stateDir: string, previous: DrillState | null, runId: string, log: (line: string) => void, drillCmd: string): void {
  if (previous === null || previous.runId === runId) return;
  const kept = keptRunStatePath(stateDir, previous.name, previous.runId);
  try {
    // Its run dir holds its logs; gone (removed by hand, or a run from before run dirs), there is nowhere to keep it: said (QA).
    if (!existsSync(path.dirname(kept))) {
      const exported = previous.rollback?.exported ? `; its export ${previous.rollback.exported} stays` : "";
      log(`up: drill ${previous.name}'s previous run ${previous.runId} is replaced and cannot be kept for \`report --run\`: its run dir ${path.dirname(kept)} is gone${exported}`);
      return;
    }
    writeJsonDurably(kept, previous);
  } catch (err) {
    log(`up: could not keep run ${previous.runId}'s state in ${kept} (${(err as Error).message}): \`drill report\` reads only the new run`);
    return;
  }
  const ended = previous.rollback?.at ? `rolled back at ${previous.rollback.at}` : `phase ${previous.phase}`;
  log(`up: drill ${previous.name}'s previous run ${previous.runId} (${ended}) is kept; \`${reportAgain(drillCmd, previous.name)}\` reads the new run ${runId} from now on, \`${reportAgain(drillCmd, previous.name, { runId: previous.runId })}\` the previous one`);
}

/** How often up polls gate and worker for readiness: a job pushed later waits at most this long for no reason. */
const READY_POLL_MS = 100;

/**
 * Waits until gate and worker are ready, bounded (ready.timeoutMs): a job
 * pushed before would wait for their start-up, and that wait would read as
 * the drill's queue age and first-token latency. Returns how long it took,
 * or null when the drill stopped first: up interrupted, a child or the Redis
 * gone (`stopped`), or the timeout (said as the early stop of what is not
 * ready). A rollback that took the drill over throws, as before running.
 */
async function untilReady(
  ready: ReadyWait,
  dir: string,
  log: (line: string) => void,
  signal: AbortSignal,
  stopped: () => boolean,
  stopEarly: (early: EarlyExit) => void,
  checkRedis: () => void,
): Promise<number | null> {
  const waitStart = Date.now();
  // Stopped already (while it set up): no wait to announce (QA: said, then up exited 0.2 s later).
  if (!stopped()) log(`waiting for gate and worker to be ready (the gate's first pressure samples, the worker's weights written; up to ${formatDuration(ready.timeoutMs)}): the schedule's clock starts then`);
  let readiness: Readiness = { gate: false, worker: false };
  let saidAt = waitStart;
  for (;;) {
    checkRedis();
    if (stopped()) return null;
    ready.stopIfTakenOver();
    try {
      readiness = await ready.read();
    } catch {
      // A Redis that stalls: checkRedis says when it is gone, the timeout bounds the rest.
    }
    if (stopped()) return null;
    const waited = Date.now() - waitStart;
    if (readiness.gate && readiness.worker) {
      log(`gate and worker ready after ${(waited / 1000).toFixed(1)} s: the schedule's clock starts now (phase offsets count from here)`);
      return waited;
    }
    if (waited >= ready.timeoutMs) {
      for (const key of (["gate", "worker"] as const).filter((k) => !readiness[k])) {
        const errLog = path.join(dir, `${key}.log`);
        stopEarly({ key, how: `not ready within ${formatDuration(ready.timeoutMs)}`, code: null, log: errLog, lastLine: lastLogLine(errLog), cause: "not_ready" });
      }
      return null;
    }
    if (Date.now() - saidAt >= STATUS_EVERY_MS) {
      saidAt = Date.now();
      const workerSaid = readiness.worker ? null : lastLogLine(path.join(dir, "worker.log"));
      log(`still waiting for ${notReadyText(readiness)} after ${Math.round(waited / 1000)}s${workerSaid === null ? "" : ` (worker.log: ${workerSaid})`}`);
    }
    await sleep(READY_POLL_MS, undefined, { signal }).catch(() => {});
  }
}

/** The last line a child wrote to its log (its error, when it died of one), cut to fit a log line. */
function lastLogLine(file: string): string | null {
  try {
    const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "");
    const last = lines.at(-1)?.trim();
    return last === undefined ? null : last.length > 300 ? `${last.slice(0, 300)}…` : last;
  } catch {
    return null;
  }
}

interface PackRun {
  log: (l: string) => void;
  signal: AbortSignal;
  elapsed: () => number;
  durationMs: number;
  /** Push tokens start with it: one run's pushes are never taken for another's. */
  runId: string;
  /** A push Redis never took by the drill's end, failing since `sinceMs`: the drill stops. */
  pushFailed: (err: unknown, sinceMs: number) => void;
  /** Its last send got no reply: counted as not packed, though Redis may run it when it answers. */
  pushUnanswered: () => void;
}

/** One pack phase: pushes until done or the drill's end; returns how many of its jobs were not packed. */
async function pack(queue: DrillQueue, step: PackStep, index: number, run: PackRun & { pushed: string[] }): Promise<number> {
  const { log, signal } = run;
  log(`phase ${index}: pack ${step.jobs} jobs x ${step.prompt_tokens} prompt tokens, deadline ${formatDuration(step.deadline)}${step.upstream_age > 0 ? `, upstream age ${formatDuration(step.upstream_age)}` : ""}${step.label ? ` (${step.label})` : ""}`);
  let count = 0;
  let lastPushAt: number | null = null;
  while (!signal.aborted) {
    const action = nextPackAction(step, count, lastPushAt, run.elapsed(), run.durationMs);
    if (action.kind === "done") return 0;
    if (action.kind === "deadline") {
      log(`phase ${index}: packed ${count} of ${step.jobs} jobs; ${action.notPacked} not packed: the drill ended at ${formatDuration(run.durationMs)}`);
      return action.notPacked;
    }
    if (action.kind === "wait") {
      await sleep(action.ms, undefined, { signal }).catch(() => {});
      continue;
    }
    lastPushAt = run.elapsed();
    const job = await pushRidingOutRedis(queue, step, index, count, run);
    if (job === null) break;
    run.pushed.push(job.id);
    count++;
  }
  log(`phase ${index}: packed ${count} of ${step.jobs} jobs; ${step.jobs - count} not packed: the drill stopped before its end`);
  return step.jobs - count;
}

/**
 * One job onto the queue, riding out a Redis that stalls or restarts (as the
 * gate and the worker do, RELIABILITY 13): the same push, under the same
 * token (run id, phase, job), is sent again until Redis answers, up to the
 * drill's end. A send that timed out on a paused Redis runs when it wakes;
 * the token makes every other send of this push a no-op, so no id is burnt
 * and no job queued twice. Null when it never got through: then the drill
 * stops (pushFailed).
 */
async function pushRidingOutRedis(
  queue: DrillQueue,
  step: PackStep,
  index: number,
  jobIndex: number,
  run: PackRun,
): Promise<Job | null> {
  const job = unnumberedJob({
    promptTokens: step.prompt_tokens,
    completionTokens: step.completion_tokens,
    files: step.files,
    deadlineMs: step.deadline,
    upstreamAgeMs: step.upstream_age,
    hostClass: step.host_class,
  });
  let failed = false;
  // An outage is timed from the push's first send: a failure is known only once its command timed out (QA: "did not answer a push for 1ms").
  const sentAt = run.elapsed();
  const outcome = await pushUntilTaken(queue, job, `${run.runId}.${index}.${jobIndex}`, {
    signal: run.signal,
    delayMs: (failures) => pushRetryDelayMs(failures - 1),
    sendAgain: (_failures, delayMs) => run.elapsed() + delayMs < run.durationMs,
    onFailure: (err) => {
      // Once the drill stops, its own line says so: a push of a phase cut short is no news.
      if (failed || run.signal.aborted) return;
      failed = true;
      run.log(`phase ${index}: push failed: ${PUSH_FAILURE_TEXT[pushFailure(err)]} (${redisErrorText(err, queue.redis)}); sending it again until Redis answers or the drill ends`);
    },
  });
  if (outcome.ok) {
    if (failed) run.log(`phase ${index}: Redis answers again; job=${outcome.job.id} pushed ${formatDuration(run.elapsed() - sentAt)} after its first send`);
    return outcome.job;
  }
  if (!run.signal.aborted) run.pushFailed(outcome.error, sentAt);
  if (pushFailure(outcome.error) === "no_reply") {
    run.pushUnanswered();
    run.log(`phase ${index}: its last push got no reply: if Redis runs it when it answers, that job is queued under the next id (report counts it), though not counted as packed here`);
  }
  return null;
}

const PUSH_GAVE_UP_TEXT: Record<PushFailure, string> = {
  no_reply: "did not answer a push",
  refused: "refused a push",
  unreachable: "could not be reached for a push",
};

/** What the embedded redis-server is doing when it does not answer: a stopped one is named as such. */
export function embeddedRedisSeen(roots: HostRoots, record: ProcessRecord): { state: "gone" | "stopped" | "running"; note: string } {
  if (record.pid === null) return { state: "running", note: "redis-server pid unknown" };
  const stat = readProcessStat(roots, record.pid);
  if (!stat.ok || stat.value.startTime !== record.startTime || stat.value.state === "Z") return { state: "gone", note: `redis-server pid ${record.pid} is gone` };
  const { state } = stat.value;
  if (state === "T" || state === "t") {
    return { state: "stopped", note: `redis-server pid ${record.pid} is stopped (state ${state}: SIGSTOP, a job-control stop or a debugger; SIGCONT resumes it)` };
  }
  return { state: "running", note: `redis-server pid ${record.pid} is running (state ${state}) but did not answer in time` };
}

function inject(
  phase: ScheduledPhase & { inject: InjectStep },
  durationMs: number,
  state: DrillState,
  spawnChild: SpawnChild,
  target: string[],
  dir: string,
  log: (l: string) => void,
): void {
  const { inject: step, index } = phase;
  const { holdMs, clipped } = injectHold(phase, durationMs);
  const until = clipped ? ` (cut from ${formatDuration(step.hold)}: the drill ends at ${formatDuration(durationMs)})` : "";
  log(`phase ${index}: inject ${step.mode} ${formatBytes(step.size)} for ${formatDuration(holdMs)}${until}${step.label ? ` (${step.label})` : ""}`);
  const key = `hog-${index}`;
  const spawned = spawnChild("hog", key, [
    "--json", "inject", ...target, "--size", String(step.size), "--mode", step.mode, "--hold", `${holdMs}ms`, "--file-dir", state.fileDir ?? DEFAULT_FILE_DIR,
  ]);
  if (spawned === null) {
    log(`phase ${index}: inject not started: drill rollback has taken this drill over and stops this up next`);
    return;
  }
  // inject exits 0 on an OOM kill too (the anon drill's expected end): its document says which.
  void spawned.exited.then((code) => {
    // No document (unreadable): the exit code is all there is.
    const output = readKernelText(path.join(dir, outputName(key)));
    log(hogExitLine(index, key, code, hogOutcomeIn(output.ok ? output.value : "")));
  });
}

/** Pure: the outcome in `drill --json inject`'s output (its last document), or null when it wrote none. */
export function hogOutcomeIn(text: string): HogOutcome | null {
  const lines = text.split("\n").filter((line) => line.trim() !== "");
  for (const line of lines.reverse()) {
    try {
      const outcome = (JSON.parse(line) as { outcome?: unknown }).outcome;
      if (HOG_OUTCOMES.includes(outcome as HogOutcome)) return outcome as HogOutcome;
    } catch {
      // not a document (a line cut short by a kill)
    }
  }
  return null;
}

/** Pure: up's line when a phase's hog is done, from the outcome inject wrote; its exit code alone when it wrote none. */
export function hogExitLine(index: number, key: string, code: number | null, outcome: HogOutcome | null): string {
  const how = code === null ? "killed by a signal" : `code ${code}`;
  const said =
    outcome === "oom_killed" ? `hog OOM-killed by the cgroup's OOM killer (inject ${how})`
    : outcome === "packed" ? `hog packed and held, then exited (${how})`
    : outcome === "interrupted" ? `hog interrupted (${how})`
    : outcome === "stopped" ? `hog stopped from outside, by a rollback, a teardown or a kill (inject ${how})`
    : outcome === "failed" ? `hog failed (${how})`
    : `hog exited (${how})`;
  return `phase ${index}: ${said}; outcome in ${key}.out`;
}

function parseSample(line: string): Sample | null {
  try {
    return JSON.parse(line) as Sample;
  } catch {
    return null; // a line cut by a crash: the next one will do
  }
}

/**
 * A given Redis whose queue already holds keys (an earlier run's: rollback
 * exports them and leaves them, it never deletes an operator's data; or
 * somebody else's): a run on them would go on with their job ids, stats and
 * drain, and report their decisions as its own. Refused before anything is
 * made, naming the keys; a fresh --queue needs no cleanup, and the keys are
 * the operator's to remove.
 */
async function refuseQueueInUse(url: string, options: UpOptions): Promise<void> {
  const { queue, stateDir, roots } = options;
  const drillCmd = drillCommandFor(stateDir, roots);
  const redis = await connectRedis(url, { name: "drill-up", commandTimeoutMs: 5000 });
  let found: QueueKey[];
  let owner: { state: DrillState; stateDir: string } | null;
  let serving: ServingRun | null = null;
  try {
    owner = await embeddedRedisOwner(redis);
    found = await queueKeysPresent(redis, queue);
    // The drill run (of any state dir) whose gate or worker serves it on this host: its rollback, named.
    if (found.length > 0) serving = await queueServingRun(redis, queueKeys(queue), roots).catch(() => null);
  } finally {
    await closeRedis(redis);
  }
  if (owner !== null) throw new RefusedError(anotherDrillsRedisText(redactUrl(url), owner.state, drillCommandFor(owner.stateDir), upCommand(options, undefined, queue)));
  if (found.length === 0) return;
  // Another drill of this state dir on this queue and Redis: up now (the keys are its live run's), or its run over.
  const onQueue = readStateEntries(stateDir, listDrills(stateDir)).flatMap((e) => ("state" in e && e.state.queue === queue && sameRedis(e.state.redis.url, url) ? [e.state] : []));
  const upDrills = onQueue.filter(isDrillUp).map((s) => s.name);
  const earlierRuns = onQueue.filter((s) => !isDrillUp(s)).map((s) => `drill ${s.name}'s run ${s.runId}${s.rollback?.exported ? ` (exported to ${s.rollback.exported})` : ""}`);
  const servedBy = serving === null ? undefined : { what: `drill ${drillOfRunId(serving.runId)}'s ${serving.role} (pid ${serving.pid}, run ${serving.runId})`, rollback: servingRunRollback(serving) };
  throw new RefusedError(queueInUseText({ queue, url: redactUrl(url), found, upDrills, earlierRuns, drillCmd, servedBy, upOnAnotherQueue: upCommand(options, url, "<another name>") }));
}

/**
 * `drill … up …` again, with every flag that selects what it acts on (the
 * state dir and trees, the Redis, the drill file, the cgroup, the queue): a
 * refusal's fix typed as printed acts on the same drill, not on the defaults
 * (QA: "drill up --queue <name>" dropped --state-dir, --redis and --name).
 * `redisUrl` undefined: left out (up starts its own). `queue` as printed.
 */
export function upCommand(o: Pick<UpOptions, "stateDir" | "sysfs" | "procfs" | "drillFile" | "cgroupName" | "parent" | "fileDir" | "overrides">, redisUrl: string | undefined, queue: string): string {
  // The same drill as typed: without its --file-dir or --duration, a pasted rerun wrote elsewhere and ran the file's 40 s (QA).
  const target = [
    "--drill", o.drillFile,
    ...(o.cgroupName === DEFAULT_CGROUP_NAME ? [] : ["--name", o.cgroupName]),
    ...(o.parent === undefined ? [] : ["--parent", o.parent]),
    ...(o.fileDir === DEFAULT_FILE_DIR ? [] : ["--file-dir", o.fileDir]),
    ...(o.overrides ?? []),
  ];
  return `${drillCommandAt({ stateDir: o.stateDir, sysfs: o.sysfs, procfs: o.procfs, redisUrl })} up ${target.map(shellWord).join(" ")} --queue ${queue}`;
}

/**
 * The drill whose embedded redis-server this is, by its --dir (CONFIG GET dir:
 * a drill's run dir, and that drill's state naming it); null for any other
 * Redis, or when CONFIG is refused (a managed Redis is nobody's drill's).
 */
async function embeddedRedisOwner(redis: Redis): Promise<{ state: DrillState; stateDir: string } | null> {
  let dir: string | undefined;
  try {
    dir = ((await redis.config("GET", "dir")) as string[])[1];
  } catch {
    return null;
  }
  const drill = dir === undefined ? null : embeddedRedisDrill(dir);
  if (drill === null) return null;
  let state: DrillState | null;
  try {
    state = readState(drill.stateDir, drill.drill);
  } catch {
    return null;
  }
  return state?.redis.embedded && realDir(state.redis.embedded.dir) === realDir(dir!) ? { state, stateDir: drill.stateDir } : null;
}

/**
 * QA: a second drill given the first one's embedded Redis (--redis) lost it at
 * that drill's rollback, which stops it: its gate and worker stopped early, its
 * jobs left in the other drill's AOF, and its own rollback failed for good.
 */
export function anotherDrillsRedisText(url: string, owner: Pick<DrillState, "name" | "runId">, ownerCmd: string, upWithoutRedis: string): string {
  return `redis ${url} is the embedded redis-server of drill ${owner.name} (run ${owner.runId}): that drill's rollback (${rollbackAgain(ownerCmd, {}, owner.name)}) stops it, and this drill's queue with it; leave out --redis (this drill starts its own: ${upWithoutRedis}), or give a Redis no drill stops`;
}

/** One key of a queue as found: its type, and its length when it has one. */
export interface QueueKey {
  key: string;
  type: string;
  length: number | null;
}

/**
 * Why up refuses a queue that holds keys, and what to do. A gate's or a
 * worker's heartbeat (a string with a TTL, gone a few seconds after it stops)
 * means something runs on the queue now: deleting its keys would pull them
 * from under a live drill (QA: the refusal advised DEL while drill smoke ran
 * on them), so it names what runs and how to stop it instead.
 */
export function queueInUseText(f: {
  queue: string;
  url: string;
  found: readonly QueueKey[];
  upDrills: readonly string[];
  earlierRuns?: readonly string[];
  drillCmd: string;
  /** The drill run of another state dir that serves it on this host (queueServingRun), with its rollback. */
  servedBy?: { what: string; rollback: string };
  /** This up again on another queue (upCommand). */
  upOnAnotherQueue: string;
}): string {
  const { queue, url } = f;
  const shownKeys = f.found.map((k) => (k.length === null ? `${k.key} (${k.type})` : `${k.key} (${k.type}, ${k.length})`));
  const shown = shownKeys.length > 12 ? [...shownKeys.slice(0, 12), `and ${shownKeys.length - 12} more`] : shownKeys;
  const beats = (role: "gates" | "workers") =>
    f.found.flatMap((k) => (k.type === "string" && k.key.startsWith(`${queue}:${role}:`) ? [k.key.slice(`${queue}:${role}:`.length)] : []));
  const gates = beats("gates");
  const workers = beats("workers");
  const keep = `A run on them would go on with their job ids and counters, and drill report would count their decisions as this run's; nothing was started or deleted.`;
  if (f.upDrills.length > 0 || gates.length > 0 || workers.length > 0) {
    const live = [
      ...(gates.length > 0 ? [`gate ${gates.join(", ")}`] : []),
      ...(workers.length > 0 ? [`worker ${workers.join(", ")}`] : []),
    ];
    const running = live.length === 0 ? "" : ` (live heartbeats: ${live.join("; ")})`;
    const who =
      f.upDrills.length > 0 ? `drill ${f.upDrills.join(", ")} ${f.upDrills.length === 1 ? "is" : "are"} up on queue ${queue} on ${url}${running}`
      : f.servedBy !== undefined ? `queue ${queue} on ${url} is in use now${running}, by ${f.servedBy.what}, up from another --state-dir`
      : `queue ${queue} on ${url} is in use now${running}, by a drill of another --state-dir or a gate or worker started by hand`;
    const stop =
      f.upDrills.length > 0 ? f.upDrills.map((n) => rollbackAgain(f.drillCmd, {}, n)).join(", then ")
      : f.servedBy !== undefined ? f.servedBy.rollback
      : `roll back the drill that runs them (drill --state-dir <its dir> rollback --name <the drill>), or stop them`;
    return `${who}; the queue's keys: ${shown.join(", ")}. ${keep} Do not delete them while it runs. Run this drill on another queue (${f.upOnAnotherQueue}), or first: ${stop}`;
  }
  return (
    // Whose they are when this state dir knows (QA: it hedged while its own rolled-back run had left them).
    `queue ${queue} on ${url} already holds keys (${(f.earlierRuns ?? []).length > 0 ? `those of ${f.earlierRuns!.join(", ")}: rollback exports them and leaves them` : "an earlier run's: rollback exports them to <state-dir>/<drill>/final-*.jsonl and leaves them; or another drill's"}): ${shown.join(", ")}. ` +
    `${keep} ` +
    `Run on a fresh queue (${f.upOnAnotherQueue}), or keep what you need of them first (${queue}_drain and the retry and dead lists hold jobs; ` +
    // On this state dir, as up was run (report finds drills there), on the Redis up was given (the drill's, named however it came).
    `${reportQueueAgain(f.drillCmd, queue, url)} keeps their summary) and remove them yourself: ` +
    `redis-cli -u ${shellWord(url)} DEL ${shellWord(queue)} ${shellWord(`${queue}_drain`)}, and each key redis-cli -u ${shellWord(url)} --scan --pattern ${shellWord(`${queue}:*`)} lists`
  );
}

/** The queue's keys that exist (`<q>`, `<q>_drain`, `<q>:*`), each with its type and length. */
export async function queueKeysPresent(redis: Redis, queue: string): Promise<QueueKey[]> {
  const keys = queueKeys(queue);
  const names = [...new Set([keys.ready, keys.drain, ...(await scanKeys(redis, `${queue}:*`))])].sort();
  const found: QueueKey[] = [];
  for (const key of names) {
    const type = await redis.type(key);
    if (type === "none") continue; // expired since the scan
    const length =
      type === "list" ? await redis.llen(key)
      : type === "hash" ? await redis.hlen(key)
      : type === "stream" ? await redis.xlen(key)
      : type === "set" ? await redis.scard(key)
      : type === "zset" ? await redis.zcard(key)
      : null;
    found.push({ key, type, length });
  }
  return found;
}

/** The sidecar's stdout is the drill's recording (one JSON sample a line); the rest is `<key>.out`. */
export function outputName(key: string): string {
  return key === "watch" ? "watch.jsonl" : `${key}.out`;
}

function fillPid(roots: HostRoots, record: ProcessRecord, pid: number): void {
  record.pid = pid;
  const stat = readProcessStat(roots, pid);
  record.startTime = stat.ok ? stat.value.startTime : null;
}

/** A drill child: its own session (Ctrl-C on `up` must not kill it), output to files in the run's dir. */
function spawnDrill(args: string[], outFile: string, errFile: string, env: NodeJS.ProcessEnv) {
  const bin = path.join(findPackageRoot(), "bin", "drill.js");
  // Refused (full, read-only): a state dir refusal (stateDirRefusal), the file named, not a bare errno.
  const open = (file: string) => {
    try {
      return openOwnFile(file, "a");
    } catch (e) {
      throw stateDirError("open the log", file, e);
    }
  };
  const out = open(outFile);
  let err: number;
  try {
    err = open(errFile);
  } catch (e) {
    closeSync(out);
    throw e;
  }
  try {
    const child = spawn(process.execPath, [bin, ...args], { detached: true, stdio: ["ignore", out, err], env });
    child.unref();
    return child;
  } finally {
    closeSync(out);
    closeSync(err);
  }
}
