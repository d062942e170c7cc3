import { DrillError, RefusedError, RollbackIncompleteError, stopExitCode, UsageError } from "../errors.js";
import { writeErr } from "../closedStdout.js";
import { finishDespiteInterrupt } from "../interrupt.js";
import { drillCommandAt, drillCommandFor, rollbackAgain, shellWord, type GlobalOptions } from "../context.js";
import { consoleOutput, snakeCaseKeys, type Output } from "../output.js";
import { formatBytes, memoryMaxProblem, parseSize } from "../units.js";
import type { Limit } from "../cgroup/memoryFiles.js";
import { setupWorkerCgroup, type SetupResult } from "../cgroup/setup.js";
import { readCgroupStatus, type CgroupStatus } from "../cgroup/status.js";
import { validateParent } from "../cgroup/names.js";
import { requireParentDirs } from "../cgroup/paths.js";
import { resolveCgroupTarget } from "../cgroup/target.js";
import { absentCgroupNext } from "../cgroup/ready.js";
import { newTeardownProgress, RECORD_LEFT_ADVICE, taskLeft, taskNow, teardownWorkerCgroup, thawBeforeExit, type KilledTask, type RefusedTask, type TeardownMethod, type TeardownProgress, type TeardownResult, type TeardownStage } from "../cgroup/teardown.js";
import type { HostRoots } from "../host/kernelFile.js";
import type { SetupFlags, TargetFlags, TeardownFlags } from "./cgroup.js";
import { maskedQueues, queuesLeftOpenLines, readServedQueues } from "../worker/served.js";

export async function cgroupSetupAction(globals: GlobalOptions, flags: SetupFlags, output: Output = consoleOutput(globals.color)): Promise<SetupResult> {
  const memoryMax = parseSize(flags.memoryMax, "--memory-max");
  const swapMax = parseSize(flags.swapMax, "--swap-max");
  const problem = memoryMaxProblem(memoryMax);
  if (problem) throw new UsageError(`--memory-max: "${flags.memoryMax}" ${problem}`);
  const { roots, cgroup } = resolveCgroupTarget(globals, flags);
  requireParentDirs(cgroup, validateParent(flags.parent));
  const result = setupWorkerCgroup(roots, cgroup, globals.stateDir, { memoryMax, swapMax, memoryMaxGiven: flags.memoryMaxGiven === true });
  if (globals.json) output.json(snakeCaseKeys(result));
  else renderSetup(result, output);
  return result;
}

function renderSetup(result: SetupResult, output: Output): void {
  const { plan } = result;
  const verb = plan.ownership === "fresh" ? "created" : "updated (drill made it earlier)";
  output.out(`cgroup ${plan.cgroup.name} ${verb} on a ${plan.cgroup.layout} host`);
  for (const dir of plan.cgroup.dirs) {
    const role = dir === plan.cgroup.limits ? "limits" : "twin: PSI and cgroup.kill";
    output.out(`  ${result.created.includes(dir.dir) ? "mkdir " : "exists"} ${dir.dir} (${role})`);
  }
  for (const step of plan.steps) if (step.kind === "enable-memory") output.out(`  +memory  ${step.file}`);
  for (const write of result.writes) {
    // Set up again: what it was, when this setup changed it.
    const was = plan.ownership !== "fresh" && write.before !== null && write.before !== write.readBack ? `; was ${write.before}` : "";
    const back = write.skipped ? `skipped: ${write.skipped}` : `read back ${write.readBack ?? "unreadable"}${was}`;
    output.out(`  ${write.file} = ${write.wrote} (${back})`);
  }
  for (const warning of result.warnings) output.err(`warning: ${warning}`);
  for (const note of plan.notes) output.out(`note: ${note}`);
}

export async function cgroupStatusAction(globals: GlobalOptions, flags: TargetFlags, output: Output = consoleOutput(globals.color)): Promise<CgroupStatus> {
  const { roots, cgroup } = resolveCgroupTarget(globals, flags);
  const status = readCgroupStatus(roots, cgroup, globals.stateDir);
  if (globals.json) output.json(snakeCaseKeys(status));
  else renderStatus(status, output);
  if (!status.exists) {
    // As inject and worker say it: not set up (or the wrong --name/--parent) is exit 2.
    throw new UsageError(`cgroup ${status.name} does not exist (looked at ${status.dirs[0]?.dir ?? "?"}); ${absentCgroupNext(roots, cgroup, globals.stateDir, flags.parent)}`);
  }
  return status;
}

const limitText = (limit: Limit | null): string => (limit === null ? "n/a" : limit === "max" ? "max" : formatBytes(limit));
const countText = (n: number | null): string => (n === null ? "n/a" : String(n));

