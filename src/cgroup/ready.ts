import { existsSync } from "node:fs";
import { drillCommandFor } from "../context.js";
import { RefusedError, UsageError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { sameNameUnderSelf } from "./elsewhere.js";
import type { WorkerCgroup } from "./paths.js";
import { decideOwnership, inspectForSetup } from "./setup.js";
import { readMarker } from "./stateFiles.js";
import { markedWorkerCgroup } from "./teardown.js";

/**
 * The `drill cgroup setup` that makes the worker cgroup where a command looked
 * for it: with that command's --name, --parent and --state-dir, since copied
 * without them it would make another cgroup (at the hierarchy's root, with
 * its marker elsewhere). `flags`: what else to give. When setup would refuse
 * (a cgroup drill did not create, another drill's, one recreated since), why.
 */
export function setupAdvice(roots: HostRoots, computed: WorkerCgroup, stateDir: string, parent: string | undefined, flags = ""): string {
  const ownership = decideOwnership(inspectForSetup(roots, computed, stateDir));
  if (ownership.kind === "refuse") return `drill cgroup setup would refuse it: ${ownership.reason}`;
  const where = parent === undefined ? "" : ` --parent ${parent}`;
  return `run ${drillCommandFor(stateDir, roots)} cgroup setup --name ${computed.name}${where}${flags} first`;
}

/**
 * The worker cgroup as drill set it up (marker first), every dir present;
 * else an error saying what to do: add --parent self (the same name is under
 * the caller's own cgroup), set it up, or, for dirs drill did not create
 * (`cgroup status`: "not created by drill"), why setup would not.
 */
export function requireSetUpCgroup(roots: HostRoots, computed: WorkerCgroup, stateDir: string, parent: string | undefined): WorkerCgroup {
  const cgroup = markedWorkerCgroup(computed, stateDir) ?? computed;
  const present = cgroup.dirs.filter((d) => existsSync(d.dir));
  if (present.length === cgroup.dirs.length) return cgroup;
  const absent = `no ${cgroup.dirs.filter((d) => !present.includes(d)).map((d) => d.dir).join(", no ")}`;
  const next = absentCgroupNext(roots, computed, stateDir, parent);
  const foreign = present.length > 0 && readMarker(stateDir, computed) === null;
  // Not set up is a command run before its setup or with the wrong --name/--parent (exit 2);
  // a cgroup drill did not create is refused, as setup refuses to adopt it (exit 3).
  if (foreign) throw new RefusedError(`cgroup ${cgroup.name} exists but was not created by drill (${absent}); ${next}`);
  throw new UsageError(`cgroup ${cgroup.name} is not set up: ${absent}; ${next}`);
}

/**
 * What to do about a worker cgroup that is not there where a command looked:
 * add --parent self when that name is under the caller's own cgroup (the usual
 * slip after `setup --parent self`), else the setup that makes it there.
 */
export function absentCgroupNext(roots: HostRoots, computed: WorkerCgroup, stateDir: string, parent: string | undefined): string {
  const underSelf = sameNameUnderSelf(roots, markedWorkerCgroup(computed, stateDir) ?? computed, stateDir);
  return underSelf ? `but ${underSelf.limits.dir} exists under your own cgroup: add --parent self` : setupAdvice(roots, computed, stateDir, parent);
}
