import { existsSync, rmdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { RefusedError, RollbackIncompleteError, kernelWriteError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readPids } from "./memoryFiles.js";
import { assembleWorkerCgroup, type CgroupDir, type WorkerCgroup } from "./paths.js";
import { listHogRecords, readMarker, removeHogRecord, removeMarker } from "./stateFiles.js";
import { isInCgroup, readComm } from "./tasks.js";

export interface TeardownOptions {
  stateDir: string;
  /** Bound on killing, waiting for empty, and rmdir backoff together. */
  timeoutMs?: number;
}

export interface KilledTask {
  pid: number;
  comm: string | null;
  dir: string;
}

export type TeardownResult =
  | { kind: "nothing"; looked: string[] }
  | {
      kind: "removed";
      removed: string[];
      /** Dirs the marker named that were already gone (e.g. removed by cgdelete). */
      alreadyGone: string[];
      killed: KilledTask[];
      /** Thrash files of SIGKILLed hogs that drill unlinked. */
      unlinked: string[];
      /** How the cgroup was emptied: cgroup.kill, SIGKILL by pid, or it was empty. */
      method: Array<"cgroup.kill" | "sigkill-by-pid" | "empty">;
    };

function inode(dir: string): number | null {
  try {
    return statSync(dir).ino;
  } catch {
    return null;
  }
}

/**
 * The cgroup as drill made it: the marker's dirs when there is one (the twin
 * sits under the unified cgroup of whoever ran setup, which need not be ours).
 */
export function markedWorkerCgroup(cgroup: WorkerCgroup, stateDir: string): WorkerCgroup | null {
  const marker = readMarker(stateDir, cgroup);
  if (!marker) return null;
  const find = (version: 1 | 2): CgroupDir | null => marker.dirs.find((d) => d.version === version) ?? null;
  const memory = cgroup.layout === "v2" ? null : find(1);
  const unified = find(2);
  if (!memory && !unified) return null;
  return assembleWorkerCgroup(cgroup.name, cgroup.layout, memory, unified);
}

/**
 * Kills what is inside and removes the cgroup from every hierarchy (DESIGN:
 * kill first, verify empty, rmdir with backoff). Never moves a live task to
 * the parent: that would lift its limit. Only cgroups drill created (marker)
 * are touched; a foreign one is refused with its tasks left alone.
 */
export async function teardownWorkerCgroup(roots: HostRoots, computed: WorkerCgroup, options: TeardownOptions): Promise<TeardownResult> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  const marker = readMarker(options.stateDir, computed);
  const cgroup = markedWorkerCgroup(computed, options.stateDir) ?? computed;
  const present = cgroup.dirs.filter((d) => existsSync(d.dir));

  if (!marker) {
    if (present.length === 0) return { kind: "nothing", looked: cgroup.dirs.map((d) => d.dir) };
    const tasks = present.flatMap((d) => {
      const pids = readPids(path.join(d.dir, "cgroup.procs"));
      return pids.ok ? pids.value.map((pid) => `${pid} (${readComm(roots, pid) ?? "?"})`) : [];
    });
    throw new RefusedError(
      `${present.map((d) => d.dir).join(" and ")} ${present.length > 1 ? "were" : "was"} not created by drill (no marker in ${path.join(options.stateDir, "cgroups")}); ` +
        `leaving it${tasks.length > 0 ? ` and its tasks ${tasks.join(", ")}` : ""} alone`,
    );
  }
  for (const dir of present) {
    const recorded = marker.dirs.find((d) => d.dir === dir.dir)?.inode ?? null;
    const now = inode(dir.dir);
    if (recorded !== null && now !== null && recorded !== now) {
      throw new RefusedError(`${dir.dir} was recreated by someone else since drill made it (inode ${now}, drill recorded ${recorded}); leaving it alone`);
    }
  }

  const killed: KilledTask[] = [];
  const method = new Set<"cgroup.kill" | "sigkill-by-pid" | "empty">();
  const leftovers = await killUntilEmpty(roots, present, deadline, killed, method);
  if (leftovers.length > 0) {
    throw new RollbackIncompleteError(
      `cgroup not empty after ${Math.round(timeoutMs / 1000)} s; still inside: ` +
        leftovers.map((t) => `pid ${t.pid} (${t.comm ?? "?"}) in ${t.dir}`).join(", ") +
        ". Not moved to the parent (that would lift its limit); kill it and run teardown again",
    );
  }

  const removed: string[] = [];
  const notRemoved: string[] = [];
  for (const dir of present) {
    if (await rmdirWithBackoff(dir.dir, deadline)) removed.push(dir.dir);
    else notRemoved.push(dir.dir);
  }
  if (notRemoved.length > 0) {
    throw new RollbackIncompleteError(
      `could not remove ${notRemoved.join(", ")} (still busy after ${Math.round(timeoutMs / 1000)} s: a child cgroup inside, or tasks still exiting); ` +
        "run teardown again, or check cgroup.procs and child directories",
    );
  }

  // The hog unlinks its thrash file on every exit but SIGKILL: finish its job.
  const unlinked: string[] = [];
  for (const { file, record } of listHogRecords(options.stateDir, computed)) {
    if (record.file && existsSync(record.file)) {
      rmSync(record.file, { force: true });
      unlinked.push(record.file);
    }
    if (record.logFile) rmSync(record.logFile, { force: true });
    removeHogRecord(file);
  }
  removeMarker(options.stateDir, computed);
  if (method.size === 0) method.add("empty");
  return {
    kind: "removed",
    removed,
    alreadyGone: cgroup.dirs.filter((d) => !present.includes(d)).map((d) => d.dir),
    killed,
    unlinked,
    method: [...method],
  };
}