function renderStatus(status: CgroupStatus, output: Output): void {
  const owner = status.createdByDrill ? "created by drill" : "not created by drill";
  output.out(`cgroup ${status.name} (${status.layout}, ${status.exists ? owner : "absent"})`);
  for (const dir of status.dirs) output.out(`  ${dir.role.padEnd(6)} ${dir.dir}${dir.exists ? "" : " (absent)"}`);
  const m = status.memory;
  if (m) {
    const from = m.effectiveLimitDir && m.effectiveLimitDir !== m.dir ? ` from ${m.effectiveLimitDir}` : "";
    output.out(`  limit    ${limitText(m.limit)}  effective ${limitText(m.effectiveLimit)}${from}`);
    output.out(`  usage    ${formatBytes(m.usage)}  peak ${formatBytes(m.peak)}`);
    output.out(`  swap     limit ${limitText(m.swapLimit)}  current ${formatBytes(m.swapCurrent)}`);
    const events = m.version === 2
      ? `oom ${countText(m.events.oom)}  oom_kill ${countText(m.events.oomKill)}  max ${countText(m.events.max)}`
      : `oom_kill ${countText(m.events.oomKill)}  under_oom ${m.events.underOom === null ? "n/a" : m.events.underOom ? 1 : 0}  failcnt ${countText(m.events.failcnt)}`;
    output.out(`  events   ${events}`);
  }
  if (status.pressure) {
    const { some, full } = status.pressure;
    output.out(`  pressure some avg10=${some.avg10.toFixed(2)} total=${some.total}us` + (full ? `  full avg10=${full.avg10.toFixed(2)} total=${full.total}us` : ""));
  } else {
    const why = status.pressureFile === null ? " (no per-cgroup PSI on legacy v1)" : status.dirs.some((d) => !d.exists)
        ? status.createdByDrill
          ? " (twin absent: removed since drill cgroup setup made it; setup again makes it)"
          : " (twin absent: not created by drill cgroup setup)"
        : "";
    output.out(`  pressure n/a${why}`);
  }
  // A task in a child cgroup says where: teardown kills it with the rest.
  const own = new Set(status.dirs.map((d) => d.dir));
  const where = (dirs: string[]): string => (dirs.every((d) => own.has(d)) ? "" : ` (in ${dirs.filter((d) => !own.has(d)).join(", ")})`);
  const tasks = status.tasks === null ? "n/a" : status.tasks.length === 0 ? "none" : status.tasks.map((t) => `${t.pid} ${t.comm ?? "?"}${where(t.dirs)}`).join(", ");
  output.out(`  tasks    ${tasks}`);
  for (const miss of status.missing) output.err(`missing: ${miss.file}: ${miss.reason}`);
}

/** The teardown as typed, to paste: `drill` with its global flags, then the cgroup's. */
export function teardownCommand(drill: string, name: string, flags: Pick<TeardownFlags, "parent" | "force">): string {
  return `${drill} cgroup teardown --name ${shellWord(name)}${flags.parent === undefined ? "" : ` --parent ${shellWord(flags.parent)}`}${flags.force ? " --force" : ""}`;
}

