import { existsSync } from "node:fs";
import path from "node:path";
import { writeErr } from "../closedStdout.js";
import { commandRedis, DEFAULT_REDIS_URL, drillCommandAt, hiddenPasswordNote, hostRoots, leverCommand, printedRedis, queueReportRedis, redactUrl, reportAgain, reportQueueAgain, rollbackAgain, shellWord, type GlobalOptions } from "../context.js";
import { describeRunningDrill, drillRollbackCommand, drillsUpOnQueue, foundNoKeys, rollbackDrill, rollbackHint, redrainQueue, rollbackQueue, rollbackStandaloneCgroups, scanRunningDrills, unknownDrillProblem, type CgroupRollback, type DrillRollback, type QueueRollback, type RunningDrill } from "../drill/rollback.js";
import { sameRedis } from "../queue/redis.js";
import { validateDrillName } from "../drill/names.js";
import { stopStartingUps, type StartingUp } from "../drill/startingUp.js";
import { queueKeys } from "../queue/keys.js";
import { refusalHint } from "../queue/refusal.js";
import { holdsState, listDrills, readState, readStateEntries } from "../drill/state.js";
import { RollbackIncompleteError, stopExitCode, UsageError } from "../errors.js";
import { thawBeforeExit } from "../cgroup/teardown.js";
import { stopRestartedBeforeExit } from "../drill/embeddedRedis.js";
import { finishDespiteInterrupt } from "../interrupt.js";
import { consoleOutput, snakeCaseKeys } from "../output.js";
import { distinctQueues, maskedQueues, queuesLeftOpenLines, readServedQueues, type QueueLeftOpen, type ServedQueue } from "../worker/served.js";
import type { RollbackFlags } from "./rollback.js";

/**
 * The command that finishes an interrupted rollback: the drill it was in, or,
 * before or past the drills, the rollback as asked (a plain `rollback` after `--name X`
 * would reach every drill in the state dir). `--queue` is kept either way: its
 * re-drain runs last.
 */
export function interruptedRerun(rerunCmd: string, asked: { name: string | undefined; queue: string | undefined; queueOnly?: boolean }, current: { name: string; before?: true; cgroups?: true }): string {
  return rollbackAgain(rerunCmd, asked, current.cgroups || current.before ? undefined : current.name);
}

