import type { ChildProcess } from "node:child_process";
import net from "node:net";
import { spawnInCgroup, verifyJoined, JOIN_FAILED_EXIT } from "../cgroup/join.js";
import { oomKillRose } from "../cgroup/hog.js";
import { readOomKillCount } from "../cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { resolveCgroupTarget } from "../cgroup/target.js";
import { forcedJoinWarning, refuseForeignJoin, refuseFrozen, refuseOomKillDisabled, requireSetUpCgroup } from "../cgroup/ready.js";
import type { UpHolder } from "../cgroup/setup.js";
import { recordServedQueue } from "../cgroup/stateFiles.js";
import { writeDocument, writeErr, writeOut } from "../closedStdout.js";
import { commandRedisUrl, hiddenPasswordNoteAfter, hostRoots, type GlobalOptions } from "../context.js";
import { DrillError, ExitCode, InterruptedError, stopExitCode, type StopSignal } from "../errors.js";
import { onInterrupt, onStopSignals } from "../interrupt.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readHostMemoryBytes } from "../host/meminfo.js";
import { formatBytes } from "../units.js";
import { defaultWorkerId } from "../worker/plan.js";
import { alsoRollsBackText, queueRollbackCommand } from "../worker/served.js";
import { checkWeightsDir } from "../worker/weightsFile.js";
import { refuseLiveWorkerId, runWorker, type WorkerSummary } from "../worker/run.js";
import { cgroupFromEnv, resolveWorkerFlags, weightsDirOf, WORKER_CGROUP_ENV, WORKER_LIFELINE_ENV, type RawWorkerFlags } from "./worker.js";

/**
 * The cgroup as drill set it up (marker first), every dir present, this
 * worker's to join (refuseForeignJoin), not frozen and not with its OOM
 * killer disabled (a worker there would hang), or an error saying what to do.
 * `forced`: the drill that is up with it, joined anyway (--force).
 */
export function requireWorkerCgroup(
  globals: Pick<GlobalOptions, "procfs" | "sysfs" | "stateDir">,
  raw: { name?: string; parent?: string; force?: boolean },
  env: NodeJS.ProcessEnv = process.env,
): { roots: HostRoots; cgroup: WorkerCgroup; forced: UpHolder | null } {
  const { roots, cgroup: computed } = resolveCgroupTarget(globals, raw);
  const cgroup = requireSetUpCgroup(roots, computed, globals.stateDir, raw.parent);
  const forced = refuseForeignJoin(roots, computed, cgroup, globals.stateDir, { command: "worker", force: raw.force === true, runId: env.DRILL_RUN_ID });
  refuseFrozen(cgroup, { command: "worker", runId: env.DRILL_RUN_ID });
  refuseOomKillDisabled(cgroup, "worker");
  return { roots, cgroup, forced };
}

export interface SelfCommand {
  command: string;
  args: string[];
}

/** How to run this same `drill worker …` again: node, its flags, bin/drill.js and every argument. */
export function selfCommand(): SelfCommand {
  return { command: process.execPath, args: [...process.execArgv, ...process.argv.slice(1)] };
}

/**
 * Outside the cgroup: run the same command inside it and wait. Signals are
 * forwarded once; a second Ctrl-C SIGKILLs it (the operator's "now"), while
 * a SIGTERM or SIGHUP again is not passed on: a closed terminal and a
 * `timeout` both send theirs, and a kill mid give-back left the jobs in its
 * working list (QA). The inner worker gets a lifeline pipe
 * so it stops when this process dies; its exit code becomes ours.
 */
