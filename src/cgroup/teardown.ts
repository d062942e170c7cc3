import { accessSync, constants, existsSync, readdirSync, readlinkSync, rmdirSync, statSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { drillCommandFor } from "../context.js";
import { RefusedError, RollbackIncompleteError, kernelWriteError } from "../errors.js";
import { readKernelText, writeKernelFile, type HostRoots } from "../host/kernelFile.js";
import { drillRunsOf } from "../drill/strays.js";
import { readPids } from "./memoryFiles.js";
import { requireLayout } from "./layout.js";
import { assembleWorkerCgroup, workerCgroupFromDirs, type CgroupDir, type WorkerCgroup } from "./paths.js";
import { readUpHolder, upHolderRefusal, workerCgroupOf, type UpHolder } from "./setup.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";
import { discardHogRecord, listHogRecords, listMarkers, listServedQueues, markerFile, readMarker, removeMarker, type CgroupMarker, type CgroupOwner } from "./stateFiles.js";
import { isInCgroup, isInCgroupTree, readComm, SignalRefusedError, signalError } from "./tasks.js";
import { isSameProcess, readProcessStat } from "../host/process.js";
import { distinctQueues, type ServedQueue } from "../worker/served.js";
import { parseWeightsFileName } from "../worker/weightsFile.js";

export interface TeardownOptions {
  stateDir: string;
  /** Bound on killing, waiting for empty, and rmdir backoff together. */
  timeoutMs?: number;
  /**
   * The drill run whose rollback this is: a cgroup whose marker names another
   * drill is refused (its tasks left alone). `drill cgroup teardown` gives none.
   */
  owner?: CgroupOwner;
  /**
   * `drill cgroup teardown --force`: tear down the worker cgroup of a drill
   * that is up (refused without it: its worker and hog die mid-drill).
   */
  force?: boolean;
  /** How long SIGTERM is given before the kill (TERM_GRACE_MS). */
  termGraceMs?: number;
  /**
   * Told as the teardown of each cgroup (this one, or one set up inside it)
   * reaches a stage: for a command stopped in the middle to say where.
   */
  onStage?: (stage: TeardownStage, cgroupName: string) => void;
  /** Filled as the teardown goes (newTeardownProgress): what a command stopped in the middle reports as done. */
  progress?: TeardownProgress;
}

/**
 * What a teardown has done so far, the cgroups set up inside it included:
 * the fields of its result, kept up to date as it goes, so a command stopped
 * half-way (cgroup teardown's second Ctrl-C) can say what it did.
 */
export interface TeardownProgress {
  removed: string[];
  alreadyGone: string[];
  killed: KilledTask[];
  unlinked: string[];
  method: Set<TeardownMethod>;
  forced: UpHolder | null;
  /** The queues workers launched into it served (`drill worker` records them): their admission may still be open. */
  queuesServed: ServedQueue[];
  /** Why those records could not be read (the served dir unreadable): the queues go unnamed, the teardown goes on. */
  queuesServedUnread: string | null;
  /** The tasks this user may not signal (EPERM: another user's, drill not root), by pid: never in `killed`. */
  refused: Map<number, RefusedTask>;
}

export function newTeardownProgress(): TeardownProgress {
  return { removed: [], alreadyGone: [], killed: [], unlinked: [], method: new Set(), forced: null, queuesServed: [], queuesServedUnread: null, refused: new Map() };
}

/** Where a teardown is: giving its tasks SIGTERM's grace, killing what is left, removing the dirs. */
export type TeardownStage = "sigterm" | "kill" | "remove";

/** How the cgroup was emptied; `drill cgroup teardown --json` prints these in `method`, rollback joins them with `+`. */
export type TeardownMethod = "sigterm" | "cgroup.kill" | "freeze-kill-thaw" | "sigkill-by-pid" | "empty";

/** Sends a signal (SIGTERM or SIGKILL), throwing like process.kill (ESRCH once the pid is gone); tests inject one. */
export type SendSignal = (pid: number) => void;

const sendSigkill: SendSignal = (pid) => process.kill(pid, "SIGKILL");
const sendSigterm: SendSignal = (pid) => process.kill(pid, "SIGTERM");

/**
 * How long teardown waits after SIGTERM before the kill. A worker gives its
 * working list back to admitted, and it and a hog unlink their files (the
 * worker's weights, the hog's map: /var/tmp, up to the host's RAM) on
 * SIGTERM; SIGKILL skips all of it, and only the caller that recorded a file
 * can unlink it after. Short: a task stuck in reclaim gets the kill.
 */
export const TERM_GRACE_MS = 3_000;

/**
 * How long one sweep waits for cgroup.events `frozen 1`: a task in D state
 * (a thrashing hog in a page fault) only stops when it leaves the kernel, and
 * SIGKILL reaches it then whether or not the freeze completed.
 */
const FREEZE_WAIT_MS = 1_000;

export interface KilledTask {
  pid: number;
  comm: string | null;
  dir: string;
}

/** A task the kernel would not let this user signal, and why (whose it is, run as root). */
export interface RefusedTask extends KilledTask {
  why: string;
}

export type TeardownResult =
  | { kind: "nothing"; looked: string[] }
  | {
      kind: "removed";
      removed: string[];
      /** Dirs the marker named that were already gone (e.g. removed by cgdelete). */
      alreadyGone: string[];
      killed: KilledTask[];
      /** Thrash files of SIGKILLed hogs, and weights files of SIGKILLed workers, that drill unlinked. */
      unlinked: string[];
      /** How the cgroup was emptied: cgroup.kill, freeze → SIGKILL by pid → thaw, SIGKILL by pid alone, or it was empty. */
      method: TeardownMethod[];
      /** The drill that was up with this cgroup, torn down anyway (--force); null otherwise. */
      forced: UpHolder | null;
      /** The queues workers launched into it served (each once, URLs as given): nothing runs their jobs now. */
      queuesServed: ServedQueue[];
      /** Why the records of those queues could not be read; null when they were. */
      queuesServedUnread: string | null;
      /**
       * Its records in the state dir it could not remove (the marker, a served
       * queue's record: their dir immutable, read-only), each with why: the
       * cgroup is gone, the teardown run again removes them (exit 4 till then).
       */
      left: string[];
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
  return marker ? cgroupOfMarker(marker, cgroup) : null;
}

/**
 * For the observers (watch, gate): markedWorkerCgroup, and with no --parent
 * given, the one cgroup of that name drill made from this state dir under
 * another parent (`cgroup setup --parent self`, a drill file's
 * cgroup.parent), found by its name as they find the drill's Redis from the
 * state dir (QA: `watch --name` without `--parent self` read every cg_* as
 * null). Two of that name, or none there any more: not guessed.
 */
export function recordedWorkerCgroup(cgroup: WorkerCgroup, stateDir: string, parentGiven: boolean): WorkerCgroup | null {
  const marked = markedWorkerCgroup(cgroup, stateDir);
  if (marked !== null || parentGiven) return marked;
  const named = listMarkers(stateDir)
    .map(({ marker }) => marker)
    .filter((m) => m.name === cgroup.name && m.layout === cgroup.layout && m.state === "created" && m.dirs.some((d) => existsSync(d.dir)));
  return named.length === 1 ? cgroupOfMarker(named[0]!, cgroup) : null;
}

function cgroupOfMarker(marker: CgroupMarker, cgroup: WorkerCgroup): WorkerCgroup | null {
  const find = (version: 1 | 2): CgroupDir | null => marker.dirs.find((d) => d.version === version) ?? null;
  const memory = cgroup.layout === "v2" ? null : find(1);
  const unified = find(2);
  if (!memory && !unified) return null;
  return assembleWorkerCgroup(cgroup.name, cgroup.layout, memory, unified);
}

/**
 * The owner the marker names when it is another drill than `expected`, else
 * null. Only the drill is compared, not the run: one run of a drill name is
 * up at a time (its lock, and up refuses while its state is not complete),
 * and state.json names the newest run, written before that run's setup. So a
 * marker naming an earlier run of the same drill is this drill's own
 * leftover: one its run adopted (the marker takes the new run only once
 * setup writes it, after up recorded the cgroup in state.json), or one its
 * earlier rollback could not remove. A marker with no owner (drill cgroup
 * setup, older versions) is torn down as before.
 */
export function foreignOwner(marker: CgroupMarker, expected: CgroupOwner | undefined): CgroupOwner | null {
  if (!expected || !marker.owner) return null;
  return marker.owner.drill === expected.drill ? null : marker.owner;
}

/**
 * Kills what is inside and removes the cgroup from every hierarchy (DESIGN:
 * kill first, verify empty, rmdir with backoff). Inside means the child
 * cgroups too (someone's mkdir, a task moved there): their tasks are killed
 * and the children removed bottom-up, else the rmdir can never succeed and
 * the task keeps running outside any drill. Never moves a live task to
 * the parent: that would lift its limit. Only cgroups drill created (marker)
 * are touched; a foreign one, or with `owner` one another drill owns, is
 * refused with its tasks left alone. Without `owner` (the operator's own
 * teardown), the worker cgroup of a drill that is up is refused too, unless `force`.
 */
export async function teardownWorkerCgroup(roots: HostRoots, computed: WorkerCgroup, options: TeardownOptions): Promise<TeardownResult> {
  return teardownInto(roots, computed, options, options.progress ?? newTeardownProgress(), true);
}

/** teardownWorkerCgroup, adding what it does to `done`; `top`: the cgroup asked for, not one set up inside it. */
async function teardownInto(roots: HostRoots, computed: WorkerCgroup, options: TeardownOptions, done: TeardownProgress, top: boolean): Promise<TeardownResult> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  const marker = readMarker(options.stateDir, computed);
  const cgroup = markedWorkerCgroup(computed, options.stateDir) ?? computed;
  const present = cgroup.dirs.filter((d) => existsSync(d.dir));

  if (!marker) {
    if (present.length === 0) {
      // Nothing of it left: nor of the queues recorded as served there (a later cgroup of that name is another).
      const left = removeServedRecords(listServedQueues(options.stateDir, computed).served);
      if (left.length > 0) throw new RollbackIncompleteError(`${left.join("; ")}: ${RECORD_LEFT_ADVICE}`);
      return { kind: "nothing", looked: cgroup.dirs.map((d) => d.dir) };
    }
    // Each task once: on a hybrid host it is in the memory cgroup and in its twin.
    const pids = new Set(present.flatMap((d) => {
      const read = readPids(path.join(d.dir, "cgroup.procs"));
      return read.ok ? read.value : [];
    }));
    const tasks = [...pids].map((pid) => `${pid} (${readComm(roots, pid) ?? "?"})`);
    // A drill's tasks in it: its record is in that run's --state-dir, where its rollback removes it (QA S 8).
    const runs = drillRunsOf(roots, pids);
    const elsewhere = runs.length > 0 ? `; it holds tasks of drill run ${runs.join(", ")}: roll that drill back from its --state-dir` : "";
    const dirs = present.map((d) => d.dir);
    throw new RefusedError(
      `${dirs.join(" and ")} ${dirs.length > 1 ? "were" : "was"} not created by drill (no marker in ${path.join(options.stateDir, "cgroups")}); ` +
        `leaving ${dirs.length > 1 ? "them" : "it"}${tasks.length > 0 ? ` and ${dirs.length > 1 ? "their" : "its"} tasks ${tasks.join(", ")}` : ""} alone${elsewhere}`,
    );
  }
  // The operator's own teardown (no owner) of a drill that is up: that drill's rollback is the way.
  const upHolder = options.owner ? null : readUpHolder(options.stateDir, marker, [...new Set([...cgroup.dirs, ...computed.dirs].map((d) => d.dir))]);
  if (upHolder && !options.force) {
    throw new RefusedError(
      upHolderRefusal(cgroup.dirs.map((d) => d.dir), upHolder, drillCommandFor(options.stateDir, roots), "kill its worker and hog mid-drill", " (it stops the drill, drains its queue and removes the cgroup), or give --force to tear it down anyway"),
    );
  }
  const foreign = foreignOwner(marker, options.owner);
  if (foreign) {
    throw new RefusedError(
      `${workerCgroupOf(cgroup.dirs.map((d) => d.dir), foreign)} now, ` +
        `not of drill ${options.owner!.drill} (marker ${markerFile(options.stateDir, computed)}); leaving it and its tasks alone`,
    );
  }
  for (const dir of present) {
    const recorded = marker.dirs.find((d) => d.dir === dir.dir)?.inode ?? null;
    const now = inode(dir.dir);
    if (recorded !== null && now !== null && recorded !== now) {
      throw new RefusedError(`${dir.dir} was recreated by someone else since drill made it (inode ${now}, drill recorded ${recorded}); leaving it alone`);
    }
  }

  if (top) {
    done.forced = upHolder;
    done.alreadyGone.push(...cgroup.dirs.filter((d) => !present.includes(d)).map((d) => d.dir));
  }
  const { killed, method } = done;
  await teardownNested(roots, present, options, done);
  // Read before the kill: a worker's coprocess unlinks its weights file on every exit but SIGKILL.
  const weightsFiles = heldWeightsFiles(roots, present);
  const { served, unread } = listServedQueues(options.stateDir, computed);
  done.queuesServed = distinctQueues([...done.queuesServed, ...served.map(({ record }) => ({ queue: record.queue, url: record.url }))]);
  done.queuesServedUnread ??= unread;
  // The tasks this user may not signal (another user's, drill not root): the others are still stopped, these named at the end.
  const refused = done.refused;
  options.onStage?.("sigterm", cgroup.name);
  await stopGracefully(roots, present, Math.min(deadline, Date.now() + (options.termGraceMs ?? TERM_GRACE_MS)), killed, method, sendSigterm, refused);
  options.onStage?.("kill", cgroup.name);
  const leftovers = await killUntilEmpty(roots, present, deadline, killed, method, sendSigkill, refused);
  if (leftovers.length > 0) throw notEmptyError(roots, leftovers, refused, timeoutMs);

  options.onStage?.("remove", cgroup.name);
  // A task that joined after the kill found it empty (a launcher outside that was
  // still starting spawns its worker in; CI: rmdir then failed busy for 7 s) is
  // killed too, whenever a rmdir finds the cgroup busy with tasks.
  const killLateJoiners = async (): Promise<void> => {
    // The tasks it may not signal stay in `refused`, as in the kill before: named so, never as killed.
    await killUntilEmpty(roots, present, deadline, killed, method, sendSigkill, refused); // returns at once when nothing is inside
  };
  const notRemoved: string[] = [];
  for (const dir of present) {
    // Children first, deepest first: a cgroup with a child cannot be removed.
    const stuck: string[] = [];
    for (const child of descendants(dir).reverse()) {
      if (!(await rmdirWithBackoff(child.dir, deadline, killLateJoiners))) stuck.push(child.dir);
    }
    notRemoved.push(...stuck);
    if (stuck.length === 0 && (await rmdirWithBackoff(dir.dir, deadline, killLateJoiners))) done.removed.push(dir.dir);
    else notRemoved.push(dir.dir);
  }
  if (notRemoved.length > 0) {
    throw new RollbackIncompleteError(
      `could not remove ${notRemoved.join(", ")} (still busy after ${Math.round(timeoutMs / 1000)} s); ` +
        `${describeBusy(roots, present, refused)}; run teardown again, or check cgroup.procs and child directories`,
    );
  }

  // The hog unlinks its thrash file on every exit but SIGKILL: finish its job.
  const discarded = listHogRecords(options.stateDir, computed).map(({ file, record }) => discardHogRecord(file, record));
  done.unlinked.push(...discarded.flatMap((d) => d.unlinked ?? []));
  const weights = removeOrphanedWeightsFiles(roots, weightsFiles);
  done.unlinked.push(...weights.removed);
  // The marker stays with it: the teardown run again finds a hog's record and unlinks the file.
  const filesLeft = [...discarded.flatMap((d) => d.left ?? []), ...weights.left];
  if (filesLeft.length > 0) throw new RollbackIncompleteError(`${filesLeft.join("; ")}: run teardown again once it can be removed, or remove it yourself`);
  // Not rmSync: on a file it may not unlink (its dir immutable) it throws ENOTDIR (QA: a stack trace).
  const markerLeft = removeMarker(options.stateDir, computed);
  // Said by this teardown's caller now; a record left would name the queue again at the next setup's teardown.
  const left = [...(markerLeft === null ? [] : [`could not remove the cgroup's marker ${markerFile(options.stateDir, computed)}: ${markerLeft}`]), ...removeServedRecords(served)];
  return {
    kind: "removed",
    removed: [...done.removed],
    alreadyGone: [...done.alreadyGone],
    killed: [...done.killed],
    unlinked: [...done.unlinked],
    // "empty" only when nothing, nested cgroups included, needed a signal.
    method: method.size === 0 ? ["empty"] : [...method],
    forced: done.forced,
    queuesServed: [...done.queuesServed],
    queuesServedUnread: done.queuesServedUnread,
    left,
  };
}

