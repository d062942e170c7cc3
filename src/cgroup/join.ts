import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import type { HostRoots } from "../host/kernelFile.js";
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

/** Pure: the argv of /bin/sh that joins `procsFiles` (in order) and then execs `command args`. */
export function joinArgv(procsFiles: string[], command: string, args: string[]): string[] {
  return ["-c", JOIN_SCRIPT, "drill-join", String(procsFiles.length), ...procsFiles, command, ...args];
}

/**
 * Spawns `command` inside the worker cgroup (every hierarchy, authoritative
 * v1 first) before it runs a single instruction. The child's pid is the
 * program's pid. Exit 125 means a join failed and the program never started.
 */
export function spawnInCgroup(cgroup: Pick<WorkerCgroup, "procsFiles">, command: string, args: string[], options: SpawnOptions = {}): ChildProcess {
  return spawn("/bin/sh", joinArgv(cgroup.procsFiles, command, args), options);
}

/** Whether /proc/<pid>/cgroup shows the process in every dir of the worker cgroup. */
export function verifyJoined(roots: HostRoots, pid: number, cgroup: WorkerCgroup): { joined: boolean; outside: string[] } {
  const outside = cgroup.dirs.filter((dir) => !isInCgroup(roots, pid, dir)).map((dir) => dir.dir);
  return { joined: outside.length === 0, outside };
}
