import { spawn } from "node:child_process";
import { closeSync, existsSync, fstatSync, openSync, readSync, writeSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { validateCgroupName, validateParent } from "../cgroup/names.js";
import { stateDirError } from "../cgroup/stateFiles.js";
import { drillCommandFor, hiddenPasswordNoteAfter, hostRoots, leverCommand, redactUrl, reportAgain, rollbackAgain, type GlobalOptions } from "../context.js";
import { loadDrillFile, type DrillFile } from "../drill/drillFile.js";
import { drillDir, readState, startedParts, statePath, type DrillState, type StartedPart } from "../drill/state.js";
import { acquireDrillLock, drillLockFile, stateDirRefusal } from "../drill/lock.js";
import { embeddedRedisSeen, refuseWhileUp, runUp, stoppedByFailure, upVerdict } from "../drill/up.js";
import { readyTimeoutMs } from "../drill/ready.js";
import { DrillError, InterruptedError, RefusedError, UsageError } from "../errors.js";
import { onInterrupt } from "../interrupt.js";
import { isSameProcess } from "../host/process.js";
import type { HostRoots } from "../host/kernelFile.js";
import { findPackageRoot } from "../native/pagetoucher.js";
import { buildReport, LAB_LABEL } from "../report/build.js";
import { gatherReport } from "../report/gather.js";
import { renderReport } from "../report/render.js";
import { consoleOutput } from "../output.js";
import { validateQueueName } from "../queue/keys.js";
import { applyOverrides, overrideWords, resolveFileDir, weightsReclaimNote, type UpFlags } from "./up.js";
import { makeDirs } from "../util/makeDirs.js";
import { openOwnFile } from "../util/ownFiles.js";
import { DEFAULT_REPORT_SINCE, parseDuration } from "../units.js";

const BACKGROUND_ENV = "DRILL_UP_BACKGROUND";

/** The drill file: --drill, else drills/smoke.yaml here, else the one shipped with drill. An empty --drill is not "no --drill". */
export function resolveDrillPath(flag: string | undefined): string {
  if (flag === "") throw new UsageError("--drill: is empty; give a drill file, or leave the flag out for drills/smoke.yaml");
  // Absolute in the state and the report: read later from elsewhere, or pasted into notes, a relative path names no file (QA).
  if (flag !== undefined) return path.resolve(flag);
  const local = path.resolve("drills", "smoke.yaml");
  return existsSync(local) ? local : path.join(findPackageRoot(), "drills", "smoke.yaml");
}

export async function upAction(g: GlobalOptions, flags: UpFlags): Promise<void> {
  const output = consoleOutput(g.color);
  const drillFile = resolveDrillPath(flags.drill);
  const drill = applyOverrides(loadDrillFile(drillFile, hostRoots(g)), flags);
  validateCgroupName(flags.name);
  validateParent(flags.parent);
  const fileDir = resolveFileDir(flags.fileDir);
  validateQueueName(flags.queue);
  const log = (line: string) => (g.json ? output.err(line) : output.out(line));
  const reclaimNote = weightsReclaimNote(drill, flags.memoryMax !== undefined ? "--memory-max" : "cgroup.memory_max");

  // The commands suggested below work as typed: the state dir named when not the default.
  const drillCmd = drillCommandFor(g.stateDir, g);
  // One document whatever happens from here (README): none twice when a failure follows the summary.
  let printed = false;
  const printJson = (document: object): void => {
    printed = true;
    output.json(document);
  };
  try {
    if (flags.detach && process.env[BACKGROUND_ENV] !== "1") {
      const detached = await detach(drill, drillFile, g.stateDir, drillCmd, reclaimNote, log);
      if (g.json) printJson(detached);
      return;
    }
    await runInForeground(g, flags, drill, drillFile, fileDir, drillCmd, reclaimNote, log, printJson);
  } catch (err) {
    // A script reading --json gets a document for a refusal too (doctor's "verdict":"refused"), then the usual exit 3;
    // and for a failure before the summary (QA: a read-only or full state dir printed nothing), then its exit code.
    if (g.json && !printed) output.json(err instanceof RefusedError ? refusedSummary(drill.name, g.stateDir, err) : failedSummary(drill.name, g.stateDir, err));
    throw err;
  }
}

/**
 * up's --json document when it failed before its summary: a state dir that
 * refused a write, an embedded Redis that did not start. `run_id` names the
 * run this up started when its state file says so (there is something to
 * roll back), else null; `state` the state file when there is one.
 */
export function failedSummary(name: string, stateDir: string, err: unknown) {
  let state: DrillState | null = null;
  try {
    state = readState(stateDir, name);
  } catch {
    // unreadable: the reason says what the state dir did
  }
  return {
    name,
    verdict: "failed" as const,
    reason: err instanceof Error ? err.message : String(err),
    run_id: state !== null && state.owner.pid === process.pid ? state.runId : null,
    state: state === null ? null : statePath(stateDir, name),
  };
}

/**
 * up's --json document when it refused to start (exit 3): the same name,
 * verdict and state fields as its result. `state` names the drill's state
 * file when it is there (a run before, the drill that is up) or about to be
 * (another up holds the lock), null when not: a refusal before this drill's
 * first write (a queue in use, an unsafe host) left none.
 */
export function refusedSummary(name: string, stateDir: string, err: RefusedError) {
  const dir = drillDir(stateDir, name);
  const state = path.join(dir, "state.json");
  const named = existsSync(state) || existsSync(drillLockFile(dir, "up"));
  return { name, verdict: "refused" as const, reason: err.message, run_id: null, state: named ? state : null };
}

async function runInForeground(
  g: GlobalOptions,
  flags: UpFlags,
  drill: DrillFile,
  drillFile: string,
  fileDir: string,
  drillCmd: string,
  reclaimNote: string | null,
  log: (line: string) => void,
  printJson: (document: object) => void,
): Promise<void> {
  const output = consoleOutput(g.color);
  // Said before anything, as --detach does: the running up's lock would only say "another drill up holds up.lock".
  refuseWhileUp(stateBeforeLock(g.stateDir, drill.name), drill.name, drillCmd);
  // description is optional in a drill file: without one, the line starts at the file.
  const described = drill.description.trim() === "" ? "" : `${drill.description.trim()} — `;
  log(`drill ${drill.name}: ${described}${drillFile}; every number below is a lab expectation from a declared drill, not observed production`);
  if (reclaimNote) log(reclaimNote);
  const interrupt = onInterrupt();
  try {
    const result = await runUp({
      roots: hostRoots(g),
      stateDir: g.stateDir,
      procfs: g.procfs,
      sysfs: g.sysfs,
      drill,
      drillFile,
      redisUrl: g.redisUrl,
      queue: flags.queue,
      cgroupName: flags.name,
      parent: flags.parent,
      fileDir,
      overrides: overrideWords(flags),
      signal: interrupt.signal,
      log,
      crashAt: process.env.DRILL_CRASH_AT,
      // The up --detach that started this one holds up.lock until this one takes it.
      lockFrom: process.env[BACKGROUND_ENV] === "1" ? process.ppid : undefined,
    }).catch((err: unknown) => {
      throw setupStateRefused(err, g.stateDir, drill.name, drillCmd) ?? err;
    });
    const redisTrouble = result.exitedEarly.find((e) => e.key === "redis")?.cause ?? null;
    const redisRecord = result.state.redis.embedded ? result.state.processes.find((p) => p.role === "redis") : undefined;
    const seen = redisRecord ? embeddedRedisSeen(hostRoots(g), redisRecord) : null;
    const embeddedRedisStopped = seen?.state === "stopped" ? seen.note : null;
    const summary = {
      name: drill.name,
      label: LAB_LABEL,
      verdict: upVerdict(result),
      run_id: result.state.runId,
      pushed: result.pushed.length,
      pushed_ids: result.pushed,
      not_packed: result.notPacked,
      // Of not_packed: pushes that got no reply as the drill stopped, queued under the next id only if Redis ran them.
      unanswered_pushes: result.unansweredPushes,
      // Jobs of phases past the drill's end (--duration), skipped: not in not_packed.
      skipped_jobs: result.skippedJobs,
      state: path.join(drillDir(g.stateDir, drill.name), "state.json"),
      interrupted: result.interrupted,
      stopped_early: result.exitedEarly.map((e) => ({ process: e.key, how: e.how, code: e.code, log: e.log, last_line: e.lastLine })),
      rollback_under_way: result.rollbackUnderWay,
      // How long gate and worker took to be ready before the schedule's clock started (null: stopped first).
      ready_ms: result.readyMs,
      // Why the drill's end is not in state.json (a full or read-only state dir); null when it is.
      end_unrecorded: result.endUnrecorded,
    };
    const reportCmd = reportAgain(drillCmd, drill.name, { format: "md" });
    if (!g.json) {
      // The summary an operator pastes: the same report `drill report` prints, over this run.
      if (result.rollbackUnderWay) {
        // It waits a few seconds for up to exit, then kills it: no Redis round trips now.
        log(`summary: not read: a rollback is under way; \`${reportCmd}\` reads its export once it is done`);
      } else if (redisTrouble === "no_reply") {
        log(`summary: not read: the drill's Redis did not answer at the drill's end; \`${reportCmd}\` once it answers`);
      } else if (embeddedRedisStopped !== null) {
        // A stopped (SIGSTOPped) server accepts the connection and never answers: asking would wait out the connect bound (QA: 5 s after a Ctrl-C).
        log(`summary: not read: ${embeddedRedisStopped}; \`${reportCmd}\` once it runs again`);
      } else {
        // `drill report`'s own default window, or the whole run when it is longer: the same run read later says the same (QA: "within the last 28.0 s" here, "10 min" there).
        const sinceMs = Math.max(parseDuration(DEFAULT_REPORT_SINCE, "--since"), Date.now() - Date.parse(result.state.createdAt) + 1000);
        try {
          // An embedded Redis is found from the state file, as `drill report` finds it: read on its AOF if it is gone.
          const { inputs, nowMs } = await gatherReport({ stateDir: g.stateDir, name: drill.name, queue: flags.queue, redisUrl: g.redisUrl, sinceMs, roots: hostRoots(g) });
          output.out(renderReport(buildReport(inputs, nowMs, sinceMs), "text", output.color));
        } catch (err) {
          log(`summary unavailable: ${err instanceof Error ? err.message : String(err)}; \`${reportCmd}\` tries again`);
        }
      }
    }
    if (g.json) printJson(summary);
    for (const line of closingLines({
      name: drill.name,
      drillCmd,
      queue: flags.queue,
      redisUrl: result.state.redis.url,
      embeddedRedis: result.state.redis.embedded !== null,
      pushed: result.pushed.length,
      notPacked: result.notPacked,
      unansweredPushes: result.unansweredPushes,
      stoppedEarly: result.interrupted || result.exitedEarly.length > 0,
      redisGone: redisTrouble === "gone",
      rollbackUnderWay: result.rollbackUnderWay,
      running: runningRoles(hostRoots(g), result.state),
      cgroup: result.state.cgroup !== null,
      fileDir: result.state.fileDir !== null,
      started: startedParts(result.state),
    })) {
      log(line);
    }
    const signal = interrupt.received();
    if (signal) throw new InterruptedError(signal);
    // Said after the summary and what to do next: state.json still holds all up started, so rollback finds it (exit 1, README Known limits).
    if (result.endUnrecorded !== null) {
      throw new DrillError(`${result.endUnrecorded}; the drill's end is not recorded there (what it did is above), everything it started is: run \`${rollbackAgain(drillCmd, {}, drill.name)}\``);
    }
    // The worker OOM-killed in its cgroup stopped the drill, but is its outcome (RELIABILITY 4, as inject's oom_killed): exit 0, said above.
    if (stoppedByFailure(result.exitedEarly)) {
      const gone = result.exitedEarly.map((e) => `${e.key} ${e.how}${e.log ? ` (log ${e.log})` : ""}`).join(", ");
      throw new DrillError(`drill ${drill.name} stopped before its end: ${gone}; run \`${rollbackAgain(drillCmd, {}, drill.name)}\``);
    }
  } finally {
    interrupt.dispose();
  }
}

/**
 * A state write refused (full, read-only) while up set up, after its run's
 * first write and before a Redis answered (one refused later stops the drill
 * with its summary): the run dir, the embedded Redis's intent or dir. Nothing
 * was started then (no summary to read), but state.json says the run is
 * starting: that drill's rollback closes it. null for any other failure, or
 * before this run wrote its state.
 */
function setupStateRefused(err: unknown, stateDir: string, name: string, drillCmd: string): DrillError | null {
  if (stateDirRefusal(err) === null) return null;
  let state: DrillState | null;
  try {
    state = readState(stateDir, name);
  } catch {
    return null;
  }
  if (state === null || state.owner.pid !== process.pid) return null;
  const left = startedParts(state).length > 0
    ? "what it started by then is recorded there"
    : `it had started nothing (no Redis, cgroup or process; no summary: nothing ran), but ${statePath(stateDir, name)} says the run is starting`;
  return new DrillError(`${(err as Error).message}; up stopped while setting up run ${state.runId}: ${left}: run \`${rollbackAgain(drillCmd, {}, name)}\``, undefined, { cause: err });
}

export interface ClosingFacts {
  name: string;
  drillCmd: string;
  queue: string;
  /** The drill's Redis ("" when up stopped before it had one). */
  redisUrl: string;
  embeddedRedis: boolean;
  pushed: number;
  notPacked: number;
  /** Of notPacked: pushes that got no reply as the drill stopped. */
  unansweredPushes: number;
  stoppedEarly: boolean;
  /** The embedded redis-server died during the drill. */
  redisGone: boolean;
  /** A rollback of this run stopped up: it is running now. */
  rollbackUnderWay: boolean;
  /** The drill's processes still alive as up ends, by role (gate, worker, watch, hog), in that order. */
  running: string[];
  /** The drill made its cgroup (a stop while setting up can come first). */
  cgroup: boolean;
  /** The drill made its file dir (the worker's weights, the hog's files). */
  fileDir: boolean;
  /** What the run started, as its record says (startedParts): what a rollback under way stops. */
  started: StartedPart[];
}

/** What a rollback does to each part a run started. */
const ROLLBACK_OF: Record<StartedPart, string> = { processes: "stops its processes", "embedded Redis": "stops its embedded Redis", cgroup: "removes its cgroup" };

/** "it stops its processes, removes its cgroup, drains and exports the queue": only what this run started (QA: it named a hog that never ran). */
function rollbackUnderWayText(started: StartedPart[], redisUrl: string): string {
  const acts = [...started.filter((p) => p !== "embedded Redis").map((p) => ROLLBACK_OF[p]), ...(redisUrl === "" ? [] : ["drains and exports the queue"])];
  // Its embedded Redis (and nothing else) is stopped once the queue is exported.
  if (started.includes("embedded Redis")) acts.push(`then ${ROLLBACK_OF["embedded Redis"]}`);
  return acts.length === 0 ? "it closes the run, which started nothing" : `it ${acts.join(", ")}`;
}

/** "gate, worker and watch keep" / "the worker keeps"; null when none runs any more. */
function stillRunning(running: string[]): string | null {
  if (running.length === 0) return null;
  if (running.length === 1) return `the ${running[0]} keeps`;
  return `${running.slice(0, -1).join(", ")} and ${running.at(-1)} keep`;
}

/** The roles of the drill's children alive now (pid and start time as recorded), each once. */
function runningRoles(roots: HostRoots, state: DrillState): string[] {
  const alive = new Set(state.processes.filter((p) => p.pid !== null && p.startTime !== null && isSameProcess(roots, p.pid, p.startTime)).map((p) => p.role));
  return (["gate", "worker", "watch", "hog"] as const).filter((role) => alive.has(role));
}

/** up's last lines: what was packed, then what the operator does next, as things stand now. */
export function closingLines(f: ClosingFacts): string[] {
  const maybe = f.unansweredPushes === 0 ? "" : `; ${f.unansweredPushes} of them got no reply: queued under the next id if Redis ran ${f.unansweredPushes === 1 ? "it" : "them"}`;
  const cut = f.notPacked > 0 ? ` (${f.notPacked} not packed: the drill ${f.stoppedEarly ? "stopped" : "ended"} first${maybe})` : "";
  const lines = [`drill ${f.name}: packer stopped after ${f.pushed} jobs${cut}; \`${reportAgain(f.drillCmd, f.name, { format: "md" })}\` for the incident note.`];
  const rollback = `\`${rollbackAgain(f.drillCmd, {}, f.name)}\``;
  if (f.rollbackUnderWay) {
    // It flipped deny-all as its first step and stops the rest: nothing is left for the operator to do here.
    lines.push(`A rollback of this drill is under way (it stopped this up): ${rollbackUnderWayText(f.started, f.redisUrl)}; its own output says what it found.`);
    return lines;
  }
  const keep = stillRunning(f.running);
  // Said from what is alive now: a gate that just died does not "keep running".
  // What stays is what it made: a stop while setting up can come before the cgroup or the files.
  const made = [f.cgroup ? "cgroup" : null, f.fileDir ? "files" : null].filter((m) => m !== null);
  const stays = made.length === 0 ? "" : `, its ${made.join(" and ")} ${made.length === 1 ? "stays" : "stay"} until then`;
  const running = keep === null ? `none of its processes runs any more${stays}` : `${keep} running until then`;
  if (f.redisGone) {
    lines.push(
      `Run ${rollback} before walking away: the embedded Redis is gone, so nothing is admitted meanwhile; rollback starts it again on its AOF (every job it took is there) to drain and export it. ` +
        `${running.charAt(0).toUpperCase()}${running.slice(1)}${keep === null ? "" : " (they exit by themselves 5 minutes after the drill's end)"}.`,
    );
    return lines;
  }
  if (f.redisUrl !== "") {
    lines.push(`Deny-all by hand: \`${leverCommand(f.redisUrl, f.queue, "reject_all")}\`${hiddenPasswordNoteAfter([f.redisUrl])}.`);
  }
  const selfExit = keep === null ? (f.embeddedRedis ? "the embedded Redis exits by itself 5.5 minutes after the drill's end, with every job in its AOF" : null)
    : f.embeddedRedis ? "they exit by themselves 5 minutes after the drill's end, the embedded Redis 30 s later with every job in its AOF" : "they exit by themselves 5 minutes after the drill's end";
  lines.push(`Run ${rollback} before walking away: ${running}${selfExit === null ? "" : ` (${selfExit})`}.`);
  return lines;
}

/**
 * The state read for the early "already up" refusal. A state dir this user
 * may not read is not answered here: the lock, taken next, names the
 * directory it could not create and says to run as root.
 */
function stateBeforeLock(stateDir: string, name: string): DrillState | null {
  try {
    return readState(stateDir, name);
  } catch (err) {
    const code = ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code;
    if (code === "EACCES" || code === "EPERM") return null;
    throw err;
  }
}

/**
 * What up says before a drill starts and --detach repeats from the log: the
 * warnings (doctor's, the drill file's, the cgroup's) and the previous run it
 * replaced, kept for `report --run` (QA: said only in the log; QA: a 4-vCPU
 * drill file on a 2-CPU host said so only in the log).
 */
const isWarning = (line: string): boolean => /^(doctor|drill file|cgroup): warning: /.test(line);
const isRepeated = (line: string): boolean => isWarning(line) || /^up: drill \S+'s previous run /.test(line);

/** This run's lines of the background up's log: from `start` (past its header), read once. */
function runLog(logFile: string, start: number): string[] {
  let fd: number;
  try {
    fd = openSync(logFile, "r");
  } catch {
    return []; // the log went away: the state and the exit code still say what happened
  }
  try {
    const size = fstatSync(fd).size;
    if (size <= start) return [];
    const buffer = Buffer.alloc(Math.min(size - start, 1 << 20));
    const n = readSync(fd, buffer, 0, buffer.length, start);
    return buffer.subarray(0, n).toString("utf8").split("\n");
  } finally {
    closeSync(fd);
  }
}

/**
 * The background up this --detach started runs: a new run whose state names
 * that up as its owner. Another up's run (the state is shared by name) is
 * never taken for ours.
 */
export function isOwnRun(state: DrillState, before: DrillState | null, childPid: number | undefined): boolean {
  // Stopped counts only once its schedule started: one stopped while waiting for
  // gate and worker never ran, and its exit says why.
  const ran = state.phase === "running" || (state.phase === "stopped" && state.scheduleStartedAt !== undefined);
  return state.runId !== before?.runId && state.owner.pid === childPid && ran;
}

/**
 * --detach: run the same `drill up` in its own session (it is the packer and
 * the schedule), wait until its state says running, then return.
 */
async function detach(drill: DrillFile, drillFile: string, stateDir: string, drillCmd: string, reclaimNote: string | null, log: (line: string) => void) {
  const dir = drillDir(stateDir, drill.name);
  const before = stateBeforeLock(stateDir, drill.name);
  const logFile = path.join(stateDir, `${drill.name}-up.log`);
  // Refused here, before the log: a second up's refusal appended to the log of
  // the drill that runs reads as that drill's.
  refuseWhileUp(before, drill.name, drillCmd, `; log ${logFile}`);
  // A race of two --detach is decided here too, before either writes the log
  // or starts a background up: the loser is refused (exit 3), the winner hands
  // the lock to its background up, which takes it over (lockFrom).
  const lock = acquireDrillLock(dir, "up", "up --detach");
  try {
    return await startInBackground(drill, stateDir, before, logFile, drillCmd, reclaimNote, log);
  } finally {
    // Left alone once the background up took it over.
    lock.release();
  }
}

/**
 * The background up's argv without `--redis <url>`, the URL given back for its
 * environment: it lives as long as the drill, and /proc/<pid>/cmdline is
 * readable by every user (QA: a password there), environ only by its owner.
 */
export function redisArgMovedOut(argv: string[]): { args: string[]; redisUrl: string | undefined } {
  const args: string[] = [];
  let redisUrl: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--redis" && i + 1 < argv.length) redisUrl = argv[++i];
    else if (arg.startsWith("--redis=")) redisUrl = arg.slice("--redis=".length);
    else args.push(arg);
  }
  return { args, redisUrl };
}

