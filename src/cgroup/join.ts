import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../host/process.js";
import type { WorkerCgroup } from "./paths.js";
import { isInCgroup } from "./tasks.js";

/** Exit status of the shim when it could not join a cgroup: the program never ran. */
export const JOIN_FAILED_EXIT = 125;

// Node cannot exec, and memory already charged does not move with a process
// that changes cgroup: the shell joins every cgroup.procs with its own pid,
// then execs the program, which keeps that pid and so starts inside. Paths
// and argv arrive as positional parameters, never interpolated into the script.
const JOIN_SCRIPT = [
  'n="$1"; shift',
  'while [ "$n" -gt 0 ]; do',
  '  echo $$ > "$1" || { echo "drill-join: cannot join $1" >&2; exit 125; }',
  "  shift; n=$((n - 1))",
  "done",
  'exec "$@"',
].join("\n");

/**
 * The OOM killer's pick for the hog: the most it can be. In a cgroup it picks
 * by size, and a hog still filling can be smaller than the Node worker (QA:
 * at 96M the worker went first). The hog is the injected fault; the worker is
 * what the drill observes.
 */
export const HOG_OOM_SCORE_ADJ = 1000;

// Set before the joins, so the process is the preferred victim from the moment
// it is in the cgroup. Inherited across exec. Raising it needs no privilege; a
// write that fails anyway (no /proc) is said, and the program still runs.
const ADJ_SCRIPT = [
  'adj="$1"; shift',
  'echo "$adj" > "/proc/$$/oom_score_adj" || echo "drill-join: cannot write /proc/$$/oom_score_adj: not the OOM killer\'s first pick" >&2',
].join("\n");

/**
 * Pure: the argv of /bin/sh that (given `oomScoreAdj`) sets its oom_score_adj,
 * joins `procsFiles` (in order) and then execs `command args`.
 */
export function joinArgv(procsFiles: string[], command: string, args: string[], oomScoreAdj?: number): string[] {
  const join = [String(procsFiles.length), ...procsFiles, command, ...args];
  if (oomScoreAdj === undefined) return ["-c", JOIN_SCRIPT, "drill-join", ...join];
  if (!Number.isInteger(oomScoreAdj) || oomScoreAdj < -1000 || oomScoreAdj > 1000) throw new RangeError(`oom_score_adj ${oomScoreAdj} is not a whole number from -1000 to 1000`);
  return ["-c", `${ADJ_SCRIPT}\n${JOIN_SCRIPT}`, "drill-join", String(oomScoreAdj), ...join];
}

/**
 * Spawns `command` inside the worker cgroup (every hierarchy, authoritative
 * v1 first) before it runs a single instruction. The child's pid is the
 * program's pid. Exit 125 means a join failed and the program never started.
 * `oomScoreAdj` (the hog's HOG_OOM_SCORE_ADJ) is set before the joins.
 */
export function spawnInCgroup(cgroup: Pick<WorkerCgroup, "procsFiles">, command: string, args: string[], options: SpawnOptions = {}, oomScoreAdj?: number): ChildProcess {
  return spawn("/bin/sh", joinArgv(cgroup.procsFiles, command, args, oomScoreAdj), options);
}

/**
 * The hog after its first word: in every dir of the cgroup (true), running
 * outside it (false), or gone before it could be looked at (null: unknown,
 * as an anon hog OOM-killed within milliseconds of its start; QA: said
 * `joined: false` beside the cgroup's oom_kill count that it had raised).
 */
export function joinedUnlessGone(roots: HostRoots, id: { pid: number; startTime: number | null }, cgroup: WorkerCgroup): boolean | null {
  if (verifyJoined(roots, id.pid, cgroup).joined) return true;
  const alive = id.startTime === null ? readProcessStat(roots, id.pid).ok : isSameProcess(roots, id.pid, id.startTime);
  return alive ? false : null;
}

/** Whether /proc/<pid>/cgroup shows the process in every dir of the worker cgroup. */
export function verifyJoined(roots: HostRoots, pid: number, cgroup: WorkerCgroup): { joined: boolean; outside: string[] } {
  const outside = cgroup.dirs.filter((dir) => !isInCgroup(roots, pid, dir)).map((dir) => dir.dir);
  return { joined: outside.length === 0, outside };
}
