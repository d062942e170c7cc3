import type { Command } from "commander";
import type { GlobalOptions } from "../context.js";
import { hostRoots } from "../context.js";
import type { HostRoots } from "../host/kernelFile.js";
import { requireLayout } from "./layout.js";
import { DEFAULT_CGROUP_NAME, validateCgroupName, validateParent } from "./names.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "./paths.js";

/** The flags every command acting on the worker cgroup takes (DESIGN: cgroup *, inject, worker, watch, gate). */
export function addCgroupTargetOptions(command: Command): Command {
  return command
    .option("--name <cgroup>", "worker cgroup name", DEFAULT_CGROUP_NAME)
    // No commander default: validateParent reads a missing --parent as the root; the help says so, in doctor's words.
    .option("--parent <path|self>", "parent cgroup: a path from the hierarchy's root, or self, the caller's own cgroup (default: the hierarchy's root)");
}

export interface CgroupTarget {
  roots: HostRoots;
  cgroup: WorkerCgroup;
}

/** Validates --name/--parent (exit 2 before anything is touched), then locates the cgroup in this host's layout. */
export function resolveCgroupTarget(globals: Pick<GlobalOptions, "procfs" | "sysfs">, raw: { name?: string; parent?: string }): CgroupTarget {
  const name = validateCgroupName(raw.name ?? DEFAULT_CGROUP_NAME);
  const parent = validateParent(raw.parent);
  const roots = hostRoots(globals);
  const layout = requireLayout(roots);
  return { roots, cgroup: resolveWorkerCgroup(roots, layout, name, parent) };
}
