import { readdirSync, readlinkSync, realpathSync } from "node:fs";
import { readKernelText, type HostRoots } from "../host/kernelFile.js";
import { environValues, readProcessStat } from "../host/process.js";

/** A process rollback found that it must stop: pid + start time, never the pid alone. */
export interface StrayProcess {
  pid: number;
  startTime: number;
  comm: string;
}

/** Live processes in <procfs> (not us, not zombies) for which `matches(pidDir)` holds. */
function scanProcesses(roots: HostRoots, exclude: ReadonlySet<number>, matches: (pidDir: string) => boolean): StrayProcess[] {
  return inspectProcesses(roots, exclude, (pid) => (matches(pid) ? {} : null));
}

/** Live processes (not us, not zombies) for which `inspect(pidDir)` returns what it found in them. */
function inspectProcesses<T extends object>(roots: HostRoots, exclude: ReadonlySet<number>, inspect: (pidDir: string) => T | null): Array<StrayProcess & T> {
  const found: Array<StrayProcess & T> = [];
  let entries: string[];
  try {
    entries = readdirSync(roots.proc());
  } catch {
    return found;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || exclude.has(Number(entry))) continue;
    let extra: T | null;
    try {
      extra = inspect(entry);
    } catch {
      continue; // gone, or a kernel thread
    }
    if (extra === null) continue;
    const stat = readProcessStat(roots, Number(entry));
    if (stat.ok && stat.value.state !== "Z") found.push({ ...extra, pid: stat.value.pid, startTime: stat.value.startTime, comm: stat.value.comm });
  }
  return found;
}

/**
 * Processes carrying DRILL_RUN_ID=<runId> in their environment: how rollback
 * finds children whose pid never reached the state file (a SIGKILL between
 * spawn and write). Never by name: `pgrep -f packed` kills the wrong process.
 */
export function findByRunId(roots: HostRoots, runId: string, exclude: ReadonlySet<number> = new Set([process.pid])): StrayProcess[] {
  const needle = `DRILL_RUN_ID=${runId}\0`;
  return scanProcesses(roots, exclude, (pid) => {
    const environ = readEnviron(roots, pid);
    // environ entries are NUL-separated; match a whole entry, not a prefix of another id
    return environ !== null && (environ.startsWith(needle) || environ.includes(`\0${needle}`));
  });
}

/** A process of some drill run: its DRILL_RUN_ID, and the DRILL_STATE_DIR up gave it (null from an up that gave none). */
export interface DrillRunProcess extends StrayProcess {
  runId: string;
  stateDir: string | null;
}

/**
 * Every live process carrying a DRILL_RUN_ID, of any run: what a rollback
 * pointed at a state dir without the drill must not call "nothing".
 */
export function findDrillRunProcesses(roots: HostRoots, exclude: ReadonlySet<number> = new Set([process.pid])): DrillRunProcess[] {
  return scanDrillRunProcesses(roots, exclude).processes;
}

/**
 * findDrillRunProcesses, and how many processes it could not look at: the
 * kernel lets only root (and the owner) read a process's environ, so a
 * non-root scan is blind to other users' drills and must say so (QA: a
 * non-root rollback said "no process of a drill up" beside root's drills).
 * Kernel threads (kthreadd, pid 2, and its children) carry no environment.
 */
export function scanDrillRunProcesses(roots: HostRoots, exclude: ReadonlySet<number> = new Set([process.pid])): { processes: DrillRunProcess[]; unreadable: number } {
  const found = inspectProcesses(roots, exclude, (pid): { runId: string; stateDir: string | null } | { unreadable: true } | null => {
    const environ = readKernelText(roots.proc(pid, "environ"));
    if (!environ.ok) return environ.reason.startsWith("unreadable") ? { unreadable: true } : null;
    if (!environ.value.includes("DRILL_RUN_ID=")) return null;
    return drillRunFromEnviron(environ.value);
  });
  const processes = found.flatMap((p) => ("runId" in p ? [p] : []));
  const unreadable = found.filter((p) => "unreadable" in p && !isKernelThread(roots, p.pid)).length;
  return { processes, unreadable };
}

function isKernelThread(roots: HostRoots, pid: number): boolean {
  const stat = readProcessStat(roots, pid);
  return pid === 2 || (stat.ok && stat.value.ppid === 2);
}

/**
 * A process's environ, or null when gone or not ours to read. Opened as the
 * kernel files are (openKernelFile: no blocking, only a file): a FIFO in a
 * --procfs tree held the rollback in its open, past SIGTERM.
 */
export function readEnviron(roots: HostRoots, pid: string | number): string | null {
  const environ = readKernelText(roots.proc(String(pid), "environ"));
  return environ.ok ? environ.value : null;
}

/** The drill runs these processes belong to (DRILL_RUN_ID, and its --state-dir when up gave it), each once: what to name beside a cgroup drill did not record here. */
export function drillRunsOf(roots: HostRoots, pids: Iterable<number>): string[] {
  const runs = new Set<string>();
  for (const pid of pids) {
    const environ = readEnviron(roots, pid);
    const run = environ === null ? null : drillRunFromEnviron(environ);
    if (run) runs.add(run.stateDir === null ? run.runId : `${run.runId} (--state-dir ${run.stateDir})`);
  }
  return [...runs];
}

/** DRILL_RUN_ID and DRILL_STATE_DIR from a NUL-separated environ, or null without a run id. */
export function drillRunFromEnviron(environ: string): { runId: string; stateDir: string | null } | null {
  const { DRILL_RUN_ID: runId, DRILL_STATE_DIR: stateDir } = environValues(environ, ["DRILL_RUN_ID", "DRILL_STATE_DIR"]);
  return runId ? { runId, stateDir: stateDir || null } : null;
}

/**
 * Every live process with its working directory: an embedded redis-server
 * sits in `<state-dir>/<drill>/redis` and its environment is no longer readable.
 */
export function listCwds(roots: HostRoots, exclude: ReadonlySet<number> = new Set([process.pid])): Array<StrayProcess & { cwd: string }> {
  return inspectProcesses(roots, exclude, (pid) => ({ cwd: readlinkSync(roots.proc(pid, "cwd")).replace(/ \(deleted\)$/, "") }));
}

/**
 * Processes whose working directory is `dir`. redis-server rewrites its
 * process title over its environment, so DRILL_RUN_ID cannot be read back
 * from it; it does chdir into its --dir, which is the drill's own. The
 * kernel shows a cwd with its symlinks resolved: so is `dir` before comparing.
 */
export function findByCwd(roots: HostRoots, dir: string, exclude: ReadonlySet<number> = new Set([process.pid])): StrayProcess[] {
  const target = realDir(dir);
  return scanProcesses(roots, exclude, (pid) => readlinkSync(roots.proc(pid, "cwd")).replace(/ \(deleted\)$/, "") === target);
}

/** `dir` with its symlinks resolved, as the kernel (a cwd) and Redis (CONFIG GET dir) report it; as given when it is gone. */
export function realDir(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return dir;
  }
}