export async function cgroupTeardownAction(globals: GlobalOptions, flags: TeardownFlags, output: Output = consoleOutput(globals.color)): Promise<TeardownResult> {
  const { roots, cgroup } = resolveCgroupTarget(globals, flags);
  // Stopped half-way, a teardown leaves tasks half killed and the cgroup in
  // place, frozen if it stopped during freeze → kill → thaw: as for rollback,
  // the first Ctrl-C only says so; a second one (or SIGTERM) thaws what it
  // froze and stops, naming where and the command that finishes it: on the
  // same tree (--sysfs, --procfs), state dir and cgroup, or it acts elsewhere.
  const drill = drillCommandFor(globals.stateDir, globals);
  const command = teardownCommand(drill, cgroup.name, flags);
  let stage: { stage: TeardownStage; name: string } | null = null;
  const progress = newTeardownProgress();
  const interrupts = finishDespiteInterrupt(
    `the teardown of cgroup ${cgroup.name}`,
    "half torn down",
    (signal) => {
      const { notes, stillFrozen } = thawBeforeExit("the teardown");
      const where = describeStage(stage, cgroup.name);
      // A script needs what was done and what is left most when the teardown did not finish (as rollback --json).
      if (globals.json) {
        const left = [...stillFrozen, `cgroup ${cgroup.name}: teardown interrupted by ${signal} ${where}; run ${command} again to finish it`];
        output.json(teardownDocument(roots, "interrupted", progress, left, { signal, cgroup: cgroup.name, stage: stage?.stage ?? null, stageCgroup: stage?.name ?? null, command }));
      } else {
        // What it already killed, removed and unlinked: the next run does not do it again, nor say it.
        for (const line of teardownDoneLines(progress, false)) output.out(line);
      }
      for (const note of notes) writeErr(`drill: ${note}\n`);
      writeErr(`drill: interrupted by ${signal} during the teardown of cgroup ${cgroup.name}, ${where}; run \`${command}\` again to finish it\n`);
      process.exit(stopExitCode(signal));
    },
  );
  let result: TeardownResult;
  try {
    result = await teardownWorkerCgroup(roots, cgroup, {
      stateDir: globals.stateDir,
      force: flags.force,
      progress,
      onStage: (s, name) => {
        stage = { stage: s, name };
      },
    });
  } catch (err) {
    // Refused, or not finished (tasks that would not leave, a dir busy): with --json a
    // script still gets what was done and what is left, as from rollback --json.
    if (globals.json && err instanceof DrillError) {
      output.json(teardownDocument(roots, err instanceof RefusedError ? "refused" : "failed", progress, [`cgroup ${cgroup.name}: ${err.message}`], null));
    } else if (!globals.json) {
      for (const line of teardownDoneLines(progress, false)) output.out(line);
    }
    throw err;
  } finally {
    interrupts.dispose();
  }
  if (result.kind === "removed" && result.forced) {
    // --force says so, as gate mode --force does: the drill is not over, only its cgroup.
    const { drill, runId, phase } = result.forced;
    output.err(
      `warning: --force: tore down cgroup ${cgroup.name}, the worker cgroup of drill ${drill} (run ${runId}), which was ${phase === null ? "maybe up (state unreadable)" : `up (${phase})`}: ` +
        `killed ${result.killed.length} of its tasks mid-drill. Run ${rollbackAgain(drillCommandAt(globals), {}, drill)} to stop the rest and drain its queue`,
    );
  }
  // A drill's worker (--force): its rollback, named above, closes and drains the queue.
  const { open: leftOpen, keyless } = result.kind === "removed" && !result.forced ? await readServedQueues(result.queuesServed, globals) : { open: [], keyless: [] };
  if (globals.json) {
    // Removed: every task it signalled, or could not, is out of the cgroup (gone with it).
    const served = result.kind === "removed" ? { ...teardownTasks(roots, progress, () => "gone"), queuesServed: maskedQueues(result.queuesServed), queuesLeftOpen: leftOpen } : {};
    output.json(snakeCaseKeys({ ...result, ...served, left: result.kind === "removed" ? result.left : [], interrupted: null }));
  } else if (result.kind === "nothing") {
    output.out(`cgroup ${cgroup.name}: nothing to tear down (no ${result.looked.join(", no ")})`);
  } else {
    for (const line of teardownDoneLines(result)) output.out(line);
    const recordsLeft = result.left.length > 0 ? `, but ${result.left.length === 1 ? "a record of it is" : "records of it are"} left (below)` : "";
    output.out(`cgroup ${cgroup.name} torn down${result.removed.length === 0 ? " (nothing was left)" : ""}${recordsLeft}`);
    for (const line of queuesLeftOpenLines(leftOpen, result.queuesServed, keyless)) output.out(line);
    if (result.queuesServedUnread !== null) output.out(`the queues its workers served go unnamed: ${result.queuesServedUnread}`);
  }
  // The cgroup is gone, a record of it is not: exit 4 naming it, after all the above (the queues left open above all).
  if (result.kind === "removed" && result.left.length > 0) throw new RollbackIncompleteError(`cgroup ${cgroup.name}: ${result.left.join("; ")}: ${RECORD_LEFT_ADVICE}`);
  return result;
}

/**
 * What a teardown did, one line each: all of it when it finished, as far as
 * it got when it did not. Unfinished, a task it signalled may still run (QA:
 * "killed" said of a stopped hog still there after the SIGTERM), or may have
 * exited (QA: "not seen to exit" said of every task): `now` says which
 * (taskNow), and the tasks this user may not signal are named with whose.
 */
export function teardownDoneLines(
  done: Pick<TeardownProgress, "killed" | "removed" | "alreadyGone" | "unlinked"> & { method: Iterable<TeardownMethod>; refused?: TeardownProgress["refused"] },
  finished = true,
  now: (task: KilledTask) => "inside" | "gone" | null = taskNow,
): string[] {
  const method = [...done.method];
  const fate = (task: KilledTask): string => {
    const where = now(task);
    return where === "inside" ? "still inside" : where === "gone" ? "exited (no longer in the cgroup)" : "not seen to exit (its cgroup.procs unreadable)";
  };
  const lines = done.killed.map((task) =>
    finished ? `killed ${task.pid} (${task.comm ?? "?"}) in ${task.dir}` : `signalled ${task.pid} (${task.comm ?? "?"}) in ${task.dir}${method.length > 0 ? ` (${method.join(", then ")})` : ""}; ${fate(task)}`,
  );
  if (!finished) for (const task of done.refused?.values() ?? []) lines.push(`not signalled ${task.pid} (${task.comm ?? "?"}) in ${task.dir}: ${task.why}; ${fate(task)}`);
  // SIGTERM first: what ended with it gave its jobs back and unlinked its files; the kill got the rest.
  if (finished && done.killed.length > 0 && method.length > 0) lines.push(`how: ${method.join(", then ")}`);
  for (const dir of done.removed) lines.push(`removed ${dir}`);
  for (const dir of done.alreadyGone) lines.push(`already gone ${dir}`);
  for (const file of done.unlinked) lines.push(`unlinked ${file}`);
  return lines;
}