export async function launchInCgroup(cgroup: WorkerCgroup, self: SelfCommand, err: (line: string) => void, recovery: () => string, extraEnv: NodeJS.ProcessEnv = {}): Promise<number> {
  const oomBefore = readOomKillCount(cgroup.limits);
  const child: ChildProcess = spawnInCgroup(cgroup, self.command, self.args, {
    // Own process group: a terminal's Ctrl-C reaches us, and we forward it once.
    detached: true,
    stdio: ["ignore", "inherit", "inherit", "pipe"],
    env: { ...process.env, ...extraEnv, [WORKER_CGROUP_ENV]: JSON.stringify(cgroup), [WORKER_LIFELINE_ENV]: "3" },
  });
  const lifeline = child.stdio[3];
  lifeline?.on("error", () => {});
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error: Error | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal, error: null }));
    child.once("error", (error) => resolve({ code: null, signal: null, error }));
  });
  let forwarded = false;
  let stoppedBy: StopSignal | null = null;
  let killed = false;
  const stopForwarding = onStopSignals((signal) => {
    stoppedBy ??= signal;
    if (!forwarded) {
      forwarded = true;
      child.kill(signal);
    } else if (signal === "SIGINT") {
      killed = true;
      child.kill("SIGKILL");
    }
  });
  let result: Awaited<typeof exited>;
  try {
    result = await exited;
  } finally {
    stopForwarding();
    lifeline?.destroy();
  }
  if (result.error) throw new DrillError(`cannot start the worker inside ${cgroup.limits.dir}: ${result.error.message}`, undefined, { cause: result.error });
  if (result.code === JOIN_FAILED_EXIT) throw new DrillError(`the worker could not join ${cgroup.procsFiles.join(", ")} (exit ${JOIN_FAILED_EXIT}); it never ran`);
  if (result.code !== null) return result.code;
  // The stop we passed on: a worker still starting (no handler yet) dies of it, or of a second Ctrl-C's
  // SIGKILL. Exit as that stop does (130, 143, 129), not as a worker killed by someone else.
  if (stoppedBy !== null && (result.signal === stoppedBy || (killed && result.signal === "SIGKILL"))) {
    err(
      `drill: worker pid ${child.pid ?? "?"} stopped by the ${stoppedBy} passed on to it${killed ? " (then SIGKILL)" : ""} before it could stop by itself; ` +
        `what it took, if anything, ${recovery()}`,
    );
    return stopExitCode(stoppedBy);
  }
  const oomAfter = readOomKillCount(cgroup.limits);
  const oom = oomBefore.ok && oomAfter.ok ? ` (cgroup oom_kill ${oomBefore.value} → ${oomAfter.value})` : "";
  // As the hog's exit is judged (cgroup/hog.ts): a SIGKILL the cgroup did not count is not the OOM killer's.
  const rose = oomKillRose(oomBefore.ok ? oomBefore.value : null, oomAfter.ok ? oomAfter.value : null);
  const likely = result.signal !== "SIGKILL" ? "" : rose === true ? ": the OOM killer" : rose === false ? ": not the OOM killer (oom_kill unchanged): a teardown, rollback or kill -9" : ": likely the OOM killer, or someone's kill -9";
  err(
    `drill: worker pid ${child.pid ?? "?"} was killed by ${result.signal}${likely}${oom}; its working list ${recovery()}`,
  );
  return 1;
}

function printSummary(s: WorkerSummary, err: (line: string) => void): void {
  const avg = s.passes > 0 ? (s.passUsTotal / s.passes / 1000).toFixed(1) : "n/a";
  err(
    `worker ${s.workerId} stopped (${s.stoppedBy}): taken=${s.taken} done=${s.done} late=${s.late} dead=${s.dead} tokens=${s.tokensOut}` +
      ` passes=${s.passes} pass_ms_avg=${avg} given_back=${s.givenBackAtStop} recovered_at_start=${s.givenBackAtStart} recovered_from_peers=${s.recoveredFromPeers}`,
  );
}

/**
 * What becomes of a killed worker's jobs: the next worker of its id gives them
 * back, or a rollback drains them: its drill's (up starts workers with its
 * DRILL_RUN_ID), or, for one run by hand, the queue's (QA: a hand-run worker
 * was pointed at "the drill up that started it").
 */
export function workerRecovery(at: { stateDir: string; sysfs?: string; procfs?: string }, redisUrl: string, queue: string, workerId: string, env: NodeJS.ProcessEnv = process.env): string {
  if (env.DRILL_RUN_ID) return `is given back by the next worker with --worker-id ${workerId}, or drained by the rollback of the drill up that started it`;
  // Read when the worker is gone: the drills up in the state dir then, which that rollback would reach too.
  const rollback = queueRollbackCommand(at, redisUrl, queue);
  const quote = (command: string) => `\`${command}\``;
  return `is given back by the next worker with --worker-id ${workerId}, or drained by ${quote(rollback.command)}${alsoRollsBackText(rollback, quote)}${hiddenPasswordNoteAfter([redisUrl])}`;
}