export async function rollbackAction(g: GlobalOptions, flags: RollbackFlags): Promise<void> {
  const output = consoleOutput(g.color);
  const queueOnly = queueOnlyAsked(flags);
  // `--name ""` is not "every drill", and `../other/smoke` is not under --state-dir.
  const named = flags.name === undefined ? undefined : validateDrillName(flags.name);
  let startingUps: StartingUp[] = [];
  const queues: QueueRollback[] = [];
  let queueUrl = g.redisUrl ?? DEFAULT_REDIS_URL;
  // Read once the ups still starting are stopped: what they recorded is rolled back too.
  let names: string[] = [];
  const results: DrillRollback[] = [];
  /** Cgroups `drill cgroup setup` made outside any drill, and what ran in them. */
  let cgroups: CgroupRollback[] = [];
  /** Drills an earlier rollback completed, or their up closed: nothing to do (RELIABILITY 8). */
  const complete: Array<{ name: string; completed_at: string | null }> = [];
  /** Of those, the ones whose up closed them having started nothing: never rolled back, never needed it. */
  const closedByUp = new Set<string>();
  // Stopped half-way, a rollback leaves the host half rolled back: the first
  // Ctrl-C only says so; a second one (or SIGTERM) stops, naming where and
  // the command that finishes it: on the same tree, state dir and Redis.
  const rerunCmd = drillCommandAt(g);
  /** This rollback again, as asked (--queue kept), for `drill` when about one. */
  const asked = { name: named, queue: flags.queue, queueOnly };
  const again = (drill?: string): string => rollbackAgain(rerunCmd, asked, drill);
  // A step taking seconds says how far it got, under its step's column; under --json on stderr, as up's log lines.
  const progress = (line: string): void => (g.json ? output.err(line) : output.out(`  ...  ${line}`));
  // A drill's report reads its own Redis or export: a --redis given here (an embedded one, stopped now) would fail it.
  const drillCmd = drillCommandAt({ ...g, redisUrl: undefined });
  // name "" with before: the ups still starting and --queue, ahead of the drills; with cgroups: the
  // cgroups of drill cgroup setup, rolled back after every drill.
  let current: { name: string; lastStep: string; result: DrillRollback | null; before?: true; cgroups?: true } = { name: "", lastStep: "", result: null, before: true };
  const interrupts = finishDespiteInterrupt(
    "the rollback",
    "half done",
    (signal) => {
      // Stopping is the operator's choice; a cgroup left frozen is not (its tasks stay stopped for good).
      const { notes: thawNotes, stillFrozen } = thawBeforeExit("the rollback");
      // A Redis this rollback restarted with nothing to end it: stopped with it (its jobs stay in its AOF).
      const stopNotes = [...thawNotes, ...stopRestartedBeforeExit(hostRoots(g))];
      const afterStep = current.lastStep === "" ? null : current.lastStep;
      const where = afterStep === null ? "before its first step" : `after step "${afterStep}"`;
      const command = interruptedRerun(rerunCmd, asked, current);
      const what = current.cgroups ? "the cgroups drill cgroup setup made" : current.before ? (flags.queue !== undefined ? `queue ${flags.queue} (--queue)` : "the ups still starting") : current.name;
      // A script needs the steps done and what is left most when the rollback did not finish.
      if (g.json) {
        const drills = current.result === null || results.includes(current.result) ? results : [...results, current.result];
        const notStarted = current.cgroups || current.before ? [] : names.slice(names.indexOf(current.name) + 1);
        const left = [
          ...leftOf(drills),
          ...stillFrozen,
          `${what}: rollback interrupted by ${signal} ${where}; run ${command} again to finish it`,
          ...notStarted.map((name) => `${name}: not rolled back (interrupted before it); run ${again(name)}`),
        ];
        output.json(rollbackDocument(drills, complete, cgroups, [], left, { signal, drill: current.name, after_step: afterStep, command }, startingUps, queues));
      }
      for (const note of stopNotes) writeErr(`drill: ${note}\n`);
      writeErr(`drill: interrupted by ${signal} during the rollback of ${what} ${where}; run \`${command}\` again to finish it\n`);
      process.exit(stopExitCode(signal));
    },
  );
  try {
    // Unreadable is not "nothing here", and not a failure of the command either: drill makes its state dir 0700,
    // so a non-root shell beside root's drills sees none of them (QA AE: exit 1 and no --json document).
    // What is left is all of it: named, with the drills the host scan can see, exit 4.
    const unlistable = stateDirUnlistable(g.stateDir);
    if (unlistable !== null) {
      const scan = scanRunningDrills(hostRoots(g), named);
      const unseen = process.geteuid?.() === 0 ? 0 : scan.unreadable;
      const left = [`${unlistable}: nothing in it rolled back`, ...scan.running.map((r) => `${describeRunningDrill(r)}; ${rollbackHint(r)}`)];
      if (g.json) output.json(rollbackDocument([], [], [], scan.running, left, null, [], [], [], unseen));
      else {
        output.out(`nothing rolled back: ${unlistable}`);
        for (const r of scan.running) output.out(`  ${describeRunningDrill(r)}\n    ${rollbackHint(r)}`);
        if (unseen > 0) output.out(`  and ${unseenProcesses(unseen)}`);
      }
      throw new RollbackIncompleteError(`rollback incomplete; left: ${left.join("; ")}`);
    }
    // An up still starting (no state of its run yet) first: then what it recorded is rolled back below.
    if (!queueOnly) startingUps = await stopStartingUps(hostRoots(g), g.stateDir, named);
    if (!g.json) for (const up of startingUps) output.out(describeStartingUp(up));
    // --queue: the step-by-step path's queue, deny-all first as in every rollback (a drill's own is its rollback's).
    if (flags.queue !== undefined) {
      const queueName = queueKeys(flags.queue).queue;
      // As every queue command finds it: the Redis of a drill up here on that queue, the default only when none
      // is up here (QA T 1: 6379 whatever was up, so the drill's queue was left admitting and another flipped).
      const chosen = await commandRedis(g, { queue: queueName });
      queueUrl = chosen.url;
      const url = queueUrl;
      const owner = drillOnQueue(g.stateDir, queueName, url);
      // The default Redis only because no drill is up here: a drill up from another state dir on this
      // queue is what the operator means (QA S re-check 1: 6379 flipped, exit 0, the drill's queue admitting).
      const elsewhere = g.redisUrl === undefined && chosen.drills.length === 0 ? drillsUpOnQueue(hostRoots(g), queueName) : [];
      // A drill's queue this rollback does not reach: nothing flipped or drained, each drill's own rollback named (exit 4).
      const notHere = (refusals: Array<{ detail: string; left: string }>): void => {
        const q: QueueRollback = { queue: queueName, url: redactUrl(url), steps: refusals.map((r) => ({ step: "deny-all", ok: false, detail: r.detail })), drainLength: null, left: refusals.map((r) => r.left) };
        if (!g.json) {
          output.out(`rollback queue ${queueName} (--queue):`);
          for (const step of q.steps) output.out(`  ${output.color.red("FAIL")} ${step.step}: ${step.detail}`);
        }
        queues.push(q);
      };
      if (elsewhere.length > 0) {
        notHere(
          elsewhere.map((d) => {
            const why = `queue ${queueName} is drill ${d.drill}'s (run ${d.runId}, state dir ${d.stateDir}, redis ${redactUrl(d.url)}), up from another state dir: its own rollback drains it`;
            return {
              detail: `not done on ${redactUrl(url)} (the default, no drill being up in ${g.stateDir}): ${why}`,
              left: `${why}; run that: ${drillRollbackCommand(d.stateDir, d.drill)} (or give --redis to roll back a queue of that name on another Redis)`,
            };
          }),
        );
      } else if (owner !== null && (queueOnly || (named !== undefined && named !== owner))) {
        // QA re-check 7: "rolled back with it below" while --name picked another drill: the queue was rolled back by nothing.
        const why = `queue ${queueName} on ${redactUrl(url)} is drill ${owner}'s, which ${queueOnly ? "--queue-only" : `--name ${named}`} leaves out: its own rollback drains it`;
        notHere([{ detail: `not done: ${why}`, left: `${why}; run that: ${rollbackAgain(rerunCmd, {}, owner)}` }]);
      } else if (owner !== null) {
        if (!g.json) output.out(`queue ${queueName} on ${redactUrl(url)}: drill ${owner}'s queue, rolled back with it below`);
      } else {
        const alone = `--queue-only: no drill or cgroup setup cgroup of ${g.stateDir} touched; a gate or worker run by hand keeps running`;
        if (!g.json) output.out(`rollback queue ${queueName} on ${redactUrl(url)} (${queueOnly ? alone : "--queue; a gate or worker run by hand keeps running, unless in a cgroup setup cgroup, torn down below"}):`);
        queues.push(await rollbackQueue(url, queueName, again(), hostRoots(g), (step) => {
          current.lastStep = step.step;
          if (!g.json) output.out(`  ${step.ok ? "ok  " : output.color.red("FAIL")} ${step.step}: ${step.detail}`);
        }, progress));
      }
    }
    names = queueOnly ? [] : named === undefined ? listDrills(g.stateDir) : holdsState(g.stateDir, named) ? [named] : [];
    for (const name of names) {
      current = { name, lastStep: "", result: null };
      await rollbackOne(name);
    }
    current = { name: "", lastStep: "", result: null, cgroups: true };
    if (!queueOnly) cgroups = await rollbackStandaloneCgroups(hostRoots(g), g.stateDir, named);
    if (!g.json) {
      for (const [i, c] of cgroups.entries()) {
        // A record dir it cannot list names no cgroup: one header for them all, not "cgroup ?" per dir (QA).
        const header =
          c.step.step === "read records"
            ? cgroups[i - 1]?.step.step === "read records" ? null : `rollback the records in ${g.stateDir} of drill cgroup setup and inject --detach (in no drill):`
            : c.step.step === "stop hog"
              ? `rollback hog of cgroup ${c.name} (drill inject --detach recorded here, in no drill):`
              : c.step.step === "read record"
                ? `rollback record of cgroup ${c.name} (a drill cgroup setup or inject --detach record here):`
                : `rollback cgroup ${c.name} (made by drill cgroup setup, in no drill):`;
        if (header !== null) output.out(header);
        output.out(`  ${c.step.ok ? "ok  " : output.color.red("FAIL")} ${c.step.step}: ${c.step.detail}`);
      }
    }
    // Workers stopped with those cgroups gave their jobs back to admitted: the queue's lists once more.
    for (const q of queues) {
      if (!g.json && q.left.length === 0) output.out(`rollback queue ${q.queue} (--queue), what nothing holds now:`);
      await redrainQueue(q, queueUrl, again(), hostRoots(g), (step) => {
        if (!g.json) output.out(`  ${step.ok ? "ok  " : output.color.red("FAIL")} ${step.step}: ${step.detail}`);
      }, progress);
    }
  } finally {
    interrupts.dispose();
  }
  async function rollbackOne(name: string): Promise<void> {
    if (!g.json) output.out(`rollback ${name}:`);
    const outcome = await rollbackDrill(name, {
      roots: hostRoots(g),
      stateDir: g.stateDir,
      redisUrl: g.redisUrl,
      redisTyped: g.redisTyped,
      again: again(name),
      crashAt: process.env.DRILL_CRASH_AT,
      progress,
      onStart: (result) => {
        current.result = result;
      },
      log: (step) => {
        current.lastStep = step.step;
        if (!g.json) output.out(`  ${step.ok ? "ok  " : output.color.red("FAIL")} ${step.step}: ${step.detail}`);
      },
    });
    if (outcome.kind === "rolled_back" || outcome.kind === "unreadable") results.push(outcome.result);
    else if (outcome.kind === "complete") {
      complete.push({ name, completed_at: outcome.completedAt });
      if (outcome.closedByUp) closedByUp.add(name);
      if (!g.json) {
        const at = outcome.completedAt ? ` at ${outcome.completedAt}` : "";
        // QA: "already rolled back" of a run no rollback ever touched: its up failed before starting anything.
        output.out(
          outcome.closedByUp
            ? `  nothing to roll back: its drill up ended${at} before it started anything (no Redis, process or cgroup)`
            : `  already rolled back (complete${outcome.completedAt ? ` since ${outcome.completedAt}` : ""}): nothing to do`,
        );
      }
    } else if (!g.json) output.out(`  no state of drill ${name} in ${g.stateDir} any more: nothing to do`);
  }
  // Nothing here is not nothing on the host: a wrong --state-dir (or sudo
  // dropping DRILL_STATE_DIR) must not pass a running drill for rolled back.
  // Only a rollback with nothing to do here looks for others' drills (README): one that did its work is not undone by them (QA).
  const scan = results.length === 0 && cgroups.length === 0 && queues.length === 0 ? scanRunningDrills(hostRoots(g), named) : { running: [], unreadable: 0 };
  const running = scan.running;
  // Root reads every environ but those the kernel keeps from root too (a container's outer init), no drill's:
  // unseen are other users' processes, for a rollback that is not root.
  const unseen = process.geteuid?.() === 0 ? 0 : scan.unreadable;
  // The drill here is rolled back (complete): a run of the same name up from another state dir is
  // another operator's drill, said but not this rollback's failure (QA: a second rollback exited 4
  // naming it, breaking "rollback again exits 0"). With nothing here at all, it may be the drill
  // the operator means under a wrong --state-dir: that stays exit 4.
  // So does a state dir whose cgroup setup cgroups are torn down (its cgroups/ record dir, which setup and up
  // make, is left): the step-by-step path's rollback run again (QA: exit 4). --name asks for one drill: not here, a wrong --state-dir.
  const rolledBackHere = complete.length > 0 || (named === undefined && existsSync(path.join(g.stateDir, "cgroups")));
  const otherStateDirs = (r: RunningDrill): boolean => rolledBackHere && r.stateDir !== null && path.resolve(r.stateDir) !== path.resolve(g.stateDir);
  /** --name that matched nothing beside a --queue this rollback did act on: said, not a usage error. */
  let unmatchedName: string | null = null;
  // An up of that name still starting (stopped, or refused) is the drill asked for, not a wrong name.
  if (named !== undefined && names.length === 0 && running.length === 0 && cgroups.length === 0 && startingUps.length === 0) {
    // A name that is no drill here, beside drills that are: a wrong name (often
    // up's --name, the worker cgroup), not "nothing to roll back" (exit 2, like report).
    const others = readStateEntries(g.stateDir, listDrills(g.stateDir));
    const problem = others.length > 0 ? unknownDrillProblem(named, g.stateDir, others, rerunCmd) : null;
    // With --queue the queue was acted on already, and a cgroup setup cgroup of that name an earlier run tore down
    // leaves no trace: exit 2 there said "nothing touched" after the deny-all, and the rerun drill prints would exit 2 for ever (RELIABILITY 8).
    if (problem !== null && queues.length === 0) throw new UsageError(problem);
    if (problem !== null) unmatchedName = `only --queue ${flags.queue} acted on (no cgroup setup cgroup ${named} in ${g.stateDir} either: torn down by an earlier rollback, or another name); ${problem}`;
  }
  const rolledBackBefore = complete.filter((c) => !closedByUp.has(c.name)).map((c) => c.name);
  const neverStarted = complete.filter((c) => closedByUp.has(c.name)).map((c) => c.name);
  const completeHere = [
    rolledBackBefore.length > 0 ? `${rolledBackBefore.join(", ")} already rolled back (complete)` : null,
    ...neverStarted.map((n) => `${n}'s drill up started nothing`),
  ].filter((c) => c !== null);
  const nothingHere = named !== undefined && names.length === 0 ? `no drill ${named}` : completeHere.length > 0 ? completeHere.join("; ") : "no drill";
  const left = [
    ...queues.flatMap((q) => q.left),
    ...startingUps.flatMap((u) =>
      u.outcome === "alive" ? [`${u.name}: drill up pid ${u.pid} was starting and survived SIGKILL; stop it, then run ${again(u.name)}`]
      : u.outcome === "refused" ? [`${u.name}: ${u.problem}`]
      : [],
    ),
    ...leftOf(results),
    ...cgroups.filter((c) => !c.step.ok).map((c) => (c.step.step === "read records" ? c.step.detail : `cgroup ${c.name}: ${c.step.detail}`)),
    ...running.filter((r) => !otherStateDirs(r)).map((r) => `${describeRunningDrill(r)}; ${rollbackHint(r)}`),
  ];
  // Read once the cgroups are torn down and --queue's rollback is done: a lever it pulled is closed.
  const served = servedNotClosed(cgroups, queues);
  const { open: leftOpen, keyless } = await readServedQueues(served, g);
  if (g.json) {
    output.json(rollbackDocument(results, complete, cgroups, running, left, null, startingUps, queues, leftOpen, unseen));
  } else if (running.length > 0) {
    // QA: "not rolled back: smoke already rolled back (complete)" read as a contradiction; what is not rolled back is what runs elsewhere.
    output.out(
      running.every(otherStateDirs)
        ? `nothing to do in ${g.stateDir} (${nothingHere}); up from another state dir, not this rollback's to undo:`
        : `nothing to do in ${g.stateDir} (${nothingHere}), but drill processes this rollback does not reach run on this host:`,
    );
    for (const r of running) {
      output.out(`  ${describeRunningDrill(r)}`);
      output.out(`    ${r.stateDir !== null && !r.complete && !r.stateMissing ? "roll it back: " : ""}${rollbackHint(r)}`);
    }
    if (unseen > 0) output.out(`  and ${unseenProcesses(unseen)}`);
  } else if (results.length === 0 && cgroups.length === 0 && startingUps.length === 0 && queues.length === 0) {
    output.out(nothingToRollBackLine(`${nothingHere} in ${g.stateDir}`, named, unseen));
  }
  if (unmatchedName !== null) (g.json ? output.err : output.out)(unmatchedName);
  if (!g.json && running.length === 0) for (const q of queues) queueClosingLines(q, queueUrl, again(), g).forEach((line) => output.out(line));
  if (!g.json) for (const line of queuesLeftOpenLines(leftOpen, served, keyless)) output.out(line);
  // A starting up this user may not signal (root's): its drill is not rolled back, and only root can finish it.
  const upsRefused = new Set(startingUps.filter((u) => u.outcome === "refused" && u.pid !== null).map((u) => u.name));
  if (!g.json && running.length === 0 && (results.length > 0 || upsRefused.size > 0)) {
    for (const r of results) {
      const drain = r.runId === null ? "state unreadable, nothing rolled back" : r.drainLength !== null ? `LLEN ${r.drainLength} in the drain` : r.left.some((l) => l.startsWith("drain pending")) ? "drain pending" : "no queue to drain";
      output.out(`${r.name}: ${drain}${r.exported ? `; keys exported to ${r.exported}` : ""}`);
    }
    // Re-admitting is the rollback's last step (the runbook's serving path): a
    // drill whose deny-all or drain did not happen gets the rollback to run
    // again, not a re-admit on top of jobs still waiting to drain.
    const finished = results.filter((r) => r.left.length === 0 && !upsRefused.has(r.name));
    const unfinished = [
      ...results.filter((r) => !finished.includes(r)).map((r) => ({ name: r.name, asRoot: refusedThisUser(r) || upsRefused.has(r.name) })),
      ...[...upsRefused].filter((name) => !results.some((r) => r.name === name)).map((name) => ({ name, asRoot: true })),
    ];
    // The Redis URLs the commands below name (--redis, a drill's own): one with a password is printed masked.
    const named: Array<string | undefined> = [];
    if (unfinished.length > 0) {
      output.out("Not rolled back yet: admission stays as it is; run the rollback again once what is left above is fixed:");
      for (const r of unfinished) output.out(`  ${r.asRoot ? "as root: " : ""}${again(r.name)}`);
      named.push(printedRedis(g));
    }
    if (finished.length > 0) {
      const hints = finished.map((r) => readmitHint(r, g));
      // QA: the PSI condition above "nothing to re-admit" (an embedded Redis, stopped) read as a step to take.
      if (hints.some((h) => h.readmit)) output.out(READMIT_HINT);
      for (const h of hints) output.out(`  ${h.line}`);
      named.push(...hints.map((h) => h.url));
      // The runbook's last word: the reject summary for the incident notes (report reads the export once Redis is gone).
      output.out("For the incident notes:");
      for (const r of finished) output.out(`  ${reportAgain(drillCmd, r.name, { format: "md" })}`);
    }
    passwordNoteLines(named).forEach((line) => output.out(line));
  }
  if (left.length > 0) throw new RollbackIncompleteError(`rollback incomplete; left: ${left.join("; ")}`);
}

