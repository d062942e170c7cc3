import { existsSync } from "node:fs";
import type { HostRoots, Reading } from "../host/kernelFile.js";
import { detectLayout } from "./layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "./paths.js";
import { markedWorkerCgroup } from "./teardown.js";

/**
 * The same --name under the caller's own cgroup, when the one asked for is not
 * there but that one is: the usual slip is `cgroup setup --parent self` and a
 * later command without `--parent self`. Null when --parent already meant self,
 * or nothing of that name is there either.
 */
export function sameNameUnderSelf(roots: HostRoots, asked: WorkerCgroup, stateDir: string): WorkerCgroup | null {
  const layout = detectLayout(roots);
  if (!layout.ok) return null;
  let computed: WorkerCgroup;
  try {
    computed = resolveWorkerCgroup(roots, layout.value, asked.name, { kind: "self" });
  } catch {
    return null; // no readable /proc/self/cgroup: nothing to suggest
  }
  let candidate = computed;
  try {
    candidate = markedWorkerCgroup(computed, stateDir) ?? computed;
  } catch {
    // An unreadable marker is the real command's business; a hint does not fail on it.
  }
  if (candidate.limits.dir === asked.limits.dir) return null;
  return existsSync(candidate.limits.dir) ? candidate : null;
}

/**
 * One stderr line when the worker cgroup is not there: without it the gate
 * decides on host signals alone and watch's cg_* fields read null, with
 * nothing saying where they looked (a --parent slip looks just like a cgroup
 * not set up yet). `who` says it, `stays` is what that means for it. Null
 * when the cgroup is there.
 */
export function absentCgroupHint(who: string, stays: string, roots: HostRoots, stateDir: string, name: string, cgroup: Reading<WorkerCgroup>): string | null {
  // Not found where to look (the cgroup may well be there): the file that did not read, not the cgroup's absence.
  if (!cgroup.ok) return `${who}: cannot tell where cgroup ${name} is: ${cgroup.file}: ${cgroup.reason}; ${stays}`;
  if (existsSync(cgroup.value.limits.dir)) return null;
  const looked = cgroup.value.dirs.map((d) => d.dir).join(", ");
  const underSelf = sameNameUnderSelf(roots, cgroup.value, stateDir);
  const next = underSelf
    ? `${underSelf.limits.dir} exists under your own cgroup: add --parent self`
    : "check --name and --parent (default: the hierarchy's root; self: your own cgroup), or set it up";
  return `${who}: no cgroup ${name} at ${looked} (yet): ${stays} until it appears; ${next}`;
}