/** Inside the cgroup: the loop itself. */
async function runInside(redisUrl: string, roots: HostRoots, cgroup: WorkerCgroup, options: ReturnType<typeof resolveWorkerFlags>): Promise<void> {
  const err = (line: string): void => writeErr(`${line}\n`);
  const interrupt = onInterrupt();
  const supervisor = new AbortController();
  let lifeline: net.Socket | null = null;
  const lifelineFd = Number(process.env[WORKER_LIFELINE_ENV]);
  if (Number.isInteger(lifelineFd) && lifelineFd > 2) {
    try {
      lifeline = new net.Socket({ fd: lifelineFd, readable: true, writable: false });
      const gone = (): void => supervisor.abort();
      lifeline.on("end", gone).on("close", gone).on("error", gone);
      lifeline.resume();
    } catch {
      lifeline = null; // not a pipe (run by hand with the variable set): no supervisor to watch
    }
  }
  let summary: WorkerSummary;
  try {
    summary = await runWorker(
      { ...options, workerId: options.workerId ?? defaultWorkerId(cgroup.name) },
      {
        redisUrl,
        roots,
        where: cgroup.limits.dir,
        // Under --json each line is a JSON document.
        out: (line) => (options.json ? writeDocument : writeOut)(`${line}\n`),
        err,
        signal: interrupt.signal,
        supervisorGone: supervisor.signal,
      },
    );
  } finally {
    interrupt.dispose();
    lifeline?.destroy();
  }
  printSummary(summary, err);
  const received = interrupt.received();
  if (received) throw new InterruptedError(received);
  // Stopped as on SIGTERM (exit 143), but nobody sent one: the log says who went away.
  if (summary.stoppedBy === "supervisor_gone") throw new DrillError("stopped: its launcher (`drill worker` outside the cgroup) is gone; unfinished jobs were given back", ExitCode.terminated);
}

export async function workerAction(g: GlobalOptions, raw: RawWorkerFlags): Promise<void> {
  const options = resolveWorkerFlags(raw, g.json, readHostMemoryBytes(hostRoots(g)));
  // Before the join: a bad --file-dir is the operator's to fix, not a worker that starts and dies inside.
  checkWeightsDir(options.weightsDir, options.config.weightsBytes, weightsDirOf(raw).flag);
  const passed = cgroupFromEnv(process.env[WORKER_CGROUP_ENV]);
  // Passed by the launcher, which judged the cgroup already.
  const { roots, cgroup, forced } = passed ? { roots: hostRoots(g), cgroup: passed, forced: null } : requireWorkerCgroup(g, raw);
  // Chosen once, by the launcher (the run inside gets it as DRILL_REDIS_URL, so it does not choose again).
  const redisUrl = await commandRedisUrl(g, { queue: options.queue, cgroupName: cgroup.name });
  const joined = verifyJoined(roots, process.pid, cgroup);
  if (joined.joined) {
    await runInside(redisUrl, roots, cgroup, options);
    return;
  }
  if (passed) throw new DrillError(`${WORKER_CGROUP_ENV} is set but this process is not in ${joined.outside.join(", ")}: refusing to run outside the cgroup`);
  const workerId = options.workerId ?? defaultWorkerId(cgroup.name);
  await refuseLiveWorkerId(redisUrl, options.queue, workerId, roots);
  if (forced) writeErr(`drill worker: ${forcedJoinWarning(forced, cgroup, "worker")}\n`);
  writeErr(`drill worker: joining ${cgroup.limits.dir} (weights ${formatBytes(options.config.weightsBytes)} in ${options.weightsDir})\n`);
  // The queue it serves, for the cgroup's teardown to name (its admission stays open when the worker is gone).
  recordServedQueue(g.stateDir, cgroup, options.queue, redisUrl);
  const code = await launchInCgroup(cgroup, selfCommand(), (line) => writeErr(`${line}\n`), () => workerRecovery(g, redisUrl, options.queue, workerId), { DRILL_REDIS_URL: redisUrl });
  if (code !== 0) process.exitCode = code;
}