/** What to do about a record a teardown could not remove. */
export const RECORD_LEFT_ADVICE = "run teardown again once it can be removed, or remove it yourself";

/** Unlinks the records of the queues served in a cgroup that is gone; each it could not, named with why. */
function removeServedRecords(served: ReadonlyArray<{ file: string }>): string[] {
  return served.flatMap(({ file }) => {
    const why = unlinkLeftover(file);
    return why === null ? [] : [`could not remove the record of a queue its workers served ${file}: ${why}`];
  });
}

/**
 * Drill cgroups set up inside this one (`cgroup setup --parent` this cgroup,
 * the same state dir), torn down first and whole: removing this tree takes
 * their v1 dirs with it, but not their hybrid twins (flat under the unified
 * root), their markers or their hogs' files.
 */
async function teardownNested(roots: HostRoots, present: CgroupDir[], options: TeardownOptions, done: TeardownProgress): Promise<void> {
  const inside = (dir: string): boolean => present.some((p) => dir.startsWith(p.dir + path.sep));
  const nested = listMarkers(options.stateDir).filter(({ marker }) => marker.dirs.some((d) => inside(d.dir)));
  if (nested.length === 0) return;
  const layout = requireLayout(roots);
  for (const { marker } of nested) {
    const child = workerCgroupFromDirs(layout, marker.name, marker.dirs.map((d) => d.dir));
    if (child !== null) await teardownInto(roots, child, options, done, false);
  }
}