/**
 * cgroup.kill where it exists (v2, hybrid twin), then SIGKILL by pid for
 * anything still listed, re-reading cgroup.procs until every dir is empty:
 * a hog that forks is caught on the next sweep, one ignoring SIGTERM never
 * gets a choice. Each pid is checked to still be in the cgroup before it is
 * signalled, so a pid reused since the read is left alone.
 */
async function killUntilEmpty(
  roots: HostRoots,
  dirs: CgroupDir[],
  deadline: number,
  killed: KilledTask[],
  method: Set<"cgroup.kill" | "sigkill-by-pid" | "empty">,
): Promise<KilledTask[]> {
  const seen = new Set<number>();
  let wait = 20;
  for (;;) {
    const inside: KilledTask[] = [];
    for (const dir of dirs) {
      const pids = readPids(path.join(dir.dir, "cgroup.procs"));
      if (!pids.ok) {
        if (pids.reason === "missing") continue; // removed under us (cgdelete): nothing inside
        throw kernelWriteError(pids.file, new Error(pids.reason), "read");
      }
      for (const pid of pids.value) inside.push({ pid, comm: readComm(roots, pid), dir: dir.dir });
    }
    if (inside.length === 0) return [];
    if (inside.some((t) => t.pid === process.pid)) {
      throw new RollbackIncompleteError(`drill itself (pid ${process.pid}) is inside ${inside.find((t) => t.pid === process.pid)!.dir}; run teardown from outside the cgroup`);
    }
    if (Date.now() >= deadline) return inside;

    for (const dir of dirs) {
      const killFile = path.join(dir.dir, "cgroup.kill");
      if (dir.version !== 2 || !existsSync(killFile)) continue;
      try {
        writeFileSync(killFile, "1");
        method.add("cgroup.kill");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw kernelWriteError(killFile, err);
      }
    }
    for (const task of inside) {
      // Reported whether cgroup.kill or the SIGKILL below ends it.
      if (!seen.has(task.pid)) {
        seen.add(task.pid);
        killed.push(task);
      }
      const dir = dirs.find((d) => d.dir === task.dir)!;
      if (!isInCgroup(roots, task.pid, dir)) continue;
      try {
        process.kill(task.pid, "SIGKILL");
        method.add("sigkill-by-pid");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
      }
    }
    await sleep(wait);
    wait = Math.min(wait * 2, 200);
  }
}

/** rmdir, retrying EBUSY (the kernel releases a just-emptied cgroup asynchronously). */
async function rmdirWithBackoff(dir: string, deadline: number): Promise<boolean> {
  let wait = 10;
  for (;;) {
    try {
      rmdirSync(dir);
      return true;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return true;
      if (code !== "EBUSY" && code !== "ENOTEMPTY") throw kernelWriteError(dir, err, "remove");
      if (Date.now() >= deadline + 2_000) return false;
    }
    await sleep(wait);
    wait = Math.min(wait * 2, 250);
  }
}
