import { createHash } from "node:crypto";
import path from "node:path";
import { existsSync } from "node:fs";
import { DrillError, UsageError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readProcessCgroups, resolveParents, type CgroupLayout, type CgroupLayoutKind } from "./layout.js";
import type { ParentSpec } from "./names.js";

/** One directory of the worker cgroup in one hierarchy. */
export interface CgroupDir {
  version: 1 | 2;
  /** The hierarchy's mount point under --sysfs. */
  mount: string;
  /** Path from the hierarchy's root, as /proc/<pid>/cgroup prints it (`/process_api/x/infer`). */
  cgroupPath: string;
  /** mount + cgroupPath: the directory itself. */
  dir: string;
}

/**
 * The worker cgroup across hierarchies: everything the hog, worker, sampler
 * and rollback need to find it. On hybrid, `memory` holds the limits and its
 * cgroup.procs is authoritative; `unified` is the twin for PSI and cgroup.kill.
 */
export interface WorkerCgroup {
  name: string;
  layout: CgroupLayoutKind;
  /** v1 memory hierarchy dir (hybrid, v1). */
  memory: CgroupDir | null;
  /** v2 dir (v2) or the unified twin (hybrid). */
  unified: CgroupDir | null;
  /** The dir that holds memory limits and events. */
  limits: CgroupDir;
  /** Every cgroup.procs a process must join, authoritative first. */
  procsFiles: string[];
  /** The cgroup's own memory.pressure, or null (legacy v1 has none). */
  pressureFile: string | null;
  /** cgroup.kill (kernel ≥ 5.14), or null; existence is checked at use. */
  killFile: string | null;
  /** Every dir, limits first: what setup creates and teardown removes. */
  dirs: CgroupDir[];
}

function cgroupDir(version: 1 | 2, mount: string, cgroupPath: string): CgroupDir {
  const normalized = path.posix.normalize(`/${cgroupPath}`);
  return { version, mount, cgroupPath: normalized, dir: path.join(mount, normalized) };
}

/**
 * The twin's name: the drill name plus a hash of the v1 path, so two drills
 * with the same --name under different v1 parents (or two test runs) do not
 * share a twin under one unified cgroup.
 */
export function twinName(name: string, memoryCgroupPath: string): string {
  const hash = createHash("sha256").update(memoryCgroupPath).digest("hex").slice(0, 10);
  return `drill-${name}-${hash}`;
}

/** Pure: the worker cgroup for a layout and resolved parents. */
export function workerCgroupAt(layout: CgroupLayout, name: string, parents: { memory: string | null; unified: string | null }): WorkerCgroup {
  let memory: CgroupDir | null = null;
  let unified: CgroupDir | null = null;
  if (layout.kind === "v2") {
    unified = cgroupDir(2, layout.unifiedMount!, path.posix.join(parents.unified ?? "/", name));
  } else {
    memory = cgroupDir(1, layout.memoryMount!, path.posix.join(parents.memory ?? "/", name));
    if (layout.kind === "hybrid") {
      unified = cgroupDir(2, layout.unifiedMount!, path.posix.join(parents.unified ?? "/", twinName(name, memory.cgroupPath)));
    }
  }
  return assembleWorkerCgroup(name, layout.kind, memory, unified);
}

export function assembleWorkerCgroup(name: string, layout: CgroupLayoutKind, memory: CgroupDir | null, unified: CgroupDir | null): WorkerCgroup {
  const limits = memory ?? unified;
  if (!limits) throw new Error("a worker cgroup needs at least one directory");
  const dirs = [memory, unified].filter((d): d is CgroupDir => d !== null);
  return {
    name,
    layout,
    memory,
    unified,
    limits,
    procsFiles: dirs.map((d) => path.join(d.dir, "cgroup.procs")),
    pressureFile: unified ? path.join(unified.dir, "memory.pressure") : null,
    killFile: unified ? path.join(unified.dir, "cgroup.kill") : null,
    dirs,
  };
}

/**
 * The worker cgroup at directories recorded earlier (a drill's state), or null
 * when they do not fit this layout. Rollback uses the record, not --parent:
 * `self` resolved again from another shell, tmux window or cron job would be
 * somebody else's cgroup.
 */
export function workerCgroupFromDirs(layout: CgroupLayout, name: string, dirs: readonly string[]): WorkerCgroup | null {
  let memory: CgroupDir | null = null;
  let unified: CgroupDir | null = null;
  const under = (mount: string | null, dir: string): string | null => {
    if (mount === null) return null;
    const rel = path.relative(mount, dir);
    return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel) ? rel : null;
  };
  for (const dir of dirs) {
    const inMemory = under(layout.memoryMount, dir);
    const inUnified = under(layout.unifiedMount, dir);
    if (inUnified !== null && unified === null) unified = cgroupDir(2, layout.unifiedMount!, inUnified);
    else if (inMemory !== null && memory === null) memory = cgroupDir(1, layout.memoryMount!, inMemory);
    else return null;
  }
  if (layout.kind !== "v2" && memory === null) return null;
  if (layout.kind === "v2" && (unified === null || memory !== null)) return null;
  return assembleWorkerCgroup(name, layout.kind, memory, unified);
}

/** Resolves --name/--parent (with `self` read from <procfs>/self/cgroup) to the worker cgroup. */
export function resolveWorkerCgroup(roots: HostRoots, layout: CgroupLayout, name: string, parent: ParentSpec): WorkerCgroup {
  const selfFile = roots.proc("self", "cgroup");
  // Only needed for `self` and for the hybrid twin; a missing file is fine otherwise.
  const needSelf = parent.kind === "self" || layout.kind === "hybrid";
  const self = needSelf ? readProcessCgroups(roots) : null;
  if (self && !self.ok) {
    throw new DrillError(`cannot read ${self.file}: ${self.reason} (needed for --parent self and the unified twin)`);
  }
  const parents = resolveParents(layout, parent, self?.value ?? { memory: null, unified: null }, selfFile);
  return workerCgroupAt(layout, name, parents);
}

/**
 * A --parent that does not exist is a typo, not an unsafe host: exit 2 naming
 * the flag and the dir, instead of a refusal over the probe's ENOENT.
 */
export function requireParentDirs(probe: WorkerCgroup, parent: ParentSpec): void {
  if (parent.kind !== "path") return;
  for (const dir of probe.dirs) {
    const parentDir = path.dirname(dir.dir);
    if (!existsSync(parentDir)) {
      throw new UsageError(`--parent ${parent.path}: no such cgroup: ${parentDir} does not exist (create it, or use / or self)`);
    }
  }
}