/**
 * --queue-only, checked before anything is touched: it needs the queue, and
 * rolls back no drill, so a --name (a drill, or a cgroup setup cgroup) is one
 * or the other, not both.
 */
export function queueOnlyAsked(flags: RollbackFlags): boolean {
  if (!flags.queueOnly) return false;
  if (flags.queue === undefined) throw new UsageError("--queue-only: no --queue given; it rolls back the queue given with --queue <name> alone (add --queue <name>, or drop --queue-only)");
  if (flags.name !== undefined) {
    throw new UsageError(
      `--queue-only with --name ${shellWord(flags.name)}: --queue-only touches no drill or cgroup of the state dir, --name rolls one back; for the queue alone drop --name, for ${shellWord(flags.name)} and the queue drop --queue-only`,
    );
  }
  return true;
}

/**
 * A step the kernel refused this user (EACCES, EPERM: its FAIL line says to run as root): run again
 * as the same user, it is refused again. Root refused is a mount or policy, said in its line.
 */
function refusedThisUser(r: DrillRollback): boolean {
  return process.geteuid?.() !== 0 && r.steps.some((s) => !s.ok && /\b(EACCES|EPERM)\b/.test(s.detail));
}

/** Why the state dir cannot be listed (EACCES, EPERM: another user's), or null: listed, or absent (nothing there). */
function stateDirUnlistable(stateDir: string): string | null {
  try {
    listDrills(stateDir);
    return null;
  } catch (err) {
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    if (code === "EACCES" || code === "EPERM") return (err as Error).message;
    throw err;
  }
}

