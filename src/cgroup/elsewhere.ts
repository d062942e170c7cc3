import { existsSync } from "node:fs";
import type { HostRoots } from "../host/kernelFile.js";
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
