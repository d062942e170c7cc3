import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { liveLockHolder, type LockHolder } from "../cgroup/stateFiles.js";
import { notPermittedText } from "../cgroup/tasks.js";
import type { HostRoots } from "../host/kernelFile.js";
import { stopRecordedProcess, type StopOutcome } from "./processes.js";
import { drillDir, readState } from "./state.js";
import { ForeignRecordError } from "../util/ownFiles.js";

/**
 * An `up` a rollback stopped before it had recorded its run; `refused`: its
 * up.lock is none drill wrote (`pid` null), or its up is a process this user
 * may not signal (its `pid`: root finishes it), nothing stopped; `problem` says which.
 */
export type StartingUp = { name: string; pid: number; outcome: Exclude<StopOutcome, "refused"> } | { name: string; pid: number | null; outcome: "refused"; problem: string };

/**
 * `up` holds `<state-dir>/<name>/up.lock` from its first step but records its
 * run only after doctor, about a second later: a rollback in between found no
 * state and no process of the drill (up carries no DRILL_RUN_ID), said
 * "nothing to roll back", and the drill came up behind it (QA). Such an up is
 * stopped first (SIGTERM, and SIGCONT for one that is stopped); what it
 * recorded by then is rolled back as usual. An up whose run is recorded is
 * the packer, stopped by the rollback's own step 2.
 */
export async function stopStartingUps(roots: HostRoots, stateDir: string, named: string | undefined, graceMs = 5000): Promise<StartingUp[]> {
  const stopped: StartingUp[] = [];
  const refused = new Set<string>();
  // `up --detach` hands its lock to the background up it started: stopping the
  // parent leaves the child to take it, so look again after a stop.
  for (let round = 0; round < 3; round++) {
    const found = await stopRound(roots, stateDir, named, graceMs, refused);
    stopped.push(...found);
    if (found.every((up) => up.outcome === "refused")) break;
    await sleep(HANDOVER_MS);
  }
  return stopped;
}

/** How long a background up takes to start and take the lock its parent hands over. */
const HANDOVER_MS = 1000;

/** `refused`: the drills whose up.lock is none drill wrote, said once and not looked at again. */
async function stopRound(roots: HostRoots, stateDir: string, named: string | undefined, graceMs: number, refused: Set<string>): Promise<StartingUp[]> {
  const stopped: StartingUp[] = [];
  for (const name of named === undefined ? drillDirsWithUpLock(stateDir) : [named]) {
    if (refused.has(name)) continue;
    let holder: LockHolder | null;
    try {
      holder = liveLockHolder(path.join(drillDir(stateDir, name), "up.lock"));
    } catch (err) {
      if (!(err instanceof ForeignRecordError)) throw err;
      refused.add(name);
      stopped.push({ name, pid: null, outcome: "refused", problem: err.message });
      continue;
    }
    if (holder === null || holder.startTime === null || holdsRecordedRun(stateDir, name, holder)) continue;
    const outcome = await stopRecordedProcess(roots, { pid: holder.pid, startTime: holder.startTime }, graceMs);
    if (outcome === "refused") {
      refused.add(name);
      stopped.push({ name, pid: holder.pid, outcome, problem: `its up (pid ${holder.pid}) cannot be signalled: EPERM (${notPermittedText(roots, holder.pid)})` });
      continue;
    }
    stopped.push({ name, pid: holder.pid, outcome: outcome === "reused" ? "gone" : outcome });
  }
  return stopped;
}

function holdsRecordedRun(stateDir: string, name: string, holder: LockHolder): boolean {
  try {
    const state = readState(stateDir, name);
    return state !== null && state.phase !== "complete" && state.owner.pid === holder.pid && state.owner.startTime === holder.startTime;
  } catch {
    return false; // unreadable: rollbackDrill says so
  }
}

function drillDirsWithUpLock(stateDir: string): string[] {
  try {
    return readdirSync(stateDir, { withFileTypes: true })
      .filter((e) => e.isDirectory() && existsSync(path.join(stateDir, e.name, "up.lock")))
      .map((e) => e.name)
      .sort();
  } catch {
    return [];
  }
}