/**
 * The line of a rollback with nothing to do: nothing here (`here`), and no
 * drill process on the host, or, when the host scan could not read
 * `unreadable` processes' environment (not root), none among those it could
 * read: "none on this host" would send the operator away with another user's
 * drill up (QA).
 */
export function nothingToRollBackLine(here: string, named: string | undefined, unreadable: number): string {
  // A hand-run gate or watch is no drill's: "no drill process" read false beside them (QA).
  const what = named !== undefined ? `no process of drill ${named}` : "no process of a drill up";
  if (unreadable === 0) return `nothing to roll back: ${here}, and ${what} on this host`;
  return `nothing to roll back: ${here}, and ${what} among the processes this user can look at; ${unseenProcesses(unreadable)}`;
}

function unseenProcesses(unreadable: number): string {
  return `could not look at ${unreadable} process${unreadable === 1 ? "" : "es"} of other users (only root may read their environment, where a drill's run id is): run as root to see drills of other users`;
}

/** Where a rollback stopped by a second Ctrl-C or SIGTERM was, and the command that finishes it. */
interface Interruption {
  signal: "SIGINT" | "SIGTERM";
  drill: string;
  /** The last step it logged; null when it stopped before its first. */
  after_step: string | null;
  command: string;
}

/** `drill --json rollback`'s one document, finished or interrupted (then `interrupted` says where). */
function rollbackDocument(
  drills: DrillRollback[],
  complete: Array<{ name: string; completed_at: string | null }>,
  cgroups: CgroupRollback[],
  running: RunningDrill[],
  left: string[],
  interrupted: Interruption | null,
  startingUps: StartingUp[] = [],
  queues: QueueRollback[] = [],
  leftOpen: QueueLeftOpen[] = [],
  unseenProcesses = 0,
) {
  return snakeCaseKeys({
    drills,
    complete,
    // The URLs as given carry the password: printed masked, as every URL.
    cgroups: cgroups.map((c) => ({ ...c, queuesServed: maskedQueues(c.queuesServed) })),
    startingUps,
    queues,
    // Something left (a state dir it could not read) is not nothing to roll back.
    nothing_to_roll_back: drills.length === 0 && cgroups.length === 0 && running.length === 0 && startingUps.length === 0 && queues.length === 0 && interrupted === null && left.length === 0,
    running: running.map((r) => ({ ...r, hint: rollbackHint(r) })),
    queuesLeftOpen: leftOpen,
    // Processes of other users whose environment a non-root rollback could not read: drills among them are not in `running`.
    unseenProcesses,
    left,
    interrupted,
  });
}

