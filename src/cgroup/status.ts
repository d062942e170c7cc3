import { existsSync } from "node:fs";
import path from "node:path";
import type { HostRoots } from "../host/kernelFile.js";
import { readPsiFile, type Psi } from "../host/psi.js";
import { readCgroupMemory, readPids, type CgroupMemory, type MissingFile } from "./memoryFiles.js";
import type { WorkerCgroup } from "./paths.js";
import { readMarker } from "./stateFiles.js";
import { readComm } from "./tasks.js";
import { markedWorkerCgroup, withDescendants } from "./teardown.js";

export interface CgroupStatus {
  name: string;
  layout: WorkerCgroup["layout"];
  /** The limits dir exists. */
  exists: boolean;
  /** A drill marker names this cgroup. */
  createdByDrill: boolean;
  dirs: Array<{ version: 1 | 2; dir: string; exists: boolean; role: "limits" | "twin" }>;
  memory: CgroupMemory | null;
  /** The cgroup's own memory.pressure (v2 dir or hybrid twin). */
  pressure: Psi | null;
  pressureFile: string | null;
  /** Every task in any of the dirs, with /proc/<pid>/comm; null when a cgroup.procs could not be read (in `missing`). */
  tasks: Array<{ pid: number; comm: string | null; dirs: string[] }> | null;
  missing: MissingFile[];
}

/** Reads any cgroup at the computed place, drill's or not (e.g. one made with cgcreate). */
export function readCgroupStatus(roots: HostRoots, computed: WorkerCgroup, stateDir: string): CgroupStatus {
  const cgroup = markedWorkerCgroup(computed, stateDir) ?? computed;
  const missing: MissingFile[] = [];
  const dirs = cgroup.dirs.map((d) => ({
    version: d.version,
    dir: d.dir,
    exists: existsSync(d.dir),
    role: d === cgroup.limits ? ("limits" as const) : ("twin" as const),
  }));
  const exists = existsSync(cgroup.limits.dir);
  const memory = exists ? readCgroupMemory(cgroup.limits) : null;
  if (memory) missing.push(...memory.missing);

  let pressure: Psi | null = null;
  const pressureFile = cgroup.pressureFile;
  if (pressureFile && existsSync(path.dirname(pressureFile))) {
    const reading = readPsiFile(pressureFile);
    if (reading.ok) pressure = reading.value;
    else missing.push({ file: reading.file, reason: reading.reason });
  }

  const byPid = new Map<number, string[]>();
  let tasksUnread = false;
  // Child cgroups' tasks too (a task moved below the drill's cgroup): teardown kills them as well.
  const present = cgroup.dirs.filter((d) => existsSync(d.dir));
  for (const d of withDescendants(present)) {
    const pids = readPids(path.join(d.dir, "cgroup.procs"));
    if (!pids.ok) {
      // QA: said "tasks none" beside it; the limits dir's is in memory.missing already.
      tasksUnread = true;
      if (!missing.some((m) => m.file === pids.file)) missing.push({ file: pids.file, reason: pids.reason });
      continue;
    }
    for (const pid of pids.value) byPid.set(pid, [...(byPid.get(pid) ?? []), d.dir]);
  }
  const tasks = tasksUnread ? null : [...byPid.entries()].sort(([a], [b]) => a - b).map(([pid, inDirs]) => ({ pid, comm: readComm(roots, pid), dirs: inDirs }));

  return {
    name: cgroup.name,
    layout: cgroup.layout,
    exists,
    createdByDrill: readMarker(stateDir, computed) !== null,
    dirs,
    memory,
    pressure,
    pressureFile,
    tasks,
    missing,
  };
}
