import { existsSync } from "node:fs";
import path from "node:path";
import { readPids } from "../cgroup/memoryFiles.js";
import { readKernelText, type HostRoots } from "../host/kernelFile.js";
import { readComm } from "../cgroup/tasks.js";
import { isSameProcess, readProcessStat } from "../host/process.js";
import { shellWord } from "../context.js";

/**
 * What of a running drill is stalled rather than gone: a process stopped
 * (SIGSTOP, a debugger: state T or t) or the worker cgroup frozen
 * (cgroup.freeze). Such a part answers nothing and exits never: the gate
 * admits onto a worker that takes nothing, and when it resumes its own
 * watchdog blames Redis. QA: up, watch and the report never named it.
 */
export interface StalledPart {
  /** A stable key for the part: its line is said when it stalls and when it runs again. */
  key: string;
  /** The stopped process (with its start time: a pid alone may be reused), or the frozen cgroup's dir: still there when it leaves the stalled set, it runs again. */
  pid: number | null;
  startTime: number | null;
  dir: string | null;
  /** e.g. `worker pid 8720 (node) is stopped (state T: SIGSTOP or a debugger): …`. */
  stalled: string;
  /** e.g. `gate pid 8671 runs again`. */
  resumed: string;
}

export interface WatchedProcess {
  /** gate, watch, worker launcher, … */
  role: string;
  pid: number;
}

const IN_CGROUP = "task in the worker cgroup";

const STOPPED_STATES: Record<string, string> = { T: "stopped (state T: SIGSTOP or a debugger)", t: "stopped by a tracer (state t)" };

/** Pure: the stalled parts among what was read; a process read as not stopped (or not read) is not one. */
export function stalledParts(processes: Array<WatchedProcess & { state: string | null; startTime?: number | null; comm?: string | null }>, frozenDirs: string[]): StalledPart[] {
  const parts: StalledPart[] = [];
  for (const p of processes) {
    const how = p.state === null ? undefined : STOPPED_STATES[p.state];
    if (how === undefined) continue;
    const comm = p.comm ? ` (${p.comm})` : "";
    parts.push({ key: `pid ${p.pid}`, pid: p.pid, startTime: p.startTime ?? null, dir: null, stalled: `${p.role} pid ${p.pid}${comm} is ${how}: it answers nothing until \`kill -CONT ${p.pid}\``, resumed: `${p.role} pid ${p.pid} runs again` });
  }
  for (const dir of frozenDirs) {
    parts.push({ key: `frozen ${dir}`, pid: null, startTime: null, dir, stalled: `the worker cgroup ${dir} is frozen (cgroup.events: frozen 1): its worker and hog take nothing until \`echo 0 > ${shellWord(path.join(dir, "cgroup.freeze"))}\``, resumed: `the worker cgroup ${dir} is thawed` });
  }
  return parts;
}

/**
 * What a task of the worker cgroup is, from its argv: up records the worker's
 * launcher, not the worker that runs inside (QA: "task in the worker cgroup
 * pid 8720 (node)" for the stopped worker). Read only for a stopped task.
 */
export function cgroupTaskRole(argv: string[]): string {
  const toucher = argv.findIndex((a) => path.basename(a) === "pagetoucher" || path.basename(a) === "pagetoucher.py");
  if (toucher >= 0) return argv[toucher + 1] === "serve" ? "the worker's weights toucher" : "hog";
  if (argv.includes("worker")) return "worker";
  return IN_CGROUP;
}

function readArgv(roots: HostRoots, pid: number): string[] {
  const text = readKernelText(roots.proc(String(pid), "cmdline"));
  return text.ok ? text.value.split("\0").filter((a) => a !== "") : [];
}

/** The drill's processes and the tasks of its worker cgroup, with their states; the cgroup's dirs read as frozen. */
export function readStalls(roots: HostRoots, processes: WatchedProcess[], cgroupDirs: string[]): StalledPart[] {
  const watched = new Map<number, WatchedProcess>(processes.map((p) => [p.pid, p]));
  // The worker and the hog run inside the cgroup: their pids are not up's children.
  const inside = cgroupDirs.length === 0 ? null : readPids(path.join(cgroupDirs[0]!, "cgroup.procs"));
  if (inside?.ok) for (const pid of inside.value) if (!watched.has(pid)) watched.set(pid, { role: IN_CGROUP, pid });
  const read = [...watched.values()].map((p) => {
    const stat = readProcessStat(roots, p.pid);
    const state = stat.ok ? stat.value.state : null;
    const stopped = state === "T" || state === "t";
    const role = stopped && p.role === IN_CGROUP ? cgroupTaskRole(readArgv(roots, p.pid)) : p.role;
    return { ...p, role, state, startTime: stat.ok ? stat.value.startTime : null, comm: stopped ? readComm(roots, p.pid) : null };
  });
  const frozen = cgroupDirs.filter((dir) => {
    const events = readKernelText(path.join(dir, "cgroup.events"));
    return events.ok && /^frozen 1$/m.test(events.value);
  });
  return stalledParts(read, frozen);
}

/**
 * Each stall said once as it starts and once as it ends, between polls. A
 * part that ends by going (killed while stopped, a cgroup removed while
 * frozen) did not run again: nothing is said here (QA: "runs again" before
 * up's own line that the gate was killed).
 */
export class StallWatch {
  private current = new Map<string, StalledPart>();

  /** The lines to say for what stalled or resumed since the last poll; `there` tells a part that resumed from one that went. */
  poll(now: StalledPart[], there: (part: StalledPart) => boolean): string[] {
    const lines: string[] = [];
    const next = new Map(now.map((p) => [p.key, p]));
    for (const [key, part] of next) if (!this.current.has(key)) lines.push(part.stalled);
    for (const [key, part] of this.current) if (!next.has(key) && there(part)) lines.push(part.resumed);
    this.current = next;
    return lines;
  }
}

/** A stalled part is still there: the same process, alive (not a zombie), or its cgroup dir present. */
export function stillThere(roots: HostRoots, part: StalledPart): boolean {
  if (part.pid !== null) return part.startTime !== null && isSameProcess(roots, part.pid, part.startTime);
  return part.dir !== null && existsSync(part.dir);
}