/** Where a task a teardown signalled, or may not signal, is now, as `--json` says it (taskNow; null: its cgroup.procs unreadable). */
export type TaskOutcome = "exited" | "still_inside" | "unknown";

const outcomeOf = (now: "inside" | "gone" | null): TaskOutcome => (now === "inside" ? "still_inside" : now === "gone" ? "exited" : "unknown");

/**
 * The tasks of `drill --json cgroup teardown`'s document, as its done-so-far
 * lines say them (QA: an unfinished teardown's `killed` listed a task still
 * inside, and no field named the tasks it may not signal): `signalled`, each
 * task it signalled with its `outcome`; `killed`, those of them that left;
 * `refused`, each it may not signal, with whose it is (`why`) and its
 * `outcome`; `still_inside`, each of both still listed, marked as the error
 * marks it (taskLeft: stuck with its state, or not signalled).
 */
export function teardownTasks(
  roots: HostRoots,
  done: Pick<TeardownProgress, "killed" | "refused">,
  now: (task: KilledTask) => "inside" | "gone" | null = taskNow,
): { killed: KilledTask[]; signalled: Array<KilledTask & { outcome: TaskOutcome }>; refused: Array<RefusedTask & { outcome: TaskOutcome }>; stillInside: Array<KilledTask & ReturnType<typeof taskLeft>> } {
  const signalled = done.killed.map((task) => ({ ...task, outcome: outcomeOf(now(task)) }));
  const refused = [...done.refused.values()].map((task) => ({ ...task, outcome: outcomeOf(now(task)) }));
  return {
    killed: signalled.filter((t) => t.outcome === "exited").map(({ pid, comm, dir }) => ({ pid, comm, dir })),
    signalled,
    refused,
    stillInside: [...signalled, ...refused].filter((t) => t.outcome === "still_inside").map(({ pid, comm, dir }) => ({ pid, comm, dir, ...taskLeft(roots, pid, done.refused) })),
  };
}

/** Where a teardown stopped by a second Ctrl-C or SIGTERM was, and the command that finishes it. */
interface TeardownInterruption {
  signal: "SIGINT" | "SIGTERM";
  cgroup: string;
  /** The stage it was in; null before it signalled any task. */
  stage: TeardownStage | null;
  /** The cgroup that stage was in: `cgroup`, or one set up inside it (torn down first). */
  stageCgroup: string | null;
  command: string;
}

/**
 * `drill --json cgroup teardown`'s document when it did not finish: the fields
 * of a finished one, as far as it got (its tasks as teardownTasks says them:
 * `killed` only those that left), `kind` "interrupted" (a second Ctrl-C
 * or SIGTERM), "refused" or "failed", and, as rollback's, `left` and
 * `interrupted` (null but when interrupted).
 */
export function teardownDocument(roots: HostRoots, kind: "interrupted" | "refused" | "failed", progress: TeardownProgress, left: string[], interrupted: TeardownInterruption | null) {
  const { killed, signalled, refused, stillInside } = teardownTasks(roots, progress);
  return snakeCaseKeys({
    kind,
    removed: progress.removed,
    alreadyGone: progress.alreadyGone,
    killed,
    signalled,
    refused,
    stillInside,
    unlinked: progress.unlinked,
    method: [...progress.method],
    forced: progress.forced,
    queuesServed: maskedQueues(progress.queuesServed),
    left,
    interrupted,
  });
}

/** Where an interrupted teardown stopped; `name` differs from `top` for a drill cgroup set up inside it (torn down first). */
function describeStage(at: { stage: TeardownStage; name: string } | null, top: string): string {
  if (at === null) return "before it signalled any task";
  const which = at.name === top ? "it" : `cgroup ${at.name} (set up inside it)`;
  switch (at.stage) {
    case "sigterm":
      return `while waiting for the tasks in ${which} to exit on drill's SIGTERM`;
    case "kill":
      return `while killing the tasks left in ${which}`;
    case "remove":
      return `while removing the directories of ${which}, its tasks killed`;
  }
}
