import { readdirSync, rmdirSync, unlinkSync } from "node:fs";
import path from "node:path";
import type { Redis } from "ioredis";
import { requireLayout, type CgroupLayout } from "../cgroup/layout.js";
import { validateParent } from "../cgroup/names.js";
import { resolveWorkerCgroup, workerCgroupFromDirs } from "../cgroup/paths.js";
import { TERM_GRACE_MS, teardownWorkerCgroup, withDescendants, type TeardownResult } from "../cgroup/teardown.js";
import { discardHogRecord, listHogRecords, listMarkers, unlistableRecordDirs, unreadableRecords } from "../cgroup/stateFiles.js";
import { drillCommandAt, rollbackAgain, shellWord } from "../context.js";
import { DrillError, RefusedError, RollbackIncompleteError } from "../errors.js";
import { previousModeText } from "../gate/policy.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readProcessStat } from "../host/process.js";
import { readOomKillCount, readPids } from "../cgroup/memoryFiles.js";
import { notPermittedText } from "../cgroup/tasks.js";
import { readHostPsi } from "../host/psi.js";
import { DrillQueue } from "../queue/queue.js";
import { queueKeys, queueNameRefusal } from "../queue/keys.js";
import { closeRedis, connectRedis, gotNoReply, mayHaveRun, redactUrl, redisErrorText, sameRedis } from "../queue/redis.js";
import { drainReady, drainUnheld, exportKeys, heldText, holdsQueueKeys, otherQueuesKeys, queueServingRun, type DrainProgressOptions, type DrainResult, type ServingRun } from "./drain.js";
import { embeddedRedisDrill, freePort, isEmbeddedRedis, releaseRestarted, requireRestartable, startEmbeddedRedis, stopIfInterrupted, waitForPing } from "./embeddedRedis.js";
import { acquireRollbackLock, stateDirRefusal, stateDirRefused, type DrillLock, type StateDirRefused } from "./lock.js";
import { stopRecordedProcess, type StopOutcome } from "./processes.js";
import { closedByUp, drillDir, listDrills, readState, statePath, upDiedUnrecorded, writeState, type DrillState, type ProcessRecord, type ProcessRole, type RollbackRecord, type StateEntry } from "./state.js";
import { drillRunFromEnviron, findByCwd, readEnviron, findByRunId, listCwds, scanDrillRunProcesses, type StrayProcess } from "./strays.js";
import { SELF_EXIT_GRACE_MS } from "../lifetime.js";
import type { ServedQueue } from "../worker/served.js";
import { refusalText } from "../queue/refusal.js";
import { FileWriteError, notWritableByThisUser, type RecordReadError } from "../util/ownFiles.js";

/**
 * The runbook's rollback, in its order, and safe to run any number of times:
 * deny-all → stop packer → drain → kill hog and worker in their cgroup →
 * remove the cgroup → stop gate and watch → re-drain what the worker held →
 * export every key (with an embedded Redis and a given one alike), stop an
 * embedded Redis → unlink the hog's and worker's files.
 * Every step runs even when an earlier one failed; what is left is named.
 */
export interface RollbackStep {
  step: string;
  ok: boolean;
  detail: string;
}

export interface DrillRollback {
  name: string;
  /** null: its state.json could not be read (nothing of it rolled back). */
  runId: string | null;
  steps: RollbackStep[];
  drainLength: number | null;
  exported: string | null;
  /** What is still there, each naming where (exit 4 when not empty). */
  left: string[];
  /**
   * Keys of other queues its embedded Redis held (a gate, worker or pack run
   * by hand on it): not exported with the drill's; they stay in the AOF in `dir`.
   */
  otherQueuesKept?: { dir: string; queues: Array<{ queue: string; keys: number }> };
}

export interface RollbackOptions {
  roots: HostRoots;
  stateDir: string;
  /** --redis / DRILL_REDIS_URL: a drill's rollback takes it only as the same Redis as recorded, or where that one moved (givenRedis). */
  redisUrl?: string;
  /** redisUrl typed as --redis: only then is it where the drill's Redis moved (DRILL_REDIS_URL is exported for other commands). */
  redisTyped?: boolean;
  log: (step: RollbackStep) => void;
  /** A step taking seconds (a drain of thousands of jobs) says how far it got, between the steps' lines. */
  progress?: (line: string) => void;
  /** The rollback as it goes (steps and left filled in place): what an interrupted one can still print. */
  onStart?: (result: DrillRollback) => void;
  crashAt?: string;
  /**
   * The command that runs this rollback again (rollbackAgain), for what is left: by default
   * `rollback --name <drill>` on this state dir, tree and --redis.
   */
  again?: string;
}

/** A drill's own rollback in the state dir it is up from (named even when the default: it is another than this command's), as pasted. */
export function drillRollbackCommand(stateDir: string, drill: string): string {
  return rollbackAgain(`drill --state-dir ${shellWord(stateDir)}`, {}, drill);
}

/** The rollback of the drill run serving a queue (queueServingRun), quoted (QA: `--state-dir /tmp/x$X` pasted rolled back /tmp/x's drill). */
export function servingRunRollback(serving: Pick<ServingRun, "runId" | "stateDir" | "pid">): string {
  const drill = drillOfRunId(serving.runId);
  return serving.stateDir === null ? `read --state-dir in /proc/${serving.pid}/cmdline, then drill --state-dir <that dir> rollback --name ${shellWord(drill)}` : drillRollbackCommand(serving.stateDir, drill);
}

/** A drill run alive on this host that a rollback with nothing to do in its state dir did not touch. */
export interface RunningDrill {
  runId: string;
  drill: string;
  /** Its state dir as up gave it to its children (absolute), or null when they do not say (an older up). */
  stateDir: string | null;
  /** Its state there says complete: a rollback there finds nothing to do. */
  complete: boolean;
  /** No state of this run in stateDir (moved or deleted). */
  stateMissing: boolean;
  processes: StrayProcess[];
}

/**
 * Every drill run with live processes (by DRILL_RUN_ID, and an embedded
 * redis-server by its dir), of drill `name` when given. A rollback whose state
 * dir has no such drill (a wrong --state-dir, sudo dropping DRILL_STATE_DIR)
 * must name these instead of reporting nothing.
 */
export function findRunningDrills(roots: HostRoots, name?: string): RunningDrill[] {
  return scanRunningDrills(roots, name).running;
}

/** findRunningDrills, and how many processes of other users it could not look at (scanDrillRunProcesses): not root, it cannot tell "none". */
export function scanRunningDrills(roots: HostRoots, name?: string): { running: RunningDrill[]; unreadable: number } {
  const runs = new Map<string, { stateDir: string | null; processes: StrayProcess[] }>();
  const add = (runId: string, stateDir: string | null, p: StrayProcess) => {
    const run = runs.get(runId) ?? { stateDir: null, processes: [] };
    run.stateDir ??= stateDir;
    run.processes.push({ pid: p.pid, startTime: p.startTime, comm: p.comm });
    runs.set(runId, run);
  };
  const scanned = scanDrillRunProcesses(roots);
  for (const p of scanned.processes) add(p.runId, p.stateDir, p);
  // redis-server writes its title over its environment: found by its --dir,
  // <state-dir>/<drill>/runs/<run>/redis (or <state-dir>/<drill>/redis before per-run dirs).
  for (const p of listCwds(roots)) {
    if (!p.comm.startsWith("redis-server")) continue;
    const owner = embeddedRedisDrill(p.cwd);
    if (owner === null) continue;
    const state = readStateQuietly(owner.stateDir, owner.drill);
    if (state?.redis.embedded) add(state.runId, owner.stateDir, p);
  }
  const running: RunningDrill[] = [];
  for (const [runId, run] of runs) {
    const state = run.stateDir === null ? null : findStateOfRun(run.stateDir, runId);
    const drill = state?.name ?? drillOfRunId(runId);
    if (name !== undefined && drill !== name) continue;
    // `drill up` itself carries no DRILL_RUN_ID: its state names it.
    const owner = state?.owner.pid && state.owner.pid !== process.pid ? readProcessStat(roots, state.owner.pid) : null;
    if (owner?.ok && owner.value.state !== "Z" && owner.value.startTime === state!.owner.startTime && !run.processes.some((p) => p.pid === owner.value.pid)) {
      run.processes.push({ pid: owner.value.pid, startTime: owner.value.startTime, comm: owner.value.comm });
    }
    running.push({
      runId,
      drill,
      stateDir: run.stateDir,
      complete: state?.phase === "complete",
      stateMissing: run.stateDir !== null && state === null,
      processes: run.processes.sort((a, b) => a.pid - b.pid),
    });
  }
  return { running: running.sort((a, b) => a.runId.localeCompare(b.runId)), unreadable: scanned.unreadable };
}