/**
 * The queues hand-run workers served in the cgroups torn down, but for those
 * this rollback's --queue closed and drained (their jobs are in its drain).
 */
export function servedNotClosed(cgroups: readonly CgroupRollback[], queues: readonly QueueRollback[]): ServedQueue[] {
  const closed = (q: ServedQueue) => queues.some((r) => r.queue === q.queue && r.url === redactUrl(q.url));
  return distinctQueues(cgroups.flatMap((c) => c.queuesServed)).filter((q) => !closed(q));
}

/** A drill of the state dir, not rolled back yet, whose queue this is on this Redis; null: none. */
function drillOnQueue(stateDir: string, queue: string, url: string): string | null {
  for (const entry of readStateEntries(stateDir, listDrills(stateDir))) {
    // One server spelled two ways is one (QA: `localhost` or `?db=3` given, the drill's queue was refused as another's, exit 4).
    if ("state" in entry && entry.state.phase !== "complete" && entry.state.queue === queue && sameRedis(entry.state.redis.url, url)) return entry.name;
  }
  return null;
}

// gate mode admit refuses unless both avg10 and avg60 are under 1.00: the hint names both.
const READMIT_HINT = "Re-enable admission only once PSI avg10 and avg60 both stay under 1.00 (gate mode admit refuses otherwise):";