async function startInBackground(drill: DrillFile, stateDir: string, before: DrillState | null, logFile: string, drillCmd: string, reclaimNote: string | null, log: (line: string) => void) {
  const dir = drillDir(stateDir, drill.name);
  // Here too: the background up says it only in its log.
  if (reclaimNote) log(reclaimNote);
  let fd: number;
  let runStart: number;
  try {
    // A first run on a fresh --state-dir: the log goes there before the background up makes it.
    makeDirs(stateDir);
    fd = openOwnFile(logFile, "a");
    // One log for every run of this drill: each starts with a line saying so.
    writeSync(fd, `==== drill up --detach ${drill.name} at ${new Date().toISOString()}\n`);
    runStart = fstatSync(fd).size;
  } catch (err) {
    throw stateDirError("write the log of the background up", logFile, err);
  }
  const { args, redisUrl } = redisArgMovedOut(process.argv.slice(1));
  const child = spawn(process.execPath, args, {
    detached: true,
    stdio: ["ignore", fd, fd],
    env: { ...process.env, [BACKGROUND_ENV]: "1", ...(redisUrl === undefined ? {} : { DRILL_REDIS_URL: redisUrl }) },
  });
  closeSync(fd);
  child.unref();
  let exitCode: number | null | undefined;
  child.once("exit", (code) => (exitCode = code ?? -1));
  // Running comes after gate and worker are ready: the weights' time on top of the start.
  // DRILL_TEST_DETACH_WAIT_MS (tests): a wait short enough to see it run out.
  const waitMs = Number(process.env.DRILL_TEST_DETACH_WAIT_MS ?? 0) || 120_000 + readyTimeoutMs(drill.worker.weights, drill.gate.interval);
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    const state = readState(stateDir, drill.name);
    if (state && isOwnRun(state, before, child.pid)) {
      const said = runLog(logFile, runStart);
      for (const line of said.filter(isRepeated)) log(line);
      const warnings = said.filter(isWarning);
      log(`drill ${drill.name} is up in the background (pid ${child.pid}, run ${state.runId}); log ${logFile}, state ${dir}`);
      log(`redis: ${state.redis.embedded ? "embedded redis-server" : "given"} at ${redactUrl(state.redis.url)}, queue ${state.queue}; deny-all by hand: \`${leverCommand(state.redis.url, state.queue, "reject_all")}\`${hiddenPasswordNoteAfter([state.redis.url])}`);
      log(`run \`${rollbackAgain(drillCmd, {}, drill.name)}\` before walking away`);
      return { name: drill.name, label: LAB_LABEL, verdict: "detached" as const, run_id: state.runId, pid: child.pid ?? null, log: logFile, state: path.join(dir, "state.json"), redis: redactUrl(state.redis.url), queue: state.queue, warnings };
    }
    if (exitCode !== undefined) {
      // What the background up said before it stopped: its warnings, and its error line (`drill: ...`).
      const lines = runLog(logFile, runStart);
      for (const line of lines.filter(isRepeated)) log(line);
      const said = lines.findLast((line) => line.startsWith("drill: "));
      const why = said === undefined ? "" : `: ${said.slice("drill: ".length)}`;
      const message = `drill up exited with code ${exitCode} before the drill ran${why}; see ${logFile}`;
      // A refusal is up's refusal (with --json, its "refused" document) as in the foreground.
      throw exitCode === 3 ? new RefusedError(message) : new DrillError(message, exitCode === 2 ? 2 : 1);
    }
    await sleep(200);
  }
  // Left running, it could still bring the drill up after the operator was told to roll it back (QA: stopped
  // before its lock, rollback found nothing, then it came up): killed first. SIGKILL, as a SIGSTOPped one takes no SIGTERM.
  const killed = exitCode === undefined && child.pid !== undefined && child.kill("SIGKILL");
  // Reaped here, so "killed" is so when said (not a zombie left for init).
  if (killed) await Promise.race([new Promise((resolve) => child.once("exit", resolve)), sleep(2000)]);
  throw new DrillError(detachTimeoutText(waitMs, child.pid, killed, logFile, rollbackAgain(drillCmd, {}, drill.name)));
}

/** Why `up --detach` gave up on its background up, what became of that up, and the rollback of what it started. */
export function detachTimeoutText(waitMs: number, pid: number | undefined, killed: boolean, logFile: string, rollback: string): string {
  const up = killed ? `its background up (pid ${pid}) is killed (SIGKILL): it starts nothing more` : `its background up (pid ${pid ?? "?"}) could not be killed: kill -KILL ${pid ?? "<its pid>"} first`;
  return `drill up did not reach running within ${Math.round(waitMs / 1000)} s; ${up}; see ${logFile}, then run ${rollback} for what it started`;
}
