import { existsSync } from "node:fs";
import path from "node:path";
import { drillCommandFor, shellWord } from "../context.js";
import { drillRunsOf } from "../drill/strays.js";
import { RefusedError, UsageError } from "../errors.js";
import { readKernelText, type HostRoots } from "../host/kernelFile.js";
import { sameNameUnderSelf } from "./elsewhere.js";
import type { WorkerCgroup } from "./paths.js";
import { decideOwnership, existingDirs, inspectForSetup, notCreatedByDrill, readUpHolder, upHolderRefusal, type UpHolder } from "./setup.js";
import { markerFile, readMarker } from "./stateFiles.js";
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
  const where = parent === undefined ? "" : ` --parent ${shellWord(parent)}`;
  return `run ${drillCommandFor(stateDir, roots)} cgroup setup --name ${shellWord(computed.name)}${where}${flags} first`;
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

/** Who joins: `drill worker` or `drill inject`, with its --force and the DRILL_RUN_ID it was started with. */
export interface Joiner {
  command: "worker" | "inject";
  force: boolean;
  /** DRILL_RUN_ID: set by `drill up` for the worker and hogs it spawns, so they join its cgroup. */
  runId: string | undefined;
}

/**
 * Refuses a worker or hog the cgroup (as requireSetUpCgroup found it) is not
 * theirs to join (QA: a hand-run worker joined a drill's cgroup unsaid, and
 * that drill's rollback killed it; inject ran in a plain mkdir):
 * - one drill did not create (setup's own judgement, notCreatedByDrill),
 *   exit 3 even with --force, as setup and teardown refuse it;
 * - the worker cgroup of a drill that is up, unless this process is that
 *   run's own child (up gives each DRILL_RUN_ID) or --force says so: then
 *   the drill it joins is returned, for the caller to say.
 */
export function refuseForeignJoin(roots: HostRoots, computed: WorkerCgroup, cgroup: WorkerCgroup, stateDir: string, joiner: Joiner): UpHolder | null {
  const marker = readMarker(stateDir, computed);
  const existing = existingDirs(roots, cgroup);
  const foreign = notCreatedByDrill(existing, marker, markerFile(stateDir, computed));
  if (foreign) {
    const runs = drillRunsOf(roots, existing.flatMap((e) => (e.tasks ?? []).map((t) => t.pid)));
    // A drill's tasks in it: its state is in another --state-dir, where its rollback would kill what joins.
    const way = runs.length > 0 ? `It holds tasks of drill run ${runs.join(", ")}: pick another --name` : (foreign.way ?? "Pick another --name");
    throw new RefusedError(`cgroup ${cgroup.name} was not created by drill: ${foreign.fact}; refusing to run ${joiner.command} in it. ${way}`);
  }
  const holder = readUpHolder(stateDir, marker, [...new Set([...cgroup.dirs, ...computed.dirs].map((d) => d.dir))]);
  if (holder === null || holder.runId === joiner.runId) return null;
  if (joiner.force) return holder;
  const what = joiner.command === "worker" ? "a worker" : "a hog";
  throw new RefusedError(
    upHolderRefusal(
      cgroup.dirs.map((d) => d.dir),
      holder,
      drillCommandFor(stateDir, roots),
      `run ${what} started by hand in it (its rollback would kill it with the drill's own)`,
      " first, or pick another --name; --force joins it anyway",
    ),
  );
}

/** What --force says when it joins a drill's cgroup anyway (as `cgroup teardown --force` says what it did). */
export function forcedJoinWarning(holder: UpHolder, cgroup: WorkerCgroup, command: Joiner["command"]): string {
  const up = holder.phase === null ? "maybe up (state unreadable)" : `up (${holder.phase})`;
  return `warning: --force: ${command} joins cgroup ${cgroup.name}, the worker cgroup of drill ${holder.drill} (run ${holder.runId}), which is ${up}: its rollback kills this ${command === "worker" ? "worker" : "hog"} with the drill's own`;
}

/**
 * Refuses a worker cgroup that reads frozen (cgroup.events `frozen 1`: its
 * own cgroup.freeze, or an ancestor's): what joins it stops at its first
 * instruction and never runs (QA: inject printed `fill touched n/a` every
 * second until Ctrl-C, nothing said of the freeze; the worker hung the same).
 * Only run by hand: what `drill up` started (DRILL_RUN_ID) waits for the
 * thaw, as up says the freeze as a stall with its resume command.
 */
export function refuseFrozen(cgroup: WorkerCgroup, joiner: Pick<Joiner, "command" | "runId">): void {
  if (joiner.runId !== undefined) return;
  for (const dir of cgroup.dirs) {
    if (dir.version !== 2) continue;
    const eventsFile = path.join(dir.dir, "cgroup.events");
    const events = readKernelText(eventsFile);
    if (!events.ok || !/^frozen 1$/m.test(events.value)) continue;
    const freezeFile = path.join(dir.dir, "cgroup.freeze");
    const own = readKernelText(freezeFile);
    const thaw = own.ok && own.value.trim() === "1" ? `thaw it first: echo 0 > ${shellWord(freezeFile)}` : `an ancestor of it is frozen (its own cgroup.freeze is not 1): thaw that one first`;
    const what = joiner.command === "worker" ? "a worker" : "the hog";
    throw new RefusedError(`cgroup ${cgroup.name} is frozen (${eventsFile}: frozen 1): ${what} would stop at its first instruction and never run; ${thaw}`);
  }
}

/**
 * v1 with the OOM killer disabled in the cgroup (memory.oom_control
 * oom_kill_disable 1, which a new v1 cgroup inherits from its parent, as
 * under `docker run --oom-kill-disable`): anonymous memory over the limit
 * waits at it for ever, never OOM-killed (QA: `fill touched 77.0MiB/200MiB …
 * stall 0.0%` every second until Ctrl-C, nothing said; a worker's KV memory
 * hung the same). Refused whoever started it: up says no such wait (it is
 * no freeze nor a stopped process), so its own worker or hog would hang too.
 * Inject calls it for anon only: a thrash file's pages are reclaimed instead.
 */
export function refuseOomKillDisabled(cgroup: WorkerCgroup, command: Joiner["command"]): void {
  if (cgroup.limits.version !== 1) return;
  const file = path.join(cgroup.limits.dir, "memory.oom_control");
  const text = readKernelText(file);
  if (!text.ok || !/^oom_kill_disable 1$/m.test(text.value)) return;
  const what = command === "worker" ? "a worker whose KV memory goes over the limit" : "an anon hog over the limit";
  const or = command === "worker" ? "" : ", or use --mode thrash";
  throw new RefusedError(
    `the OOM killer is disabled in ${cgroup.limits.dir} (${file}: oom_kill_disable 1; a v1 cgroup inherits it from its parent): ` +
      `${what} would wait at it for ever, never OOM-killed; enable it (echo 0 > ${shellWord(file)})${or}`,
  );
}