/** hiddenPasswordNote as lines: none, or the one. */
function passwordNoteLines(urls: ReadonlyArray<string | undefined>): string[] {
  const note = hiddenPasswordNote(urls);
  return note === null ? [] : [note];
}

/** After a queue's rollback on `url`: its drain, then the rollback again (`again`) or the re-admit and the report, as for a drill, on the state dir and tree of `at`. */
export function queueClosingLines(q: QueueRollback, url: string, again: string, at: GlobalOptions): string[] {
  const lines = [`queue ${q.queue}: ${q.drainLength === null ? "drain pending" : `LLEN ${q.drainLength} in ${queueKeys(q.queue).drain}`}`];
  if (q.left.length > 0) {
    // A Redis that answered with a refusal (full, a replica, an ACL) refuses the next rollback too: its fix, not a wait.
    const refused = q.left.map(refusalHint).find((hint) => hint !== null);
    if (q.left.some((l) => l.includes("its own rollback drains it"))) return [...lines, "Not rolled back here: it is a drill's queue; run that drill's rollback, named above"];
    const once = q.left.some((l) => l.includes(" held by ")) ? "the gate or worker holding its jobs has stopped" : refused ? `its Redis takes these commands: ${refused}` : "its Redis answers";
    return [...lines, `Not rolled back yet: run ${again} once ${once}`, ...passwordNoteLines([printedRedis(at)])];
  }
  // QA: "Re-enable admission" for a queue whose Redis held no key of it: this rollback closed nothing there.
  if (foundNoKeys(q)) return [...lines, `Nothing to re-admit: ${q.url} held no key of queue ${q.queue} when this rollback looked, so it set no lever there`];
  return [
    ...lines,
    READMIT_HINT,
    `  ${leverCommand(url, q.queue, "admit", at)}`,
    "For the incident notes:",
    `  ${reportQueueAgain(drillCommandAt({ ...at, redisUrl: undefined }), q.queue, queueReportRedis(at, url))}`,
    ...passwordNoteLines([url, printedRedis(at)]),
  ];
}

