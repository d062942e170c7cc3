import { existsSync } from "node:fs";
import path from "node:path";
import { DrillError } from "../errors.js";
import { fail, ok, readKernelText, type HostRoots, type Reading } from "../host/kernelFile.js";
import type { ParentSpec } from "./names.js";

/**
 * The three host layouts of DESIGN.md:
 * - v2: one unified hierarchy at /sys/fs/cgroup (limits, PSI and cgroup.kill in one dir);
 * - hybrid: v1 controllers under /sys/fs/cgroup/<ctrl> (memory limits live there)
 *   plus cgroup2 at /sys/fs/cgroup/unified (no controllers, but PSI and cgroup.kill);
 * - v1: legacy, memory controller only; no per-cgroup PSI, no cgroup.kill.
 */
export type CgroupLayoutKind = "v2" | "hybrid" | "v1";

export interface CgroupLayout {
  kind: CgroupLayoutKind;
  /** Mount of the v1 memory hierarchy (hybrid, v1). */
  memoryMount: string | null;
  /** Mount of the cgroup2 hierarchy (v2: the cgroup root, hybrid: <root>/unified). */
  unifiedMount: string | null;
}

/**
 * Detection from files only (never from `mount`), so a fake tree under
 * --sysfs is detected the same way as the host.
 */
export function detectLayout(roots: HostRoots): Reading<CgroupLayout> {
  const root = roots.cgroupRoot();
  if (existsSync(path.join(root, "cgroup.controllers"))) {
    return ok({ kind: "v2", memoryMount: null, unifiedMount: root });
  }
  const memory = path.join(root, "memory");
  const hasMemory = existsSync(path.join(memory, "memory.limit_in_bytes"));
  const unified = path.join(root, "unified");
  const hasUnified = existsSync(path.join(unified, "cgroup.procs")) && existsSync(path.join(unified, "cgroup.controllers"));
  if (hasMemory && hasUnified) return ok({ kind: "hybrid", memoryMount: memory, unifiedMount: unified });
  if (hasMemory) return ok({ kind: "v1", memoryMount: memory, unifiedMount: null });
  return fail(root, hasUnified
    ? "cgroup2 is mounted at unified/ but no v1 memory controller is mounted: no place for memory limits"
    : "no cgroup2 (cgroup.controllers) and no v1 memory controller (memory/memory.limit_in_bytes) under it");
}

/** detectLayout, or a DrillError naming what is missing (for commands). */
export function requireLayout(roots: HostRoots): CgroupLayout {
  const layout = detectLayout(roots);
  if (!layout.ok) throw new DrillError(`no usable memory cgroup hierarchy at ${layout.file}: ${layout.reason}`);
  return layout.value;
}

export interface ProcCgroupLine {
  hierarchyId: number;
  /** Empty for the cgroup2 line; `name=systemd` style named hierarchies are kept as is. */
  controllers: string[];
  /** Path from the hierarchy's root, always starting with `/`. */
  path: string;
}

/**
 * Parses /proc/<pid>/cgroup, one line per hierarchy:
 *   4:memory:/process_api/b4e5d37cbcb461409beb545eea62eb0e
 *   0::/
 * The path is everything after the second colon (it may itself contain colons).
 */
export function parseProcCgroup(text: string, file: string): Reading<ProcCgroupLine[]> {
  const lines: ProcCgroupLine[] = [];
  for (const raw of text.split("\n")) {
    if (raw.trim() === "") continue;
    const first = raw.indexOf(":");
    const second = first < 0 ? -1 : raw.indexOf(":", first + 1);
    if (second < 0) return fail(file, `unparseable line "${raw.slice(0, 60)}"`);
    const idText = raw.slice(0, first);
    if (!/^\d+$/.test(idText)) return fail(file, `bad hierarchy id in "${raw.slice(0, 60)}"`);
    const controllersText = raw.slice(first + 1, second);
    const cgPath = raw.slice(second + 1);
    if (!cgPath.startsWith("/")) return fail(file, `path is not absolute in "${raw.slice(0, 60)}"`);
    lines.push({
      hierarchyId: Number(idText),
      controllers: controllersText === "" ? [] : controllersText.split(","),
      path: cgPath,
    });
  }
  if (lines.length === 0) return fail(file, "empty");
  return ok(lines);
}

/** Where a process sits in each hierarchy that matters to the drill. */
export interface ProcessCgroups {
  /** v1 memory hierarchy path, or null when the process file has no memory line. */
  memory: string | null;
  /** cgroup2 path (the `0::` line), or null. */
  unified: string | null;
}

export function processCgroups(lines: ProcCgroupLine[]): ProcessCgroups {
  const memory = lines.find((line) => line.hierarchyId !== 0 && line.controllers.includes("memory"));
  const unified = lines.find((line) => line.hierarchyId === 0 && line.controllers.length === 0);
  return { memory: memory?.path ?? null, unified: unified?.path ?? null };
}

/** Reads <procfs>/<pid>/cgroup (default: the caller, `self`). */
export function readProcessCgroups(roots: HostRoots, pid: number | "self" = "self"): Reading<ProcessCgroups> {
  const file = roots.proc(String(pid), "cgroup");
  const text = readKernelText(file);
  if (!text.ok) return text;
  const lines = parseProcCgroup(text.value, file);
  return lines.ok ? ok(processCgroups(lines.value)) : lines;
}

/** Parent paths (from each hierarchy's root) for the worker cgroup. */
export interface ResolvedParents {
  /** v1 memory hierarchy parent (hybrid, v1). */
  memory: string | null;
  /** v2 parent (v2), or on hybrid the caller's own unified cgroup, where the twin goes. */
  unified: string | null;
}

/**
 * --parent per hierarchy. An explicit path names the parent in the hierarchy
 * that holds the limits; on hybrid the unified twin always goes under the
 * caller's own unified cgroup (it carries no limits, only PSI and cgroup.kill,
 * and the caller's cgroup is the one it may certainly write under).
 */
export function resolveParents(layout: CgroupLayout, parent: ParentSpec, self: ProcessCgroups, selfFile: string): ResolvedParents {
  const need = (value: string | null, what: string): string => {
    if (value === null) throw new DrillError(`cannot resolve --parent self: ${selfFile} has no ${what} line`);
    return value;
  };
  const explicit = parent.kind === "path" ? parent.path : null;
  switch (layout.kind) {
    case "v2":
      return { memory: null, unified: explicit ?? need(self.unified, "0:: (cgroup2)") };
    case "hybrid":
      return { memory: explicit ?? need(self.memory, "memory"), unified: need(self.unified, "0:: (cgroup2)") };
    case "v1":
      return { memory: explicit ?? need(self.memory, "memory"), unified: null };
  }
}