/** Drills up on this host (their processes carry DRILL_RUN_ID) whose state names this queue, with where they are. */
export function drillsUpOnQueue(roots: HostRoots, queue: string): Array<{ drill: string; runId: string; stateDir: string; url: string }> {
  return findRunningDrills(roots).flatMap((r) => {
    const state = r.stateDir === null ? null : readStateQuietly(r.stateDir, r.drill);
    return state !== null && r.stateDir !== null && state.runId === r.runId && state.queue === queue ? [{ drill: r.drill, runId: r.runId, stateDir: r.stateDir, url: state.redis.url }] : [];
  });
}

/** The drill name in a run id (`<drill>-<yyyymmddhhmmss>-<6 hex>`, as up makes it), or the id itself. */
export function drillOfRunId(runId: string): string {
  return /^(.+)-\d{14}-[0-9a-f]{6}$/.exec(runId)?.[1] ?? runId;
}

/** How to roll back a run found running elsewhere: the command, or why rollback cannot and what to do instead. */
export function rollbackHint(run: RunningDrill): string {
  const pids = run.processes.map((p) => p.pid).join(" ");
  if (run.stateDir === null) {
    return `its state dir is not in its environment (started by an older drill up): read --state-dir in /proc/${run.processes[0]?.pid}/cmdline, then drill --state-dir <that dir> rollback --name ${shellWord(run.drill)}`;
  }
  if (run.complete) return `its state in ${run.stateDir} says complete, so rollback there finds nothing: these processes outlived it; stop them with kill -KILL ${pids}`;
  if (run.stateMissing) return `no state of run ${run.runId} in ${run.stateDir} (moved or deleted?): put it back, or stop them with kill -KILL ${pids}`;
  // Quoted as the shell reads it back (QA AE: a dir with a space and `*` was printed bare, the hint pointing nowhere).
  return drillRollbackCommand(run.stateDir, run.drill);
}

/** A drill dir as the unknown-name message lists it: its state, or only rollback's export (report reads those too). */
export type KnownDrill = StateEntry | { name: string; exportOnly: true };

/**
 * `rollback --name X` (or `report --name X`) with no drill X in the state dir while other drills are
 * there: a wrong name, often `up --name` (the worker cgroup) taken for the
 * drill's. Names the drills there with their phase and worker cgroup, and the
 * drill whose worker cgroup is X.
 */
export function unknownDrillProblem(
  name: string,
  stateDir: string,
  entries: readonly KnownDrill[],
  drillCmd: string,
  command: "rollback" | "report" = "rollback",
): string {
  const list = entries
    .map((e) =>
      "state" in e ? `${e.name} (${e.state.phase}${e.state.cgroup ? `, worker cgroup ${e.state.cgroup.name}` : ""})`
      : "unreadable" in e ? `${e.name} (state.json unreadable)`
      : `${e.name} (only rollback's export left)`,
    )
    .join(", ");
  const owners = entries.flatMap((e) => ("state" in e && e.state.cgroup?.name === name ? [e.name] : []));
  const next =
    owners.length > 0
      ? owners.map((drill) => `${name} is the worker cgroup of drill ${drill}: ${drillCmd} ${command} --name ${shellWord(drill)}`).join("; ")
      : `${command === "rollback" ? "roll back" : "report on"} one of them (${drillCmd} ${command} --name <drill>), or give the --state-dir that drill up had`;
  return `--name: no drill "${name}" in ${stateDir} (drills there: ${list}); ${next}`;
}

/** One line naming a run found running elsewhere: drill, run, state dir, and its processes by pid and comm. */
export function describeRunningDrill(run: RunningDrill): string {
  const procs = run.processes.map((p) => `pid ${p.pid} (${p.comm})`).join(", ");
  return `drill ${run.drill} run ${run.runId} (state dir ${run.stateDir ?? "unknown"}) still running: ${procs}`;
}

function readStateQuietly(stateDir: string, name: string): DrillState | null {
  try {
    return readState(stateDir, name);
  } catch {
    return null; // not a state file this drill can read: the process is named without it
  }
}

function findStateOfRun(stateDir: string, runId: string): DrillState | null {
  for (const name of listDrills(stateDir)) {
    const state = readStateQuietly(stateDir, name);
    if (state?.runId === runId) return state;
  }
  return null;
}

/**
 * What a rollback of one drill found: no state of it in the state dir, a
 * drill an earlier rollback completed, or its up closed having started
 * nothing (`closedByUp`) (nothing to do, unless producers pushed onto its
 * Redis since: then `rolled_back` with that drain), the
 * rollback it ran, or a state.json it could not read (its one failed step).
 */
export type RollbackOutcome =
  | { kind: "absent" }
  | { kind: "complete"; completedAt: string | null; closedByUp: boolean }
  | { kind: "rolled_back"; result: DrillRollback }
  | { kind: "unreadable"; result: DrillRollback };