/** The line for an up stopped while it started: what it recorded by then, if anything, was rolled back after it. */
function describeStartingUp(up: StartingUp): string {
  if (up.outcome === "refused") return `drill up of ${up.name}: its lock not acted on (no up stopped): ${up.problem}`;
  const how = up.outcome === "alive" ? "still alive after SIGKILL" : up.outcome === "gone" ? "gone before the signal" : up.outcome;
  return `drill up of ${up.name} (pid ${up.pid}) was starting, no run of it recorded yet: ${how}`;
}

function leftOf(drills: DrillRollback[]): string[] {
  return drills.flatMap((r) => r.left.map((l) => `${r.name}: ${l}`));
}

/** Where to re-admit: the drill's own Redis, named (it is rolled back, so no command finds it in the state dir any more); `readmit` false when there is nothing to re-admit on. */
function readmitHint(r: DrillRollback, g: GlobalOptions): { line: string; readmit: boolean; url?: string } {
  let state;
  try {
    state = readState(g.stateDir, r.name);
  } catch {
    state = null;
  }
  // The Redis the rollback used: the drill's own (a --redis naming another was left alone), or where it moved (recorded then).
  const url = state?.redis.url ?? "";
  const embedded = state?.redis.embedded ?? null;
  // Exported, the embedded Redis was stopped: nothing to re-admit on.
  if (embedded && r.exported !== null) {
    const kept = r.otherQueuesKept ? `queue ${state?.queue ?? "jobs"}'s keys in ${r.exported}; other queues' keys in its AOF in ${r.otherQueuesKept.dir}` : `every key in ${r.exported}`;
    return { line: `${r.name}: nothing to re-admit, its embedded Redis stopped with the drill (${kept}); the next drill up admits from the start`, readmit: false };
  }
  if (url === "") return { line: `${r.name}: no Redis was set up, nothing to re-admit`, readmit: false };
  return { line: `${r.name}: ${leverCommand(url, state?.queue ?? "jobs", "admit", g)}`, readmit: true, url };
}