/**
 * Empties the dirs (DESIGN: cgroup.kill, or freeze → kill → thaw), re-reading
 * cgroup.procs until every dir is empty:
 * - cgroup.kill (≥ 5.14, v2 or the hybrid twin) kills the whole cgroup in one write;
 * - without it, cgroup.freeze (5.2–5.13) stops every task where it stands, so a
 *   forking hog cannot add pids between the read and the kill; each pid then
 *   gets SIGKILL (a frozen task still dies of it in the v2 freezer) and the
 *   cgroup is thawed, also when something failed: a cgroup left frozen keeps
 *   its tasks stopped for good;
 * - with neither (legacy v1), SIGKILL by pid, sweep after sweep.
 * SIGKILL by pid also follows cgroup.kill, for the v1 dir's tasks. Tasks of
 * child cgroups are listed and signalled too: cgroup.kill and cgroup.freeze
 * reach a v2 subtree, but v1 has neither. Each pid is checked to still be in
 * its cgroup before it is signalled, so a pid reused since the read is left alone.
 */
export async function killUntilEmpty(
  roots: HostRoots,
  dirs: CgroupDir[],
  deadline: number,
  killed: KilledTask[],
  method: Set<TeardownMethod>,
  send: SendSignal = sendSigkill,
  refused = new Map<number, RefusedTask>(),
): Promise<KilledTask[]> {
  // Tasks reported already (a SIGTERM before) are not listed twice.
  const seen = new Set<number>(killed.map((t) => t.pid));
  let wait = 20;
  for (;;) {
    // Walked again each sweep: a task may have made a child cgroup since.
    const subtree = withDescendants(dirs);
    const inside = listInside(roots, subtree);
    if (inside.length === 0) return [];
    // Before any freeze: freezing a cgroup drill sits in would stop drill.
    if (inside.some((t) => t.pid === process.pid)) {
      throw new RollbackIncompleteError(`drill itself (pid ${process.pid}) is inside ${inside.find((t) => t.pid === process.pid)!.dir}; run teardown from outside the cgroup`);
    }
    if (Date.now() >= deadline) return inside;

    // A cgroup file this user may not write (root's cgroup, drill not root): its tasks are signalled by pid, each as the kernel lets this user.
    const usable = (dir: CgroupDir, file: string): boolean => dir.version === 2 && existsSync(path.join(dir.dir, file)) && mayWrite(path.join(dir.dir, file));
    let killedAll = false;
    const killedDirs: CgroupDir[] = [];
    for (const dir of dirs) {
      const killFile = path.join(dir.dir, "cgroup.kill");
      if (!usable(dir, "cgroup.kill")) continue;
      try {
        writeKernelFile(killFile, "1");
        method.add("cgroup.kill");
        killedAll = true;
        killedDirs.push(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw kernelWriteError(killFile, err);
      }
    }
    const freezable = dirs.filter((d) => !usable(d, "cgroup.kill") && usable(d, "cgroup.freeze"));
    if (freezable.length > 0) {
      await whileFrozen(freezable, Math.min(deadline, Date.now() + FREEZE_WAIT_MS), () => {
        // Read again once frozen: now the list is every task, none can fork.
        const frozenTree = withDescendants(dirs);
        if (signalEach(roots, frozenTree, listInside(roots, frozenTree), send, seen, killed, refused)) method.add("freeze-kill-thaw");
      });
    } else {
      // SIGKILL by pid as well, but said only for a task cgroup.kill did not reach (a v1-only one): QA, every
      // hybrid teardown said "then sigkill-by-pid" for the tasks cgroup.kill had just killed, still listed in the v1 dir.
      const reached = (task: KilledTask): boolean => killedDirs.some((d) => isInCgroupTree(roots, task.pid, d));
      signalEach(roots, subtree, inside.filter(reached), send, seen, killed, refused);
      if (signalEach(roots, subtree, inside.filter((t) => !reached(t)), send, seen, killed, refused)) method.add("sigkill-by-pid");
    }
    // Only tasks this user may not signal are left: waiting longer changes nothing.
    const still = killedAll ? [] : listInside(roots, withDescendants(dirs));
    if (still.length > 0 && still.every((t) => refused.has(t.pid))) throw refusedTasksError(dirs, still, refused);
    await sleep(wait);
    wait = Math.min(wait * 2, 200);
  }
}

/**
 * SIGTERM to every task inside (each checked to still be in its cgroup), then
 * waits until the cgroup is empty or `until`: the stop a service manager gives
 * before its kill (TERM_GRACE_MS). Nothing leaves the cgroup meanwhile, so its
 * limit still holds; what is left is killUntilEmpty's.
 */
export async function stopGracefully(
  roots: HostRoots,
  dirs: CgroupDir[],
  until: number,
  stopped: KilledTask[],
  method: Set<TeardownMethod>,
  send: SendSignal = sendSigterm,
  refused = new Map<number, RefusedTask>(),
): Promise<void> {
  const subtree = withDescendants(dirs);
  const inside = listInside(roots, subtree);
  // drill inside its own cgroup: killUntilEmpty refuses it, before any signal.
  if (inside.length === 0 || inside.some((t) => t.pid === process.pid)) return;
  if (signalEach(roots, subtree, inside, send, new Set(stopped.map((t) => t.pid)), stopped, refused)) method.add("sigterm");
  let wait = 20;
  // The tasks it may not signal are not waited for: only the others can leave.
  while (Date.now() < until && listInside(roots, withDescendants(dirs)).some((t) => !refused.has(t.pid))) {
    await sleep(Math.min(wait, Math.max(until - Date.now(), 1)));
    wait = Math.min(wait * 2, 200);
  }
}

/**
 * The child cgroups below `dir`, parents before their children (reverse it to
 * remove them). A dir gone meanwhile has none.
 */
function descendants(dir: CgroupDir): CgroupDir[] {
  let entries;
  try {
    entries = readdirSync(dir.dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const found: CgroupDir[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const child: CgroupDir = { ...dir, cgroupPath: path.posix.join(dir.cgroupPath, entry.name), dir: path.join(dir.dir, entry.name) };
    found.push(child, ...descendants(child));
  }
  return found;
}

/** The dirs and every cgroup below them. cgroup.kill and cgroup.freeze act on a v2 subtree; v1 tasks are signalled dir by dir. */
export function withDescendants(dirs: CgroupDir[]): CgroupDir[] {
  return dirs.flatMap((d) => [d, ...descendants(d)]);
}

/** What keeps the dirs busy: their child cgroups and the tasks anywhere below, each marked as notEmptyError marks it (stuck, or not signalled). */
function describeBusy(roots: HostRoots, dirs: CgroupDir[], refused: ReadonlyMap<number, RefusedTask>): string {
  const children = dirs.flatMap((d) => descendants(d)).filter((d) => existsSync(d.dir));
  let tasks: KilledTask[];
  try {
    tasks = listInside(roots, withDescendants(dirs));
  } catch {
    tasks = [];
  }
  const parts = [
    children.length > 0 ? `child cgroups ${children.map((d) => d.dir).join(", ")}` : "no child cgroup left",
    tasks.length > 0 ? `tasks ${markedTasks(roots, tasks, refused).join("; ")}` : "no task listed (tasks still exiting)",
  ];
  return parts.join("; ");
}

/**
 * The weights files (`drill-weights-<worker>-<pid>-<start>.bin`) the cgroup's
 * tasks hold open or mapped: a worker run by hand keeps its --file-dir to
 * itself, so its open files and its mappings are where a teardown finds them
 * (QA: a SIGSTOPped or frozen worker, SIGKILLed with its cgroup, left its
 * 32 MiB file behind).
 */
function heldWeightsFiles(roots: HostRoots, dirs: CgroupDir[]): string[] {
  const files = new Set<string>();
  const note = (target: string): void => {
    if (path.isAbsolute(target) && parseWeightsFileName(path.basename(target)) !== null) files.add(target);
  };
  for (const task of listInside(roots, dirs)) {
    const proc = (...parts: string[]): string => roots.proc(String(task.pid), ...parts);
    try {
      for (const fd of readdirSync(proc("fd"))) {
        try {
          note(readlinkSync(proc("fd", fd)));
        } catch {
          // closed meanwhile
        }
      }
      // The serve coprocess maps the file and may have closed its descriptor: the mapping's path is in maps.
      const maps = readKernelText(proc("maps"));
      for (const line of maps.ok ? maps.value.split("\n") : []) {
        const at = line.indexOf("/");
        if (at >= 0) note(line.slice(at));
      }
    } catch {
      // gone, or not ours to read
    }
  }
  return [...files];
}

/** Each file whose owner (named in it) is gone now, unlinked; a live owner's file (a worker outside the cgroup) stays. `left`: those that could not be unlinked, with why. */
function removeOrphanedWeightsFiles(roots: HostRoots, files: string[]): { removed: string[]; left: string[] } {
  const removed: string[] = [];
  const left: string[] = [];
  for (const file of files) {
    const owner = parseWeightsFileName(path.basename(file));
    if (owner === null || isSameProcess(roots, owner.pid, owner.startTime) || !existsSync(file)) continue;
    const refused = unlinkLeftover(file);
    if (refused === null) removed.push(file);
    else left.push(`could not unlink the weights file ${file}: ${refused}`);
  }
  return { removed, left };
}

/**
 * Every task listed in the dirs' cgroup.procs; a dir removed under us
 * (cgdelete) has none. One that cannot be read stops the teardown unfinished
 * (exit 4, QA: it was 1): without its task list the cgroup can be neither
 * emptied nor found empty, so it and its marker stay for the next run.
 */
function listInside(roots: HostRoots, dirs: CgroupDir[]): KilledTask[] {
  const inside: KilledTask[] = [];
  for (const dir of dirs) {
    const pids = readPids(path.join(dir.dir, "cgroup.procs"));
    if (!pids.ok) {
      if (pids.reason === "missing") continue;
      throw new RollbackIncompleteError(
        `cannot read ${pids.file}: ${pids.reason}; without its task list ${dir.dir} can be neither emptied nor found empty, so it is left in place: run teardown again once that file reads`,
      );
    }
    for (const pid of pids.value) inside.push({ pid, comm: readComm(roots, pid), dir: dir.dir });
  }
  return inside;
}

/**
 * Sends `send`'s signal (SIGTERM first, then SIGKILL) to each task still in
 * its cgroup, noting each once in `killed`; true when at least one signal was
 * sent. A task this user may not signal (EPERM) goes to `refused` with whose
 * it is, out of `killed`, and is not signalled again; the others still are.
 */
function signalEach(roots: HostRoots, dirs: CgroupDir[], tasks: KilledTask[], send: SendSignal, seen: Set<number>, killed: KilledTask[], refused: Map<number, RefusedTask>): boolean {
  let sent = false;
  for (const task of tasks) {
    if (refused.has(task.pid)) continue;
    // Reported whether cgroup.kill or the SIGKILL below ends it.
    if (!seen.has(task.pid)) {
      seen.add(task.pid);
      killed.push(task);
    }
    const dir = dirs.find((d) => d.dir === task.dir)!;
    if (!isInCgroup(roots, task.pid, dir)) continue;
    try {
      send(task.pid);
      sent = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ESRCH") continue;
      const error = signalError(roots, task.pid, err);
      if (!(error instanceof SignalRefusedError)) throw error;
      refused.set(task.pid, { ...task, why: error.why });
      const listed = killed.findIndex((t) => t.pid === task.pid);
      if (listed >= 0) killed.splice(listed, 1);
    }
  }
  return sent;
}

/** Each task once, with every dir it is listed in (on a hybrid host a task is in the memory cgroup and in its twin): `pid N (comm) in A and B`. */
function namedOnce(tasks: KilledTask[]): Array<{ pid: number; named: string }> {
  const byPid = new Map<number, KilledTask[]>();
  for (const t of tasks) byPid.set(t.pid, [...(byPid.get(t.pid) ?? []), t]);
  return [...byPid.values()].map((ts) => ({ pid: ts[0]!.pid, named: `pid ${ts[0]!.pid} (${ts[0]!.comm ?? "?"}) in ${ts.map((t) => t.dir).join(" and ")}` }));
}

/**
 * Tasks left that this user may not signal (QA: teardown stopped at the
 * first, the others unsignalled): each named with whose it is; the cgroup
 * stays, as a cgroup with tasks inside cannot be removed.
 */
function refusedTasksError(dirs: CgroupDir[], tasks: KilledTask[], refused: Map<number, RefusedTask>): RollbackIncompleteError {
  const named = namedOnce(tasks).map((t) => `${t.named}: ${refused.get(t.pid)!.why}`);
  const where = dirs.map((d) => d.dir).join(" and ");
  return new RollbackIncompleteError(
    `${named.length === 1 ? "a task" : `${named.length} tasks`} left inside that this user may not signal: ${named.join("; ")}; ` +
      `every other task is stopped; ${where} left in place (a cgroup cannot be removed with tasks inside): run this again as root to finish it`,
  );
}

/** What /proc/<pid>/stat's state letter means, for a task that would not leave. */
const STATE_WORDS: Record<string, string> = {
  R: "running",
  S: "sleeping",
  D: "uninterruptible: in the kernel, where no signal acts until it leaves",
  T: "stopped",
  t: "traced",
  Z: "a zombie, exiting",
  X: "dead",
  I: "idle",
};

/**
 * Why a task is still inside: `signalled` like the others and stuck (`why`
 * says its state, or that it has no /proc entry to signal), or not signalled,
 * `why` saying whose it is (RefusedTask). `state`: its /proc state letter, null without one.
 */
export interface TaskLeft {
  signalled: boolean;
  state: string | null;
  why: string;
}

/** How a task still inside is marked, in every message and document that names one (notEmptyError, describeBusy, teardown --json). */
export function taskLeft(roots: HostRoots, pid: number, refused: ReadonlyMap<number, RefusedTask>): TaskLeft {
  const stat = readProcessStat(roots, pid);
  const state = stat.ok ? stat.value.state : null;
  const notSignalled = refused.get(pid);
  if (notSignalled) return { signalled: false, state, why: notSignalled.why };
  if (state === null) return { signalled: true, state, why: "stuck (no /proc entry to signal: exiting, or of another pid namespace)" };
  return { signalled: true, state, why: `stuck in state ${state}${STATE_WORDS[state] ? ` (${STATE_WORDS[state]})` : ""}: signalled, not gone` };
}

/** Each task once (namedOnce), marked as taskLeft says: `pid N (comm) in A: stuck in state D (…)…` or `…: not signalled: <whose>`. */
function markedTasks(roots: HostRoots, tasks: KilledTask[], refused: ReadonlyMap<number, RefusedTask>): string[] {
  return namedOnce(tasks).map((t) => {
    const left = taskLeft(roots, t.pid, refused);
    return `${t.named}: ${left.signalled ? left.why : `not signalled: ${left.why}`}`;
  });
}

/**
 * The cgroup still not empty at the deadline: each task marked as stuck (its
 * state: a D-state task ignores even SIGKILL until it leaves the kernel) or
 * as one this user may not signal (whose, run as root). QA: a refused task
 * beside stuck ones was listed as plainly "still inside", with "kill it".
 */
export function notEmptyError(roots: HostRoots, leftovers: KilledTask[], refused: Map<number, RefusedTask>, timeoutMs: number): RollbackIncompleteError {
  const tasks = namedOnce(leftovers);
  const stuck = tasks.filter((t) => !refused.has(t.pid)).length;
  const marked = markedTasks(roots, leftovers, refused);
  const when = stuck === 0 ? "" : ` once ${stuck === 1 ? "the stuck task has" : "the stuck tasks have"} exited`;
  return new RollbackIncompleteError(
    `cgroup not empty after ${Math.round(timeoutMs / 1000)} s; still inside: ${marked.join("; ")}. ` +
      `Not moved to the parent (that would lift its limit); ${stuck < tasks.length ? "as root, " : ""}run teardown again${when}`,
  );
}

/**
 * Where a task a teardown signalled (or may not signal) is now, for the lines
 * of one that did not finish: "inside" (listed in its dir's cgroup.procs),
 * "gone" (not listed, or its dir removed), null when that cannot be read.
 */
export function taskNow(task: KilledTask): "inside" | "gone" | null {
  const pids = readPids(path.join(task.dir, "cgroup.procs"));
  if (!pids.ok) return pids.reason === "missing" ? "gone" : null;
  return pids.value.includes(task.pid) ? "inside" : "gone";
}

/** Whether this user may write a cgroup file (its mode and owner: root's cgroup, drill not root); root as before, its errors thrown where it writes. */
function mayWrite(file: string): boolean {
  if (process.geteuid?.() === 0) return true;
  try {
    accessSync(file, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The cgroup.freeze files a teardown in this process froze and has not thawed
 * yet: the wait for `frozen 1` is async, so an exit (rollback's second
 * Ctrl-C) can come in between, and must thaw these first.
 */
const frozenNow = new Set<string>();

/**
 * Thaws what a teardown in this process froze and did not thaw yet: for an
 * exit in the middle of freeze → kill → thaw (a cgroup left frozen keeps its
 * tasks stopped for good). Synchronous, so it can run right before exit.
 */
export function thawWhatTeardownFroze(): { thawed: string[]; stuck: string[] } {
  const thawed: string[] = [];
  const stuck: string[] = [];
  for (const file of frozenNow) {
    try {
      writeKernelFile(file, "0");
      thawed.push(path.dirname(file));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
        stuck.push(`${file} (${(err as Error).message})`);
        continue;
      }
    }
    frozenNow.delete(file);
  }
  return { thawed, stuck };
}

/**
 * For a command that exits in the middle of a teardown (a second Ctrl-C, or
 * SIGTERM: rollback, cgroup teardown): thaws what it froze, since stopping is
 * the operator's choice but a cgroup left frozen is not (its tasks stay
 * stopped for good). One line each to print before exiting; `stillFrozen`
 * also names what could not be thawed. `rerun`: what finishes the job ("the
 * rollback"), until which what is still inside runs.
 */
export function thawBeforeExit(rerun: string): { notes: string[]; stillFrozen: string[] } {
  const { thawed, stuck } = thawWhatTeardownFroze();
  const stillFrozen = stuck.map((file) => `could not thaw ${file}: its tasks stay stopped until 0 is written there`);
  const notes = [
    ...(thawed.length > 0 ? [`thawed ${thawed.join(", ")} (frozen to kill its tasks) before stopping: what is still inside runs until ${rerun} is run again`] : []),
    ...stillFrozen,
  ];
  return { notes, stillFrozen };
}

/**
 * Freezes the dirs, waits (until `waitUntil`) for cgroup.events `frozen 1`,
 * runs `body`, and thaws every dir it froze whatever happened in between.
 */
async function whileFrozen(dirs: CgroupDir[], waitUntil: number, body: () => void): Promise<void> {
  const frozen: string[] = [];
  let failure: unknown = null;
  try {
    for (const dir of dirs) {
      const file = path.join(dir.dir, "cgroup.freeze");
      try {
        writeKernelFile(file, "1");
        frozen.push(file);
        frozenNow.add(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw kernelWriteError(file, err);
      }
    }
    await waitFrozen(dirs, waitUntil);
    body();
  } catch (err) {
    failure = err;
  }
  const stuck: string[] = [];
  for (const file of frozen) {
    try {
      writeKernelFile(file, "0");
      frozenNow.delete(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") stuck.push(`${file} (${(err as Error).message})`);
      else frozenNow.delete(file);
    }
  }
  if (stuck.length > 0) {
    throw new RollbackIncompleteError(
      `could not thaw ${stuck.join(", ")}: its tasks stay stopped until 0 is written there; run teardown again` +
        (failure ? `; before that: ${(failure as Error).message}` : ""),
    );
  }
  if (failure) throw failure;
}

/** Polls cgroup.events until every dir says `frozen 1` (or is gone), or until `until`. */
async function waitFrozen(dirs: CgroupDir[], until: number): Promise<boolean> {
  for (;;) {
    const pending = dirs.filter((d) => {
      const events = readKernelText(path.join(d.dir, "cgroup.events"));
      // Gone or unreadable: waiting longer tells nothing; SIGKILL works frozen or not.
      return events.ok && !/^frozen 1$/m.test(events.value);
    });
    if (pending.length === 0) return true;
    if (Date.now() >= until) return false;
    await sleep(10);
  }
}

/** rmdir, retrying EBUSY (the kernel releases a just-emptied cgroup asynchronously). */
async function rmdirWithBackoff(dir: string, deadline: number, whenBusy: () => Promise<void> = async () => {}): Promise<boolean> {
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
    await whenBusy();
    await sleep(wait);
    wait = Math.min(wait * 2, 250);
  }
}