export async function rollbackDrill(name: string, options: RollbackOptions): Promise<RollbackOutcome> {
  let first: DrillState | null;
  try {
    first = readState(options.stateDir, name);
  } catch (err) {
    // Unreadable is not absent (QA: `"drills":[]` beside a drill up, root's, read by another user):
    // what it records may all still be there. Listed with the step that failed, exit 4.
    const step = { step: "read state", ok: false, detail: `${(err as Error).message}; what it records (processes, cgroup, queue, Redis) is left as it is: read or fix it, then run the rollback again` };
    options.log(step);
    return { kind: "unreadable", result: { name, runId: null, steps: [step], drainLength: null, exported: null, left: [`not rolled back: ${step.detail}`] } };
  }
  if (!first) return { kind: "absent" };
  if (first.phase === "complete") return completeOutcome(first, options);
  const { roots } = options;
  const again = rollbackCommandOf(options, name);
  const { lock, refused } = acquireRollbackLock(drillDir(options.stateDir, name));
  // Read again under the lock: a rollback that finished between the first
  // read and the lock leaves this one nothing to redo (it would restart the
  // embedded Redis on its AOF and export a second time).
  const state = readState(options.stateDir, name);
  if (!state || state.phase === "complete") {
    lock?.release();
    return state ? completeOutcome(state, options) : { kind: "absent" };
  }
  // An earlier rollback's record (one that exited 4): it took the drill over, and its time stays the run's.
  const earlier = state.rollback;
  const result: DrillRollback = { name, runId: state.runId, steps: [], drainLength: null, exported: null, left: [] };
  options.onStart?.(result);
  const record = (step: string, ok: boolean, detail: string) => {
    const entry = { step, ok, detail };
    result.steps.push(entry);
    options.log(entry);
  };
  const crash = (step: string) => {
    if (options.crashAt === step) process.kill(process.pid, "SIGKILL");
    else if (options.crashAt === `${step}:stop`) process.kill(process.pid, "SIGSTOP");
  };
  const recorder = stateRecorder(options.stateDir, state, refused, record);
  // The recorded processes this user may not signal (EPERM): their steps fail, the rest go on.
  const notSignalled = new Set<number>();
  const save = recorder.save;
  // A foreground `drill up` whose owner is still alive keeps running its
  // schedule otherwise: it is the packer, stopped in step 2.
  try {
    // up killed before it recorded an end: said now, while it can be told, or
    // the report would read this rollback as what stopped the drill.
    if (upDiedUnrecorded(roots, state)) {
      state.ended = {
        verdict: "up_gone",
        at: new Date().toISOString(),
        reason: `drill up (pid ${state.owner.pid}) found gone by the rollback, with no end recorded (killed, or the host rebooted); the packing, if it had started, stopped with it`,
        pushed: null,
        notPacked: null,
      };
    }
    // An up still starting opens admission as its last step before running.
    const upWasStarting = state.phase === "starting";
    state.phase = "rolling_back";
    // An earlier rollback that took the drill over and was interrupted: its start is the run's end, not this one's.
    const takenOverAt = state.rollback === undefined ? state.rollbackStartedAt : undefined;
    if (state.rollback === undefined) state.rollbackStartedAt ??= new Date().toISOString();
    save();

    // `up` died before it had a Redis: there is no queue to flip or drain. (Never
    // fall back to a default URL: that is somebody else's Redis.)
    const noRedis = options.redisUrl === undefined && state.redis.url === "";
    // A state file naming no queue drill could have made (edited by hand): its processes and cgroup are still
    // stopped and removed; its queue is left and said (QA: the refusal ended the rollback before step 1, and
    // the Redis connection it had opened kept the process alive for good).
    const queueRefused = queueNameRefusal(state.queue);
    const redis = noRedis || queueRefused !== null ? null : await connectDrillRedis(state, options, record, crash, save);
    const queue = redis ? new DrillQueue(redis, state.queue) : null;
    if (noRedis) record("connect redis", true, "up stopped before it set up a Redis: no queue to flip or drain");
    if (queueRefused !== null) {
      record("connect redis", false, `not connected: the state file names queue "${state.queue}": ${queueRefused}`);
      const redisKept = state.redis.embedded ? ", and its embedded Redis keeps running" : "";
      result.left.push(`queue "${state.queue}" in ${statePath(options.stateDir, name)}: not flipped, drained or exported${redisKept}; put the drill's queue name back there and run ${again}`);
    }

    // 1. deny-all
    if (queue) {
      await guard(record, "deny-all", () => denyAll(queue, roots), (err) => result.left.push(denyAllFailed(queue, err, again)));
    } else if (!noRedis && queueRefused === null) {
      record("deny-all", false, "redis unreachable: admission not flipped");
    }
    crash("deny-all");

    // 2. stop the packer (and a foreground up that runs the schedule)
    const upWasAlive = await stopRoles(state, ["packer"], roots, record, "stop packer", notSignalled);
    crash("stop-packer");
    // What up recorded before it saw the takeover (a child spawned, or, while
    // it started, its cgroup or file dir) is in its own last write, not in
    // this copy: merged, so the rest of the rollback stops and removes it.
    adoptRecordedSince(state, readState(options.stateDir, name));
    // An up stopped while it started may have opened admission after step 1.
    if (upWasAlive && upWasStarting && queue) await guard(record, "deny-all again", () => denyAll(queue, roots), (err) => result.left.push(denyAllFailed(queue, err, again)));

    // 3. drain what waits
    let drained: DrainResult | null = null;
    if (queue) {
      await guard(record, "drain", async () => {
        drained = await drainReady(queue.redis, queue.keys, drainProgress("drain", options.progress));
        return describeDrain(drained, queue.keys.drain);
      });
    }
    crash("drain");

    // 4-5. kill hog and worker inside the cgroup, remove it
    if (state.cgroup) {
      const cg = state.cgroup;
      await guard(record, "kill and remove cgroup", async () => {
        const layout = requireLayout(roots);
        // The dirs up recorded before setup; --parent again only when up died before recording them.
        const computed = workerCgroupFromDirs(layout, cg.name, cg.dirs) ?? resolveWorkerCgroup(roots, layout, cg.name, validateParent(cg.parent));
        // The report's last oom_kill reading once the cgroup is gone: the kill that stopped the drill can follow watch's last sample.
        const oomKill = readOomKillCount(computed.limits);
        if (oomKill.ok) {
          cg.oomKillAtTeardown = { tsMs: Date.now(), count: oomKill.value };
          save();
        }
        // Told apart before the kill, as after it they cannot be: a worker or hog run by hand in this cgroup dies too (QA: unsaid).
        const others = new Set(tasksByRun(roots, withDescendants(computed.dirs).map((d) => d.dir), state).others.map((t) => t.pid));
        let torn;
        try {
          torn = await teardownWorkerCgroup(roots, computed, { stateDir: options.stateDir, timeoutMs: 10_000, owner: { drill: state.name, runId: state.runId } });
        } catch (err) {
          if (!(err instanceof RefusedError)) throw err;
          // Not drill's to remove (no marker here, recreated since, or another
          // drill's now): left alone, and with only others' tasks in it (or none)
          // that is what this step should do, or it would fail every rollback
          // after it. With this run's own tasks inside it is this drill's cgroup
          // that stays (a state file moved from another --state-dir): not ok.
          const own = ownTasksIn(roots, computed.dirs.map((d) => d.dir), state);
          if (own.length === 0) return err.message;
          throw new RollbackIncompleteError(
            `cgroup ${computed.dirs.map((d) => d.dir).join(" and ")} not removed, yet it holds this drill's own tasks ${own.map((t) => `${t.pid} (${t.comm})`).join(", ")} (run ${state.runId}; stopped by pid below): ${err.message}`,
          );
        }
        // Removed, but a record of it left (its dir immutable): the step is not done until a rollback run again removes it.
        if (torn.kind === "removed" && torn.left.length > 0) throw new RollbackIncompleteError(`${describeTeardown(torn, others)}; ${torn.left.join("; ")}`);
        return describeTeardown(torn, others);
      }, (err) => result.left.push(err instanceof Error ? err.message : String(err)));
    } else {
      record("kill and remove cgroup", true, "no cgroup recorded");
    }
    crash("cgroup");

    // 6. stop gate and watch; then anything else that carries this run's id
    await stopRoles(state, ["gate", "watch", "worker", "hog"], roots, record, "stop gate and watch", notSignalled);
    // The embedded redis-server holds the drain and stops last.
    const strays = findByRunId(roots, state.runId, new Set([process.pid, ...redisPids(state), ...embeddedRedisPids(roots, state)]));
    for (const stray of strays) {
      const outcome = await stopRecordedProcess(roots, stray, 2000);
      if (outcome === "alive") result.left.push(`process ${stray.pid} (${stray.comm}) with DRILL_RUN_ID=${state.runId} survived SIGKILL`);
      if (outcome === "refused") result.left.push(`process ${stray.pid} (${stray.comm}) with DRILL_RUN_ID=${state.runId} still running: ${notPermittedText(roots, stray.pid)}`);
    }
    record("stop strays by DRILL_RUN_ID", true, strays.length === 0 ? "none" : strays.map((s) => `${s.pid} (${s.comm})`).join(", "));
    crash("stop");

    // 7. re-drain: the worker's in-flight jobs, admitted jobs, gates' processing lists
    let heldLive = 0;
    if (queue) {
      await guard(record, "re-drain", async () => {
        // What a gate or worker still alive holds stays (QA S 4: one run by hand on this queue, outside the
        // drill's cgroup, went on decoding jobs this step had moved to the drain): named, exit 4.
        const unheld = await drainUnheld(queue.redis, queue.keys, roots, drainProgress("re-drain", options.progress));
        drained = unheld;
        result.drainLength = unheld.drainLength;
        heldLive = unheld.held.length;
        for (const h of unheld.held) {
          result.left.push(`${heldText(h, queue.keys.admitted)} (a gate or worker run by hand on queue ${state.queue}, not this drill's: rollback does not stop it); stop it, then run ${again}`);
        }
        const held = unheld.held.length === 0 ? "" : `; left ${unheld.held.map((h) => `${h.jobs} in ${h.list}`).join(", ")} (held by a live gate or worker)`;
        return { ok: unheld.held.length === 0, detail: `${describeDrain(unheld, queue.keys.drain)}${held}` };
      }, (err) => {
        // Not a complete rollback: what the worker and the gates held may still
        // sit in their lists, where nothing will take it once they are stopped.
        const held = [queue.keys.admitted, queue.keys.processingPattern, queue.keys.workingPattern].join(", ");
        result.left.push(`re-drain failed (${err instanceof Error ? err.message : String(err)}): jobs in ${held} may not be in ${queue.keys.drain} (run ${again})`);
      });
    } else if (!noRedis && queueRefused === null) {
      result.left.push(`drain pending: redis at ${redactUrl(state.redis.url)} unreachable; ${state.queue} and its lists not moved to ${state.queue}_drain nor exported (run ${again})`);
    }
    crash("re-drain");

    // 8. export every key, then stop an embedded Redis: only after the export,
    // which is then the one copy of the drain outside its AOF. A given Redis
    // keeps running, but its keys are the operator's to remove (up's "queue in
    // use" refusal says how): the export is what report reads after that.
    const url = state.redis.url;
    const exportable = queue !== null && result.drainLength !== null;
    if (queue && exportable) {
      const file = finalExportFile(options.stateDir, name);
      const kept = state.redis.embedded
        ? "the embedded Redis keeps running with the drain"
        : `every key of queue ${state.queue} is still in the given Redis ${redactUrl(url)}, nothing deleted`;
      // An embedded Redis stops right after the export: a producer still pushing (pack run by hand) must
      // not have a push acknowledged after the export read the keys, or that job lives only in the AOF of
      // a drill marked complete (QA: pack --rate through a rollback, ids 258-263 acked yet not exported).
      // Paused, such a push waits and is refused when the server stops; the pause is bounded, and lifted
      // if the export fails and the Redis keeps running.
      const paused = state.redis.embedded !== null && heldLive === 0 ? await pauseWrites(queue.redis) : false;
      await guard(record, "export", async () => {
        const exported = await exportKeys(queue.redis, queue.keys, file).catch((err: unknown) => {
          // Root's drill dir, rolled back by a user (QA: Node's bare "EACCES: permission denied, open ...partial").
          const reason = notWritableByThisUser(path.dirname(file), (err as NodeJS.ErrnoException).code);
          throw reason === null ? err : new FileWriteError(file, reason, err, `the drain stays done: ${kept}`);
        });
        result.exported = exported.file;
        state.rollback = rollbackRecord(earlier, new Date().toISOString(), { exported: exported.file, drained: result.drainLength ?? undefined, left: [] }, takenOverAt);
        save();
        return `${exported.keys} keys to ${exported.file}`;
      }, (err) => result.left.push(`export to ${file} ${err instanceof FileWriteError ? `not written: ${err.reason}` : `failed (${err instanceof Error ? err.message : String(err)})`}; ${kept} (run ${again})`));
      if (paused && result.exported === null) await queue.redis.call("CLIENT", "UNPAUSE").catch(() => undefined);
      crash("exported");
    }
    // The export holds the drill's queue only: what else its embedded Redis held stays in the AOF, said (QA:
    // "every key in" the export, over another queue's jobs that then lived only in this drill's run dir).
    const others = state.redis.embedded && queue && result.exported !== null ? await otherQueuesKeys(queue.redis, queue.keys).catch(() => []) : [];
    await closeRedis(redis);
    if (state.redis.embedded) {
      if (heldLive > 0) {
        // QA: stopped under a live hand-run worker, whose next rollback then found no heartbeat in the Redis
        // started again from the AOF and drained the jobs it still decoded.
        record("stop embedded redis", false, `kept running: a gate or worker run by hand on it still holds jobs (above); stop that one, then run ${again}`);
      } else if (result.exported !== null) {
        await stopRoles(state, ["redis"], roots, record, "stop embedded redis", notSignalled);
        if (others.length > 0) {
          const dir = state.redis.embedded.dir;
          result.otherQueuesKept = { dir, queues: others };
          const counted = others.map((o) => `${o.queue}: ${o.keys} key${o.keys === 1 ? "" : "s"}`).join(", ");
          record("keys of other queues", true, `it also held keys of queues run there by hand (${counted}): not this drill's, not exported; they stay in its AOF in ${dir} (redis-server --dir ${shellWord(dir)} --appendonly yes --port <a free port> serves them)`);
        }
        // A redis whose pid never reached the state file (killed between spawn and write).
        for (const stray of embeddedRedisProcesses(roots, state)) {
          const outcome = await stopRecordedProcess(roots, stray);
          if (outcome === "alive") result.left.push(`redis-server ${stray.pid} survived SIGKILL`);
          if (outcome === "refused") result.left.push(`redis-server ${stray.pid} still running: ${notPermittedText(roots, stray.pid)}`);
        }
      } else {
        // Down and not restarted (above): "kept running" would send the operator looking for a process.
        const down = redis === null && embeddedRedisProcesses(roots, state).length === 0;
        record("stop embedded redis", false, down ? `not running: the jobs stay in its AOF in ${state.redis.embedded.dir} until a rollback exports them` : exportable ? "kept running: the export failed" : "kept running: the drain is not exported yet");
      }
    } else if (!noRedis) {
      record("stop embedded redis", true, `none (given Redis ${redactUrl(url)}: not the drill's to stop; it keeps the drill's keys)`);
    }
    crash("export");

    // 9. unlink the hog's and worker's files
    const files = state.processes.flatMap((p) => p.files);
    const unlinked: string[] = [];
    for (const file of files) {
      try {
        unlinkSync(file);
        unlinked.push(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") result.left.push(`file ${file}: ${(err as Error).message}`);
      }
    }
    if (state.fileDir) removeRunDir(state.fileDir, result.left, unlinked);
    record("unlink files", true, unlinked.length === 0 ? "none left" : unlinked.join(", "));

    const alive = state.processes.filter((p) => p.pid !== null && p.startTime !== null && p.role !== "redis" && stillAlive(roots, p));
    for (const p of alive) result.left.push(`process ${p.pid} (${p.role}) still running${p.pid !== null && notSignalled.has(p.pid) ? `: ${notPermittedText(roots, p.pid)}` : ""}`);

    if (result.left.length === 0) {
      state.phase = "complete";
      state.completedAt = new Date().toISOString();
    }
    state.rollback = rollbackRecord(earlier, new Date().toISOString(), { exported: result.exported ?? state.rollback?.exported, drained: result.drainLength ?? undefined, left: result.left }, takenOverAt);
    save();
    // Also when this last write is the one refused: a drill not marked complete is not rolled back (exit 4).
    const unrecorded = recorder.unrecorded();
    if (unrecorded !== null) result.left.push(unrecordedLeft(options.stateDir, name, unrecorded, again));
    return { kind: "rolled_back", result };
  } finally {
    // Stopped in step 8, or kept running on purpose (said there): no longer the interrupt handler's to stop.
    if (state.redis.embedded) releaseRestarted(state.redis.embedded.dir);
    lock?.release();
  }
}

/** The command that runs this drill's rollback again: as the caller gave it, else on this state dir, tree and --redis. */
function rollbackCommandOf(options: RollbackOptions, name: string): string {
  const { stateDir, roots, redisUrl, redisTyped } = options;
  return options.again ?? rollbackAgain(drillCommandAt({ stateDir, sysfs: roots.sysfs, procfs: roots.procfs, redisUrl, redisTyped }), {}, name);
}

/**
 * state.json's writes for a rollback whose state dir may refuse them (full,
 * read-only, immutable: stateDirRefusal): the first refusal, or the lock's
 * (`refused`), is said once, and the rollback goes on with every step that
 * needs no disk, writing nothing more. `unrecorded`: why, for what is left.
 */
function stateRecorder(
  stateDir: string,
  state: DrillState,
  refused: StateDirRefused | null,
  record: (step: string, ok: boolean, detail: string) => void,
): { save: () => boolean; unrecorded: () => StateDirRefused | null } {
  let why: StateDirRefused | null = null;
  const stopRecording = (refusal: StateDirRefused, how: string) => {
    why = refusal;
    record("record progress", false, `${refusal.text}: ${how}, with every step that needs no disk; none of it is recorded in ${statePath(stateDir, state.name)}`);
  };
  if (refused !== null) stopRecording(refused, "no rollback holds it, so this one goes on without it");
  return {
    save: () => {
      if (why !== null) return false;
      try {
        writeState(stateDir, state);
        return true;
      } catch (err) {
        const code = stateDirRefusal(err);
        if (code === null) throw err;
        stopRecording(stateDirRefused("write state file", statePath(stateDir, state.name), code), "this rollback goes on");
        return false;
      }
    },
    unrecorded: () => why,
  };
}

/**
 * What a rollback that could not write state.json leaves: the record of its
 * run, and the rerun that finishes it: once the state dir is freed, or, when
 * it is another user's drill dir (QA: "once … writable again" said to a user
 * in root's dir), run by who may write there.
 */
export function unrecordedLeft(stateDir: string, name: string, why: StateDirRefused, again: string): string {
  const rerun = why.as === null ? `once the state dir has space (or is writable) again, run ${again}` : `as ${why.as}, run ${again}`;
  return `${statePath(stateDir, name)} not written (${why.text.replace(/^cannot /, "could not ")}): the drill is not marked rolled back, nor what this rollback did; ${rerun}: it finishes what is left and records it`;
}

/** A cgroup teardown as a rollback step says it; `notOurs`: pids the drill did not start, said so. */
export function describeTeardown(torn: TeardownResult, notOurs: ReadonlySet<number> = new Set()): string {
  if (torn.kind === "nothing") return `nothing at ${torn.looked.join(", ")}`;
  const whose = (pid: number): string => (notOurs.has(pid) ? ": not started by this drill" : "");
  const killed = torn.killed.map((t) => `${t.pid} (${t.comm ?? "?"})${whose(t.pid)}`).join(", ");
  const gone = torn.alreadyGone.length > 0 ? `; already gone ${torn.alreadyGone.join(", ")}` : "";
  const unlinked = torn.unlinked.length > 0 ? `; unlinked ${torn.unlinked.join(", ")}` : "";
  const unread = torn.queuesServedUnread === null ? "" : `; the queues its workers served go unnamed: ${torn.queuesServedUnread}`;
  // Nothing inside: said so, not "killed 0 via empty" (QA).
  const stopped = torn.killed.length === 0 ? "nothing inside to stop" : `killed ${torn.killed.length}: ${killed} via ${torn.method.join("+")}`;
  return `${stopped}; removed ${torn.removed.join(", ") || "none"}${gone}${unlinked}${unread}`;
}

/** What a rollback did with a cgroup `drill cgroup setup` made outside any drill. */
export interface CgroupRollback {
  name: string;
  /** The dirs its marker records. */
  dirs: string[];
  step: RollbackStep;
  /** The queues of the hand-run workers its teardown stopped: their admission is still open (queueLeftOpenLine). */
  queuesServed: ServedQueue[];
}

/**
 * The cgroups `drill cgroup setup` made in this state dir outside any drill
 * (a marker with no owner), with what inject and worker started in them: the
 * runbook's step-by-step path (setup, inject --detach, worker) leaves those
 * running, and "host clean" must hold after a rollback of that path too.
 * Torn down as `drill cgroup teardown` does it (refused, and named, when a
 * drill that is up holds one). `name`: only the cgroup of that name.
 */
export async function rollbackStandaloneCgroups(roots: HostRoots, stateDir: string, name?: string): Promise<CgroupRollback[]> {
  const unlistable = unlistableRecordDirs(stateDir);
  if (unlistable.length > 0) {
    // Each dir says what it holds: cgroups/ the cgroups drill cgroup setup made, hogs/ the hogs inject --detach started.
    const held = (err: RecordReadError) => (path.basename(err.file) === "cgroups" ? "the cgroups drill cgroup setup recorded there" : "the hogs drill inject --detach recorded there");
    const detail = (err: RecordReadError) => `${err.message}; ${held(err)}, if any, are left as they are`;
    return unlistable.map((err) => ({ name: name ?? "?", dirs: [], step: { step: "read records", ok: false, detail: detail(err) }, queuesServed: [] }));
  }
  const markers = listMarkers(stateDir).filter(({ marker }) => marker.owner === undefined && (name === undefined || marker.name === name));
  const done: CgroupRollback[] = [];
  // Read once; without a hierarchy each marker is left, and says why.
  let layout: CgroupLayout | Error;
  try {
    layout = requireLayout(roots);
  } catch (err) {
    layout = err instanceof Error ? err : new Error(String(err));
  }
  for (const { file, marker } of markers) {
    const dirs = marker.dirs.map((d) => d.dir);
    const record = (ok: boolean, detail: string, queuesServed: ServedQueue[] = []) => done.push({ name: marker.name, dirs, step: { step: "kill and remove cgroup", ok, detail }, queuesServed });
    if (layout instanceof Error) {
      record(false, layout.message);
      continue;
    }
    try {
      const computed = workerCgroupFromDirs(layout, marker.name, dirs);
      if (computed === null) {
        record(false, `marker ${file} names no dir of this host's cgroup hierarchies (${dirs.join(", ") || "none"}); left alone`);
        continue;
      }
      const torn = await teardownWorkerCgroup(roots, computed, { stateDir, timeoutMs: 10_000 });
      const left = torn.kind === "removed" ? torn.left : [];
      record(left.length === 0, [describeTeardown(torn), ...left].join("; "), torn.kind === "removed" ? torn.queuesServed : []);
    } catch (err) {
      record(false, err instanceof Error ? err.message : String(err));
    }
  }
  done.push(...(await stopStrayHogs(roots, stateDir, name)));
  for (const bad of unreadableRecords(stateDir, name)) {
    const detail = bad.foreign
      ? bad.problem
      : `cannot read ${bad.file}: ${bad.problem}; what it records (a cgroup, or a hog in one) is left as it is: read or fix the file (or move it aside once that is gone), then run the rollback again`;
    done.push({ name: bad.name ?? "?", dirs: [], step: { step: "read record", ok: false, detail }, queuesServed: [] });
  }
  return done;
}

/**
 * Detached hogs this state dir recorded (`drill inject --detach`) whose
 * cgroup has no marker here: set up from another --state-dir, or already torn
 * down. Their record is here, so this rollback stops them (SIGTERM: the hog
 * unlinks its file; SIGKILL after the grace) and unlinks what is left: "nothing
 * to roll back" must not leave a hog running and its file on disk.
 */
async function stopStrayHogs(roots: HostRoots, stateDir: string, name?: string): Promise<CgroupRollback[]> {
  const done: CgroupRollback[] = [];
  const said = (name: string, ok: boolean, detail: string) => done.push({ name, dirs: [], step: { step: "stop hog", ok, detail }, queuesServed: [] });
  // A marker's file is named by its cgroup's key, as a hog record names its cgroup.
  const owned = new Set(listMarkers(stateDir).filter(({ marker }) => marker.owner !== undefined).map(({ file }) => path.basename(file, ".json")));
  for (const { file, record } of listHogRecords(stateDir)) {
    // A drill's own hogs are its rollback's (up's records carry its cgroup's marker).
    if ((name !== undefined && record.name !== name) || owned.has(record.cgroupKey)) continue;
    let outcome;
    try {
      outcome = await stopRecordedProcess(roots, { pid: record.pid, startTime: record.startTime }, TERM_GRACE_MS);
    } catch (err) {
      said(record.name, false, `${err instanceof Error ? err.message : String(err)}; its record ${file} kept`);
      continue;
    }
    if (outcome === "alive" || outcome === "refused") {
      const why = outcome === "alive" ? "survived SIGKILL" : stopOutcomeText(roots, record.pid, outcome);
      said(record.name, false, `hog pid ${record.pid}: ${why}; its record ${file} kept`);
      continue;
    }
    const { unlinked, left } = discardHogRecord(file, record);
    const what = outcome === "stopped" ? `stopped hog pid ${record.pid} (SIGTERM)` : outcome === "killed" ? `killed hog pid ${record.pid} (SIGKILL after ${TERM_GRACE_MS / 1000} s)` : `hog pid ${record.pid ?? "?"} already gone`;
    said(record.name, left === null, `${what} (detached inject recorded in ${file}, its cgroup set up elsewhere)${unlinked ? `; unlinked ${unlinked}` : ""}${left ? `; ${left}` : ""}`);
  }
  return done;
}

/**
 * A finished drill on a Redis that outlives it: producers may have pushed
 * since. Deny-all again, append what arrived to the drain, and export again:
 * once the operator removes the keys, the export is the only record of those
 * jobs (report reads it). A drain longer than the last export says (an export
 * that failed last time) is exported again too (RELIABILITY 15).
 */
async function redrainComplete(state: DrillState, options: RollbackOptions): Promise<DrillRollback | null> {
  if (state.redis.url === "") return null; // no Redis was ever set up; never default to somebody else's
  const again = rollbackCommandOf(options, state.name);
  const reached = await givenRedis(state, options);
  // Nothing reachable to drain, and the host side is already clean.
  if (reached.redis === null) return null;
  const redis = reached.redis;
  let lock: DrillLock | null = null;
  try {
    const queue = new DrillQueue(redis, state.queue);
    const waiting = await redis.llen(queue.keys.ready);
    const exportedDrain = state.rollback?.drained;
    const unexported = exportedDrain !== undefined && (await redis.llen(queue.keys.drain)) > exportedDrain;
    if (waiting === 0 && !unexported) return null;
    // As a rollback of a running drill does: a second rollback at the same time is refused, not a second export beside this one.
    const taken = acquireRollbackLock(drillDir(options.stateDir, state.name));
    lock = taken.lock;
    const result: DrillRollback = { name: state.name, runId: state.runId, steps: [], drainLength: null, exported: null, left: [] };
    options.onStart?.(result);
    const record = (step: string, ok: boolean, detail: string) => {
      const entry = { step, ok, detail };
      result.steps.push(entry);
      options.log(entry);
    };
    const recorder = stateRecorder(options.stateDir, state, taken.refused, record);
    if (reached.said !== null) record("connect redis", true, reached.said);
    await guard(record, "deny-all", () => denyAll(queue, options.roots), (err) => result.left.push(denyAllFailed(queue, err, again)));
    await guard(record, "drain", async () => {
      const drained = await drainReady(redis, queue.keys, drainProgress("drain", options.progress));
      result.drainLength = drained.drainLength;
      return `${describeDrain(drained, queue.keys.drain)} (pushed after the last rollback)`;
    }, (err) => result.left.push(`drain failed (${err instanceof Error ? err.message : String(err)}): jobs pushed after the last rollback are still in ${queue.keys.ready} (run ${again})`));
    if (result.drainLength !== null) {
      const file = finalExportFile(options.stateDir, state.name);
      await guard(record, "export", async () => {
        const exported = await exportKeys(redis, queue.keys, file);
        result.exported = exported.file;
        const at = new Date().toISOString();
        const redrains = [...(state.rollback?.redrains ?? []), { at, drained: result.drainLength, exported: exported.file }];
        state.rollback = { ...rollbackRecord(state.rollback, at, { exported: exported.file, drained: result.drainLength ?? undefined, left: [] }), redrains };
        recorder.save();
        return `${exported.keys} keys to ${exported.file}`;
      }, (err) => result.left.push(`export to ${file} failed (${err instanceof Error ? err.message : String(err)}); every key of queue ${state.queue} is still in the given Redis ${redactUrl(state.redis.url)}, nothing deleted (run ${again})`));
    }
    const unrecorded = recorder.unrecorded();
    if (unrecorded !== null) result.left.push(unrecordedLeft(options.stateDir, state.name, unrecorded, again));
    return result;
  } finally {
    lock?.release();
    await closeRedis(redis);
  }
}

/**
 * The run's rollback record after a rollback records at `at`: `before` is the
 * record as this rollback found it. The first rollback's time stays `at` (it
 * took the drill over; the report ends the run there, QA: a re-drain 19 s
 * later moved "rolled back 14 s into the drill" to 33 s); a later one is `lastAt`.
 */
export function rollbackRecord(before: RollbackRecord | undefined, at: string, latest: Pick<RollbackRecord, "exported" | "drained" | "left">, takenOverAt?: string): RollbackRecord {
  // The first record after an interrupted rollback: that one took the drill over (QA: the run's end moved to the second).
  if (before === undefined && takenOverAt !== undefined) return { at: takenOverAt, lastAt: at, ...latest };
  if (before === undefined) return { at, ...latest };
  return { ...latest, at: before.at, lastAt: at, ...(before.redrains ? { redrains: before.redrains } : {}) };
}

/** `<state-dir>/<name>/final-<ts>.jsonl`: a new file each export, never one written over. */
function finalExportFile(stateDir: string, name: string): string {
  return path.join(drillDir(stateDir, name), `final-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
}

/** Step 1 of every rollback: the gate's lever to reject_all, with the host PSI it was pulled at. */
async function denyAll(queue: DrillQueue, roots: HostRoots, by: "rollback" | "rollback_queue" = "rollback"): Promise<string> {
  const psi = readHostPsi(roots, "memory");
  const psiText = psi.ok ? psi.value.some.avg10.toFixed(2) : "missing";
  // by=rollback_queue: a hand-run queue's, told in a report from a drill's own rollback (QA S 7).
  const previous = await queue.setMode("reject_all", { forced: false, psi: psiText, by });
  // The runbook's rollback step 1 whatever the PSI: gates reject as host pressure with mode=reject_all (DESIGN),
  // said as that, not as a reason a PSI of 0.00 would contradict (QA S 8, T 9).
  return `mode reject_all (was ${previousModeText(previous)}): gates now reject every job as reject_host_pressure mode=reject_all (the runbook's rollback step 1; host psi avg10=${psiText})`;
}

/** A deny-all that did not happen is a rollback not done: a gate still running may admit, and re-admitting is no next step. */
function denyAllFailed(queue: DrillQueue, err: unknown, again: string): string {
  // Sent and unanswered: a Redis paused for writes (CLIENT PAUSE) runs it once it resumes; "is not" was then untrue.
  if (mayHaveRun(err, queue.redis)) {
    return `deny-all unconfirmed (${redisErrorText(err, queue.redis)}): ${queue.keys.mode} may not be reject_all yet (a paused Redis sets it when it resumes); until then a gate still running admits (run ${again})`;
  }
  return `deny-all failed (${failureText(err)}): ${queue.keys.mode} is not reject_all, a gate still running admits (run ${again})`;
}

/** The deny-all step's word when the queue's Redis held no key of it: no lever written. */
const NO_KEY_DETAIL = "nothing to do: no key of queue";

/** Whether this queue's rollback found no key of it on its Redis, so closed nothing there (wrote no lever): nothing for it to re-admit. */
export function foundNoKeys(q: Pick<QueueRollback, "steps">): boolean {
  return q.steps.some((s) => s.step === "deny-all" && s.ok && s.detail.startsWith(NO_KEY_DETAIL));
}

/** A queue rolled back by name (`rollback --queue`), outside any drill of the state dir. */
export interface QueueRollback {
  queue: string;
  /** Password redacted. */
  url: string;
  steps: RollbackStep[];
  drainLength: number | null;
  left: string[];
}

/**
 * The step-by-step path (`pack`, `gate`, `worker` run by hand, no `up`): no
 * state records its queue, so the operator names it. Rolled back as far as a
 * Redis lets: deny-all, then the jobs still waiting appended to its drain.
 * The processes started by hand are not drill's to find (no DRILL_RUN_ID, and
 * never by name); their cgroup's teardown stops the worker and the hog. The
 * keys stay on that Redis for `report`: nothing of it is stopped.
 */
export async function rollbackQueue(url: string, queueName: string, again: string, roots: HostRoots, log: (step: RollbackStep) => void, progress?: (line: string) => void): Promise<QueueRollback> {
  const keys = queueKeys(queueName);
  const result: QueueRollback = { queue: queueName, url: redactUrl(url), steps: [], drainLength: null, left: [] };
  const record = (step: string, ok: boolean, detail: string) => {
    const entry = { step, ok, detail };
    result.steps.push(entry);
    log(entry);
  };
  const pending = (what: string) => (err: unknown) =>
    result.left.push(`queue ${queueName} on ${result.url}: ${what} not done (${failureText(err)}); run ${again}`);
  let redis: Redis;
  try {
    redis = await reachRollbackRedis(url);
  } catch (err) {
    record("connect redis", false, err instanceof Error ? err.message : String(err));
    pending("deny-all and drain")(err);
    return result;
  }
  try {
    const serving = await queueServingRun(redis, keys, roots).catch(() => null);
    if (serving !== null) {
      const drill = drillOfRunId(serving.runId);
      const where = servingRunRollback(serving);
      const why = `queue ${queueName} is drill ${drill}'s (its ${serving.role}, pid ${serving.pid}, run ${serving.runId}${serving.stateDir === null ? "" : `, state dir ${serving.stateDir}`}): its own rollback drains it and stops what serves it`;
      record("deny-all", false, `not done: ${why}`);
      result.left.push(`${why}; run that: ${where}`);
      return result;
    }
    // A queue this Redis never held: nothing to flip or drain, and a lever written here would be a key of
    // a queue that is elsewhere (QA S re-check 1: 6379 got qaUq3:mode while the queue lived on another Redis).
    if (!(await holdsQueueKeys(redis, keys))) {
      record("deny-all", true, `${NO_KEY_DETAIL} ${queueName} on ${result.url} (a queue on another Redis? give --redis)`);
      result.drainLength = 0;
      return result;
    }
    const queue = new DrillQueue(redis, keys.queue);
    await guard(record, "deny-all", () => denyAll(queue, roots, "rollback_queue"), pending("deny-all"));
    await guard(
      record,
      "drain",
      async () => {
        const drained = await drainReady(redis, keys, drainProgress("drain", progress));
        result.drainLength = drained.drainLength;
        return describeDrain(drained, keys.drain);
      },
      pending("drain"),
    );
  } finally {
    await closeRedis(redis);
  }
  return result;
}

/**
 * The hand-run queue's second drain, after the cgroups `drill cgroup setup`
 * made are torn down (a worker stopped there gave what it held back to
 * admitted): admitted, processing and working lists that nothing alive holds
 * join the drain, as a drill's re-drain does. Lists a gate or worker still
 * running by hand holds (outside drill's cgroups, not stopped here) are left
 * and named: the rollback is not complete while they run.
 */
export async function redrainQueue(result: QueueRollback, url: string, again: string, roots: HostRoots, log: (step: RollbackStep) => void, progress?: (line: string) => void): Promise<void> {
  if (result.left.length > 0) return; // the first pass did not get through: its rerun does both
  const keys = queueKeys(result.queue);
  const record = (step: string, ok: boolean, detail: string) => {
    const entry = { step, ok, detail };
    result.steps.push(entry);
    log(entry);
  };
  let redis: Redis;
  try {
    redis = await connectRedis(url, { name: "drill-rollback", commandTimeoutMs: 5000 });
  } catch (err) {
    record("re-drain", false, failureText(err));
    result.left.push(`queue ${result.queue} on ${result.url}: re-drain of ${keys.admitted}, its processing and working lists not done (${failureText(err)}); run ${again}`);
    return;
  }
  try {
    await guard(
      record,
      "re-drain",
      async () => {
        const drained = await drainUnheld(redis, keys, roots, drainProgress("re-drain", progress));
        result.drainLength = drained.drainLength;
        for (const h of drained.held) {
          result.left.push(`queue ${result.queue} on ${result.url}: ${heldText(h, keys.admitted)} (a gate or worker run by hand, outside drill's cgroups: rollback does not stop it); stop it, then run ${again}`);
        }
        const held = drained.held.length === 0 ? "" : `; left ${drained.held.map((h) => `${h.jobs} in ${h.list}`).join(", ")} (held by a live gate or worker)`;
        return { ok: drained.held.length === 0, detail: `${describeDrain(drained, keys.drain)}${held}` };
      },
      (err) => result.left.push(`queue ${result.queue} on ${result.url}: re-drain failed (${err instanceof Error ? err.message : String(err)}); run ${again}`),
    );
  } finally {
    await closeRedis(redis);
  }
}

/** A complete drill: nothing to do, unless producers pushed onto its given Redis since (then that drain). */
async function completeOutcome(state: DrillState, options: RollbackOptions): Promise<RollbackOutcome> {
  const redrained = state.redis.embedded ? null : await redrainComplete(state, options);
  return redrained ? { kind: "rolled_back", result: redrained } : { kind: "complete", completedAt: state.completedAt ?? null, closedByUp: closedByUp(state) };
}

/**
 * What up recorded on disk that `state` lacks, added to it: process records
 * (by key), and the cgroup, file dir and Redis of an up stopped while it
 * started (recorded after this rollback read the state).
 */
export function adoptRecordedSince(state: DrillState, onDisk: DrillState | null): void {
  if (onDisk === null || onDisk.runId !== state.runId) return;
  const known = new Set(state.processes.map((p) => p.key));
  state.processes.push(...onDisk.processes.filter((p) => !known.has(p.key)));
  state.cgroup ??= onDisk.cgroup;
  state.fileDir ??= onDisk.fileDir;
  if (state.redis.url === "") state.redis = onDisk.redis;
}

/** A step's failure as said: a Redis refusal with its fix and without the script's sha (refusal.ts), anything else as is. */
// ioredis's bare "Command timed out" named neither the Redis nor why (QA: CLIENT PAUSE WRITE during a rollback).
const failureText = (err: unknown): string => (err instanceof Error ? (gotNoReply(err) ? redisErrorText(err) : refusalText(err)) : String(err));

async function guard(
  record: (step: string, ok: boolean, detail: string) => void,
  step: string,
  action: () => Promise<string | { ok: boolean; detail: string }>,
  onError?: (err: unknown) => void,
): Promise<void> {
  try {
    // A step that ran but left work (a re-drain that left held lists) says FAIL beside the exit 4 it causes.
    const done = await action();
    if (typeof done === "string") record(step, true, done);
    else record(step, done.ok, done.detail);
  } catch (err) {
    record(step, false, failureText(err));
    onError?.(err);
  }
}

function describeDrain(drained: DrainResult, drainKey: string): string {
  const parts = Object.entries(drained.from).map(([k, n]) => `${n} from ${k}`);
  const unreleased = drained.unreleased ? `; packed tokens of the jobs moved not released: ${drained.unreleased.join("; ")}` : "";
  return `${drained.moved === 0 ? "nothing to move" : `moved ${parts.join(", ")}`}; LLEN ${drainKey} = ${drained.drainLength}${unreleased}`;
}

/** A drain taking seconds says how far it got (QA: 27 s of silence for 50 000 jobs), as its step would name it. */
function drainProgress(step: string, say: ((line: string) => void) | undefined): DrainProgressOptions {
  return say ? { onProgress: (moved, ofAbout) => say(`${step}: moved ${moved} of ~${ofAbout} so far`) } : {};
}

/** How a recorded process was found: "gone" says it was not running when rollback came (an earlier rollback, or it exited). */
const STOP_OUTCOME_TEXT: Record<Exclude<StopOutcome, "not_started" | "refused">, string> = {
  gone: "already gone",
  reused: "already gone (its pid is another process's now: left alone)",
  stopped: "stopped",
  killed: "killed",
  alive: "still alive",
};

/** How a stop ended, as a rollback line says it: one this user may not signal names whose it is (stopRecordedProcess). */
function stopOutcomeText(roots: HostRoots, pid: number | null, outcome: Exclude<StopOutcome, "not_started">): string {
  if (outcome !== "refused") return STOP_OUTCOME_TEXT[outcome];
  // Refused is a signal tried: there was a pid.
  return `cannot signal it: EPERM (${pid === null ? "not permitted" : notPermittedText(roots, pid)})`;
}

/** `refused`: the pids this user may not signal, added to (the rollback's left line says whose they are). */
async function stopRoles(
  state: DrillState,
  roles: ProcessRole[],
  roots: HostRoots,
  record: (step: string, ok: boolean, detail: string) => void,
  step: string,
  refused: Set<number>,
): Promise<boolean> {
  const targets = state.processes.filter((p) => roles.includes(p.role));
  if (roles.includes("packer") && state.owner.pid !== process.pid) {
    targets.push({ role: "packer", key: "up", pid: state.owner.pid, startTime: state.owner.startTime, files: [], intendedAt: state.createdAt });
  }
  const done: string[] = [];
  let ok = true;
  let wasAlive = false;
  for (const target of targets) {
    const outcome = await stopRecordedProcess(roots, target);
    if (outcome === "alive" || outcome === "refused") ok = false;
    if (outcome === "refused" && target.pid !== null) refused.add(target.pid);
    if (outcome === "stopped" || outcome === "killed" || outcome === "alive" || outcome === "refused") wasAlive = true;
    const role = target.key === target.role ? "" : ` (${target.role})`;
    if (outcome !== "not_started") done.push(`${target.key}${role} ${target.pid ?? "-"}: ${stopOutcomeText(roots, target.pid, outcome)}`);
  }
  record(step, ok, done.length === 0 ? "nothing running" : done.join(", "));
  return wasAlive;
}

/** The embedded redis-server, found by its working directory (its --dir), recorded pid or not. */
function embeddedRedisProcesses(roots: HostRoots, state: DrillState) {
  return state.redis.embedded ? findByCwd(roots, state.redis.embedded.dir).filter((p) => p.comm.startsWith("redis-server")) : [];
}

function embeddedRedisPids(roots: HostRoots, state: DrillState): number[] {
  return embeddedRedisProcesses(roots, state).map((p) => p.pid);
}

function redisPids(state: DrillState): number[] {
  return state.processes.filter((p) => p.role === "redis" && p.pid !== null).map((p) => p.pid as number);
}

/**
 * The tasks in `dirs` (each pid once: the v1 dir and its unified twin list
 * the same tasks) that are this drill run's: a recorded process (pid and
 * start time) or one carrying its DRILL_RUN_ID.
 */
function ownTasksIn(roots: HostRoots, dirs: string[], state: DrillState): StrayProcess[] {
  return tasksByRun(roots, dirs, state).own;
}

/** The live tasks in `dirs`, this drill run's (ownTasksIn) and the others (a worker or hog run by hand that joined). */
function tasksByRun(roots: HostRoots, dirs: string[], state: DrillState): { own: StrayProcess[]; others: StrayProcess[] } {
  const pids = new Set(dirs.flatMap((dir) => {
    const read = readPids(path.join(dir, "cgroup.procs"));
    return read.ok ? read.value : [];
  }));
  const own: StrayProcess[] = [];
  const others: StrayProcess[] = [];
  for (const pid of [...pids].sort((a, b) => a - b)) {
    const stat = readProcessStat(roots, pid);
    if (!stat.ok || stat.value.state === "Z") continue;
    const recorded = state.processes.some((p) => p.pid === pid && p.startTime === stat.value.startTime);
    (recorded || runIdOf(roots, pid) === state.runId ? own : others).push({ pid, startTime: stat.value.startTime, comm: stat.value.comm });
  }
  return { own, others };
}

function runIdOf(roots: HostRoots, pid: number): string | null {
  const environ = readEnviron(roots, pid); // null: gone, or not ours to read
  return environ === null ? null : (drillRunFromEnviron(environ)?.runId ?? null);
}

function stillAlive(roots: HostRoots, p: { pid: number | null; startTime: number | null }): boolean {
  if (p.pid === null || p.startTime === null) return false;
  const stat = readHostStat(roots, p.pid);
  return stat !== null && stat === p.startTime;
}

function readHostStat(roots: HostRoots, pid: number): number | null {
  const stat = readProcessStat(roots, pid);
  return stat.ok && stat.value.state !== "Z" ? stat.value.startTime : null;
}

/** The per-run file directory (`<file-dir>/drill-<runId>`): its files, then itself. */
function removeRunDir(dir: string, left: string[], unlinked: string[]): void {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return; // already gone
  }
  for (const entry of entries) {
    const file = path.join(dir, entry);
    try {
      unlinkSync(file);
      unlinked.push(file);
    } catch (err) {
      left.push(`file ${file}: ${(err as Error).message}`);
    }
  }
  try {
    rmdirSync(dir);
    // Said even when it was already empty (QA: "none left" while it removed one).
    unlinked.push(`${dir}/ (directory)`);
  } catch (err) {
    left.push(`directory ${dir}: ${(err as Error).message}`);
  }
}

/**
 * The drill's Redis, or null when it cannot be reached. An embedded server
 * that died is restarted on its own data dir (AOF): the drain must finish.
 */
async function connectDrillRedis(
  state: DrillState,
  options: RollbackOptions,
  record: (step: string, ok: boolean, detail: string) => void,
  crash: (step: string) => void,
  save: () => boolean,
): Promise<Redis | null> {
  if (!state.redis.embedded) {
    const reached = await givenRedis(state, options, save);
    if (reached.redis === null) {
      record("connect redis", false, reached.why);
      return null;
    }
    if (reached.said !== null) record("connect redis", true, reached.said);
    return reached.redis;
  }
  const other = otherRedisGiven(state, options);
  const leftOut = other === null ? "" : ` (${givenAs(options)} ${redactUrl(other)} is not its Redis: left alone)`;
  const url = other === null ? (options.redisUrl ?? state.redis.url) : state.redis.url;
  try {
    const redis = await reachRollbackRedis(url);
    if (await isEmbeddedRedis(redis, state.redis.embedded.dir)) {
      // A rollback killed between its export and its stop left writes paused (pauseWrites): lifted, or this one's wait for it.
      await redis.call("CLIENT", "UNPAUSE").catch(() => undefined);
      if (other !== null) record("connect redis", true, `its embedded Redis at ${redactUrl(url)}${leftOut}`);
      return redis;
    }
    await closeRedis(redis);
    record("connect redis", true, `${redactUrl(url)} answers, but it is not the drill's embedded Redis (not in ${state.redis.embedded.dir}): left alone${leftOut}`);
  } catch {
    // down: restarted on its AOF below
  }
  try {
    const embedded = state.redis.embedded;
    requireRestartable(options.roots, embedded.dir);
    // Intent before the act, as up does: the port written first, so a rollback
    // killed right after the spawn leaves the next one a Redis it can reach
    // (and stop), not one on the drill's AOF that it must refuse to start beside.
    const port = await freePort();
    const intended: ProcessRecord = { role: "redis", key: "redis", pid: null, startTime: null, files: [], intendedAt: new Date().toISOString() };
    const was = { redis: state.redis, processes: state.processes };
    state.redis = { url: `redis://127.0.0.1:${port}`, embedded: { dir: embedded.dir, port } };
    state.processes = [...state.processes.filter((p) => p.role !== "redis"), intended];
    if (!save()) {
      // Unrecorded, the next rollback could neither reach it (another port) nor start its own beside it.
      Object.assign(state, was);
      record("connect redis", false, `embedded redis is down; not restarted on its AOF in ${embedded.dir}: its port could not be recorded in state.json first (above); the jobs stay in its AOF there`);
      return null;
    }
    // This rollback stops it (step 8, or on its own interruption). If it is
    // SIGKILLed half-way, the server exits by itself under coreutils `timeout`;
    // without that on PATH it runs until the next rollback, which reaches it
    // on the port recorded above and stops it.
    const restarted = await startEmbeddedRedis({ dir: embedded.dir, port, detached: true, env: { ...process.env, DRILL_RUN_ID: state.runId }, lifetimeMs: SELF_EXIT_GRACE_MS, callerStops: true });
    crash("redis-restart");
    const stat = readProcessStat(options.roots, restarted.pid);
    intended.pid = restarted.pid;
    intended.startTime = stat.ok ? stat.value.startTime : null;
    if (!restarted.selfExits && intended.startTime !== null) stopIfInterrupted({ pid: restarted.pid, startTime: intended.startTime, dir: embedded.dir });
    save();
    const unbounded = restarted.selfExits ? "" : " (no `timeout` (coreutils) on PATH: it runs until this rollback stops it)";
    record("connect redis", true, `embedded redis was down; restarted on its AOF in ${embedded.dir} at ${restarted.url}${unbounded}${leftOut}`);
    return await connectRedis(restarted.url, { name: "drill-rollback", commandTimeoutMs: 5000 });
  } catch (err) {
    record("connect redis", false, err instanceof DrillError ? err.message : String(err));
    return null;
  }
}

/**
 * The rollback's connection: a PING first, bounded, so a Redis that is down or
 * paused is said in 1.5 s, not after ioredis's connect and ready waits.
 */
async function reachRollbackRedis(url: string): Promise<Redis> {
  await waitForPing(url, 1500);
  return connectRedis(url, { name: "drill-rollback", commandTimeoutMs: 5000 });
}

/** --redis (or DRILL_REDIS_URL) when it names another Redis than the drill's recorded one; null when not given or the same. */
function otherRedisGiven(state: DrillState, options: RollbackOptions): string | null {
  return options.redisUrl !== undefined && !sameRedis(options.redisUrl, state.redis.url) ? options.redisUrl : null;
}

const givenAs = (options: RollbackOptions): string => (options.redisTyped === false ? "DRILL_REDIS_URL" : "--redis");

/**
 * A given Redis (not embedded): the one state.json records. A --redis naming
 * another is taken only when the recorded one does not answer and the given
 * one holds the drill's queue: the Redis moved, and state.json records it from
 * then on. Never DRILL_REDIS_URL: exported for the commands run by hand, a
 * queue named `jobs` there is no sign of the drill's. QA: a --redis meant for something
 * else (another db, DRILL_REDIS_URL exported for hand-run commands) was
 * flipped, drained and exported instead, the drill's own queue left
 * admitting, its rollback "complete". `said`: which was taken, and why.
 */
async function givenRedis(state: DrillState, options: RollbackOptions, save: () => unknown = () => writeState(options.stateDir, state)): Promise<{ redis: Redis; said: string | null } | { redis: null; why: string }> {
  const other = otherRedisGiven(state, options);
  const recorded = other === null ? (options.redisUrl ?? state.redis.url) : state.redis.url;
  let why: string;
  try {
    if (recorded === "") throw new Error("up recorded no Redis");
    const redis = await reachRollbackRedis(recorded);
    return { redis, said: other === null ? null : `drill ${state.name}'s Redis ${redactUrl(recorded)} (recorded in state.json); ${givenAs(options)} ${redactUrl(other)} is not its Redis: left alone` };
  } catch (err) {
    why = (err as Error).message;
    if (other === null) return { redis: null, why };
    if (options.redisTyped === false) return { redis: null, why: `${why}; DRILL_REDIS_URL ${redactUrl(other)} is not its Redis: left alone (if the drill's Redis moved there, give it as --redis)` };
  }
  try {
    const redis = await reachRollbackRedis(other);
    if (await holdsQueueKeys(redis, queueKeys(state.queue))) {
      const was = state.redis.url === "" ? "up recorded no Redis" : `its Redis ${redactUrl(state.redis.url)} does not answer`;
      state.redis = { url: other, embedded: null };
      save();
      return { redis, said: `${was}; --redis ${redactUrl(other)} holds its queue ${state.queue}: rolled back there (the Redis moved; state.json records it now)` };
    }
    await closeRedis(redis);
    return { redis: null, why: `${why}; --redis ${redactUrl(other)} holds no key of queue ${state.queue}: not its Redis, left alone` };
  } catch (err) {
    return { redis: null, why: `${why}; --redis ${redactUrl(other)}: ${(err as Error).message}` };
  }
}

/** Time a paused embedded Redis has for the export and its stop; past it, writes go on by themselves (a rollback killed there). */
const EXPORT_PAUSE_MS = 60_000;

/** CLIENT PAUSE WRITE on the drill's embedded Redis before its export; false when refused (Redis < 6.2), and the export goes on. */
async function pauseWrites(redis: Redis): Promise<boolean> {
  return redis.call("CLIENT", "PAUSE", String(EXPORT_PAUSE_MS), "WRITE").then(
    () => true,
    () => false,
  );
}
