import { chmodSync, mkdirSync, rmdirSync, statSync } from "node:fs";
import path from "node:path";
import { drillCommandFor, rollbackAgain } from "../context.js";
import { isDrillUp, readState, statePath, type DrillState } from "../drill/state.js";
import { DrillError, ExitCode, RefusedError, kernelWriteError } from "../errors.js";
import { readKernelText, writeKernelFile, type HostRoots } from "../host/kernelFile.js";
import { formatBytes } from "../units.js";
import { effectiveLimitFrom, parseLimit, readPids, type Limit, type LimitWalk } from "./memoryFiles.js";
import type { CgroupDir, WorkerCgroup } from "./paths.js";
import { lockMarker, markerFile, readMarker, removeMarker, writeMarker, type CgroupMarker, type CgroupOwner } from "./stateFiles.js";
import { readComm } from "./tasks.js";
import { readMeminfo } from "../host/meminfo.js";

export interface SetupOptions {
  memoryMax: number;
  /** Swap allowed on top of memoryMax; 0 = swap off (v1: memsw = limit). */
  swapMax: number;
  /**
   * The drill run the cgroup is for (`drill up`), recorded in the marker. With
   * it, setup never adopts a cgroup another drill owns or one with tasks in it;
   * without it (`drill cgroup setup`, the operator's own hand) limits of drill's
   * cgroup are rewritten in place, as before.
   */
  owner?: CgroupOwner;
  /** --memory-max was on cgroup setup's command line, not its 2G default (up always gives cgroup.memory_max). */
  memoryMaxGiven?: boolean;
}

export type { CgroupOwner };

/**
 * A cgroup dir drill makes: 0755 whatever the umask, as runc and systemd make
 * theirs (mkdir 0755). Only root (who runs drill) writes limits or moves
 * tasks; a sidecar run as another user (watch from a container) still reads
 * memory.pressure and memory.events. QA: under umask 000 they were
 * world-writable (anyone could move tasks in, or make child cgroups that
 * block the rmdir); under 077, unreadable to such a sidecar.
 */
export const CGROUP_DIR_MODE = 0o755;

/** mkdir, then chmod to CGROUP_DIR_MODE (mkdir takes the umask's bits off); a dir whose chmod failed is removed again, and the error thrown as it came. */
export function makeCgroupDir(dir: string): void {
  mkdirSync(dir, { mode: CGROUP_DIR_MODE });
  try {
    chmodSync(dir, CGROUP_DIR_MODE);
  } catch (err) {
    rmdirSync(dir);
    throw err;
  }
}

function ownerOf(marker: CgroupMarker | null): CgroupOwner | null {
  return marker?.owner ?? null;
}

/**
 * The drill a cgroup's marker names, when that drill is up with this cgroup
 * as its worker cgroup (or might be: its state.json cannot be read).
 */
export interface UpHolder {
  drill: string;
  runId: string;
  /** Its state's phase; null when state.json cannot be read (`unreadable` says why). */
  phase: DrillState["phase"] | null;
  stateFile: string;
  unreadable?: string;
}

/**
 * Pure: whether a drill's state says it is up with the cgroup at `dirs`: not
 * complete (up's own "already up"; a stopped drill's gate and worker run on
 * until its rollback), and this run or these dirs (a later run of the same
 * drill on another --name does not hold this one; a run that has recorded
 * the dirs but not yet rewritten the marker does).
 */
export function isUpWith(state: Pick<DrillState, "runId" | "phase" | "cgroup"> | null, owner: CgroupOwner, dirs: readonly string[]): boolean {
  if (!state || !isDrillUp(state)) return false;
  return state.runId === owner.runId || (state.cgroup?.dirs ?? []).some((dir) => dirs.includes(dir));
}

/** The marker's owner when it is up with the cgroup at `dirs`, from its state.json in the same --state-dir. */
export function readUpHolder(stateDir: string, marker: CgroupMarker | null, dirs: readonly string[]): UpHolder | null {
  const owner = ownerOf(marker);
  if (!owner) return null;
  const stateFile = statePath(stateDir, owner.drill);
  let state: DrillState | null;
  try {
    state = readState(stateDir, owner.drill);
  } catch (err) {
    return { drill: owner.drill, runId: owner.runId, phase: null, stateFile, unreadable: err instanceof Error ? err.message : String(err) };
  }
  return state && isUpWith(state, owner, dirs) ? { drill: owner.drill, runId: state.runId, phase: state.phase, stateFile } : null;
}

/**
 * `<dir> is` / `<v1 memory dir> and <unified twin> are the worker cgroup of
 * drill X (run R)`: how each refusal over a drill's cgroup begins (up, setup,
 * teardown); the twin is one cgroup's second dir, so the verb is plural (QA).
 */
export function workerCgroupOf(dirs: readonly string[], holder: CgroupOwner): string {
  return `${dirs.join(" and ")} ${dirs.length > 1 ? "are" : "is"} the worker cgroup of drill ${holder.drill} (run ${holder.runId})`;
}

/**
 * Refuses to act on the worker cgroup of a drill that is up: `drill cgroup
 * setup` (rewrite its limits) and `drill cgroup teardown` (kill its worker
 * and hog mid-drill). `drillCmd` is drill as the operator runs it on this --state-dir.
 */
export function upHolderRefusal(dirs: readonly string[], holder: UpHolder, drillCmd: string, refusing: string, otherwise: string): string {
  const up = holder.phase === null ? `whose state ${holder.stateFile} cannot be read (${holder.unreadable ?? "?"}), so it may be up` : `which is up (${holder.phase})`;
  return `${workerCgroupOf(dirs, holder)}, ${up}; refusing to ${refusing}. Run ${rollbackAgain(drillCmd, {}, holder.drill)}${otherwise}`;
}

/** What is on the host before setup acts: gathered by inspectForSetup, decided on by planSetup. */
export interface SetupInspection {
  /** The worker cgroup's dirs that already exist, with their inode and tasks. */
  existing: Array<{ dir: CgroupDir; inode: number; tasks: Array<{ pid: number; comm: string | null }> | null }>;
  marker: CgroupMarker | null;
  /** Where the marker was looked for: a refusal names it (another --state-dir has other markers). */
  markerFile: string;
  /** The marker's drill when it is up with this cgroup: the operator's own setup leaves its limits alone. */
  upHolder: UpHolder | null;
  /** drill as the operator runs it on this --state-dir: a suggested command works as typed. */
  drillCmd: string;
  /** v1: the current limits of the memory dir (kernel defaults, unlimited, when it does not exist yet). */
  /** swappiness: the memory dir's own (null when it does not exist yet or does not read), and its parent's. */
  v1: { limit: Limit; memsw: Limit; memswSupported: boolean; swappiness?: number | null; parentSwappiness?: number | null } | null;
  /** v2: the parent's controllers and subtree_control. */
  v2Parent: { dir: string; controllers: string[] | null; subtreeControl: string[] | null } | null;
  /** The tightest limit above the new cgroup, and the ancestors' limit files that did not read. */
  parentLimit: LimitWalk;
  /** From <procfs>/swaps; null when unreadable. */
  hostHasSwap: boolean | null;
  /** MemTotal of <procfs>/meminfo; null when unreadable. */
  hostMemTotalBytes: number | null;
}

export type SetupStep =
  | { kind: "enable-memory"; file: string; parentDir: string }
  | { kind: "mkdir"; dir: CgroupDir }
  | { kind: "write"; file: string; value: string; bestEffort: string | null };

export interface SetupPlan {
  cgroup: WorkerCgroup;
  /** fresh: drill creates it; ours: drill created it before (marker and inode match), limits are rewritten. */
  ownership: "fresh" | "ours";
  /** Recorded in the marker: the new owner, or the one already there when none is given. */
  owner: CgroupOwner | null;
  /** The marker the plan was judged on: applySetup acts only while it is still the one there. */
  judgedMarker: CgroupMarker | null;
  steps: SetupStep[];
  warnings: string[];
  notes: string[];
  /** What asked for the memory limit (--memory-max, cgroup.memory_max); null: cgroup setup's default. */
  memoryMaxFrom: string | null;
  /** drill as the operator runs it on this --state-dir and tree (inspection's): for the refusal applySetup may give. */
  drillCmd: string;
}

export interface WriteResult {
  file: string;
  wrote: string;
  /** What the kernel shows after the write, or null when it could not be read back. */
  readBack: string | null;
  /** What it showed before (a cgroup set up again), or null when it could not be read. */
  before: string | null;
  /** A best-effort write that failed: why it does not stop the drill. */
  skipped: string | null;
}

export interface SetupResult {
  plan: SetupPlan;
  created: string[];
  writes: WriteResult[];
  warnings: string[];
}

/**
 * v1 refuses memsw < limit at every write, so the order depends on where the
 * limits are now: if the new memory limit already fits under the current
 * memsw, write memory first (lowering), else memsw first (raising).
 */
export function orderV1LimitWrites(current: { limit: Limit; memsw: Limit }, target: { limit: number; memsw: number }): Array<"limit" | "memsw"> {
  return current.memsw === "max" || target.limit <= current.memsw ? ["limit", "memsw"] : ["memsw", "limit"];
}

function describeTasks(tasks: Array<{ pid: number; comm: string | null }>): string {
  return tasks.map((t) => `${t.pid} (${t.comm ?? "?"})`).join(", ");
}

/**
 * Whether existing dirs are drill's own: a marker written by setup, with the
 * inode of each dir it made. For a drill run (`owner`), drill's own is not
 * enough: another drill's cgroup, or one with tasks in it (a live worker or
 * hog, whoever's), is refused. The run's own children start only after setup,
 * so a re-run of the same drill over an empty leftover is still adopted.
 */
export function decideOwnership(inspection: SetupInspection, owner?: CgroupOwner): { kind: "fresh" } | { kind: "ours" } | { kind: "refuse"; reason: string } {
  const marker = inspection.marker;
  // The operator's hand (no owner) on a drill that is up: also when its dirs are gone, or setup would
  // make them afresh and drop the drill from the marker.
  if (!owner && inspection.upHolder) {
    const dirs = inspection.existing.length > 0 ? inspection.existing.map((e) => e.dir.dir) : (marker?.dirs.map((d) => d.dir) ?? []);
    const reason = upHolderRefusal(dirs, inspection.upHolder, inspection.drillCmd, "rewrite its limits under it", " first, or pick another --name");
    return { kind: "refuse", reason };
  }
  if (inspection.existing.length === 0) return { kind: "fresh" };
  const foreign = notCreatedByDrill(inspection.existing, marker, inspection.markerFile);
  if (foreign) return { kind: "refuse", reason: `${foreign.fact}; refusing to adopt it${foreign.way === null ? "" : `. ${foreign.way}, or remove it yourself`}` };
  const foreignTasks = inspection.existing.flatMap((e) => e.tasks ?? []);
  if (owner) {
    const holder = ownerOf(marker);
    const dirs = inspection.existing.map((e) => e.dir.dir);
    const where = dirs.join(" and ");
    if (holder && holder.drill !== owner.drill) {
      return {
        kind: "refuse",
        reason: `${workerCgroupOf(dirs, holder)}; refusing to share it with drill ${owner.drill}. Run ${rollbackAgain(inspection.drillCmd, {}, holder.drill)} first, or pick another --name`,
      };
    }
    const unreadable = inspection.existing.filter((e) => e.tasks === null).map((e) => e.dir.dir);
    if (unreadable.length > 0) {
      return { kind: "refuse", reason: `cannot read cgroup.procs of ${unreadable.join(" and ")}: whether something runs in it is unknown; refusing to adopt it` };
    }
    if (foreignTasks.length > 0) {
      const by = holder ? `drill ${holder.drill}'s earlier run ${holder.runId}` : "drill cgroup setup";
      return {
        kind: "refuse",
        reason: `${where} (set up by ${by}) still ${dirs.length > 1 ? "have" : "has"} tasks ${describeTasks(foreignTasks)}; refusing to adopt a cgroup something runs in. Roll back what runs there (or drill cgroup teardown), or pick another --name`,
      };
    }
  }
  return { kind: "ours" };
}

/** A dir of the worker cgroup that exists now: its inode, and its tasks (null: cgroup.procs unreadable). */
export type ExistingDir = SetupInspection["existing"][number];

/**
 * Pure: the first existing dir drill did not create, or null when each is
 * drill's own: listed in the marker with the inode drill recorded (a dir
 * setup never saw made, inode null, is drill's unless tasks are in it).
 * `fact` says what is wrong with it; `way`, when a marker is missing or
 * incomplete, what the operator may have meant. Setup refuses to adopt such
 * a dir; worker and inject refuse to join it (cgroup/ready.ts).
 */
export function notCreatedByDrill(existing: readonly ExistingDir[], marker: CgroupMarker | null, file: string): { dir: string; fact: string; way: string | null } | null {
  const foreignTasks = existing.flatMap((e) => e.tasks ?? []);
  for (const e of existing) {
    const marked = marker?.dirs.find((d) => d.dir === e.dir.dir);
    const tasks = e.tasks ?? [];
    const what = tasks.length > 0 ? ` with tasks ${describeTasks(tasks)}` : "";
    if (!marker || !marked) {
      // Named, so a setup made with another --state-dir is told apart from a foreign cgroup.
      const looked = marker ? `its marker ${file} does not list it` : `no marker in ${path.dirname(file)}`;
      const way = marker ? "Pick another --name" : "If drill made it with another --state-dir, give that one; else pick another --name";
      return { dir: e.dir.dir, fact: `${e.dir.dir} already exists${what} and drill did not create it (${looked})`, way };
    }
    if (marked.inode === null) {
      // Setup died between its intent and its mkdir: drill's, unless someone moved a task in.
      if (foreignTasks.length > 0) return { dir: e.dir.dir, fact: `${e.dir.dir} exists${what}, but drill's record never saw it created`, way: null };
    } else if (marked.inode !== e.inode) {
      return { dir: e.dir.dir, fact: `${e.dir.dir} was removed and recreated by someone else since drill made it (inode ${e.inode}, drill recorded ${marked.inode})${what}`, way: null };
    }
  }
  return null;
}

/** The worker cgroup's dirs that exist now, with their inode and tasks. */
export function existingDirs(roots: HostRoots, cgroup: WorkerCgroup): ExistingDir[] {
  const existing: ExistingDir[] = [];
  for (const dir of cgroup.dirs) {
    const inode = inodeOf(dir.dir);
    if (inode === null) continue;
    const pids = readPids(path.join(dir.dir, "cgroup.procs"));
    existing.push({ dir, inode, tasks: pids.ok ? pids.value.map((pid) => ({ pid, comm: readComm(roots, pid) })) : null });
  }
  return existing;
}

/** Pure: what setup will write where, in which order, and what to warn about. */
export function planSetup(cgroup: WorkerCgroup, inspection: SetupInspection, options: SetupOptions): SetupPlan {
  const ownership = decideOwnership(inspection, options.owner);
  if (ownership.kind === "refuse") throw new RefusedError(ownership.reason);
  const exists = (dir: CgroupDir): boolean => inspection.existing.some((e) => e.dir.dir === dir.dir);
  const steps: SetupStep[] = [];
  const warnings: string[] = [];
  const notes: string[] = [];
  const limits = cgroup.limits;

  if (limits.version === 2) {
    const parent = inspection.v2Parent!;
    if (parent.controllers !== null && !parent.controllers.includes("memory")) {
      throw new DrillError(
        `the memory controller is not available in ${parent.dir}: ${path.join(parent.dir, "cgroup.controllers")} does not list it; enable it in the ancestors' cgroup.subtree_control first, or pick another --parent`,
      );
    }
    if (parent.subtreeControl === null || !parent.subtreeControl.includes("memory")) {
      steps.push({ kind: "enable-memory", file: path.join(parent.dir, "cgroup.subtree_control"), parentDir: parent.dir });
    }
  }
  for (const dir of cgroup.dirs) if (!exists(dir)) steps.push({ kind: "mkdir", dir });

  const file = (name: string): string => path.join(limits.dir, name);
  if (limits.version === 2) {
    steps.push({ kind: "write", file: file("memory.max"), value: String(options.memoryMax), bestEffort: null });
    steps.push({
      kind: "write",
      file: file("memory.swap.max"),
      value: String(options.swapMax),
      bestEffort: "no memory.swap.max (kernel without swap accounting): swap cannot be capped in this cgroup",
    });
  } else {
    const v1 = inspection.v1!;
    const target = { limit: options.memoryMax, memsw: options.memoryMax + options.swapMax };
    if (v1.memswSupported) {
      for (const which of orderV1LimitWrites(v1, target)) {
        steps.push(which === "limit"
          ? { kind: "write", file: file("memory.limit_in_bytes"), value: String(target.limit), bestEffort: null }
          : { kind: "write", file: file("memory.memsw.limit_in_bytes"), value: String(target.memsw), bestEffort: null });
      }
    } else {
      steps.push({ kind: "write", file: file("memory.limit_in_bytes"), value: String(target.limit), bestEffort: null });
      warnings.push(`no memory.memsw.* in ${limits.dir} (swap accounting off, swapaccount=0): v1 cannot cap this cgroup's swap; swap-off is best effort (swappiness only)`);
    }
    if (options.swapMax === 0) {
      steps.push({
        kind: "write",
        file: file("memory.swappiness"),
        value: "0",
        bestEffort: "memory.swappiness could not be set (older kernels refuse it under use_hierarchy); swap-off relies on memsw alone",
      });
      notes.push("v1: swap-off is best effort (memsw = limit caps memory+swap together; swappiness=0 keeps anon pages in RAM)");
    } else if (v1.parentSwappiness != null && v1.swappiness != null && v1.swappiness !== v1.parentSwappiness) {
      // Swap allowed: an earlier swap-off setup of this cgroup left swappiness 0,
      // which keeps anon pages in RAM whatever memsw allows. Back to the parent's.
      steps.push({
        kind: "write",
        file: file("memory.swappiness"),
        value: String(v1.parentSwappiness),
        bestEffort: "memory.swappiness could not be set (older kernels refuse it under use_hierarchy): an earlier swap-off's 0 may stay",
      });
    }
  }
  if (inspection.hostHasSwap === false) notes.push("host has no swap: nothing can swap whatever the cgroup says");

  const parentLimit = inspection.parentLimit;
  if (parentLimit.limit !== "max" && parentLimit.limit < options.memoryMax) {
    warnings.push(
      `ancestor ${parentLimit.dir} limits memory to ${formatBytes(parentLimit.limit)}, tighter than --memory-max ${formatBytes(options.memoryMax)}: the effective limit is ${formatBytes(parentLimit.limit)}`,
    );
  }
  // Accepted (a limit is the operator's), but a cgroup that can never fill rehearses nothing.
  if (inspection.hostMemTotalBytes !== null && options.memoryMax > inspection.hostMemTotalBytes) {
    warnings.push(
      `${options.owner ? "cgroup.memory_max" : "--memory-max"} ${formatBytes(options.memoryMax)} is more than this host's RAM (${formatBytes(inspection.hostMemTotalBytes)}): the cgroup never reaches its limit, so nothing in it is pressured by it`,
    );
  }
  for (const { file, reason } of parentLimit.unreadable) {
    warnings.push(`ancestor limit ${file} could not be read (${reason}): it may be tighter than --memory-max ${formatBytes(options.memoryMax)}, and the effective limit is unknown`);
  }
  const owner = options.owner ?? (ownership.kind === "ours" ? ownerOf(inspection.marker) : null);
  const memoryMaxFrom = options.owner ? "cgroup.memory_max" : options.memoryMaxGiven === true ? "--memory-max" : null;
  return { cgroup, ownership: ownership.kind, owner, judgedMarker: inspection.marker, steps, warnings, notes, memoryMaxFrom, drillCmd: inspection.drillCmd };
}

function inodeOf(dir: string): number | null {
  try {
    return statSync(dir).ino;
  } catch {
    return null;
  }
}

function readList(file: string): string[] | null {
  const text = readKernelText(file);
  return text.ok ? text.value.trim().split(/\s+/).filter((w) => w !== "") : null;
}

export function inspectForSetup(roots: HostRoots, cgroup: WorkerCgroup, stateDir: string): SetupInspection {
  const existing = existingDirs(roots, cgroup);
  const limits = cgroup.limits;
  const parentDir = path.dirname(limits.dir);
  let v1: SetupInspection["v1"] = null;
  if (limits.version === 1) {
    const existsNow = existing.some((e) => e.dir.dir === limits.dir);
    const read = (name: string): Limit | null => {
      const text = readKernelText(path.join(existsNow ? limits.dir : parentDir, name));
      const parsed = text.ok ? parseLimit(text.value, name) : null;
      return parsed?.ok ? parsed.value : null;
    };
    const memsw = read("memory.memsw.limit_in_bytes");
    // A new v1 cgroup starts unlimited in both, whatever its parent says.
    const swappinessIn = (dir: string): number | null => {
      const text = readKernelText(path.join(dir, "memory.swappiness"));
      return text.ok && /^\d+\n?$/.test(text.value) ? Number(text.value) : null;
    };
    const parentSwappiness = swappinessIn(parentDir);
    v1 = existsNow
      ? { limit: read("memory.limit_in_bytes") ?? "max", memsw: memsw ?? "max", memswSupported: memsw !== null, swappiness: swappinessIn(limits.dir), parentSwappiness }
      : { limit: "max", memsw: "max", memswSupported: memsw !== null, swappiness: null, parentSwappiness };
  }
  const v2Parent = limits.version === 2
    ? { dir: parentDir, controllers: readList(path.join(parentDir, "cgroup.controllers")), subtreeControl: readList(path.join(parentDir, "cgroup.subtree_control")) }
    : null;
  const swaps = readKernelText(roots.proc("swaps"));
  const marker = readMarker(stateDir, cgroup);
  return {
    existing,
    marker,
    markerFile: markerFile(stateDir, cgroup),
    upHolder: readUpHolder(stateDir, marker, cgroup.dirs.map((d) => d.dir)),
    drillCmd: drillCommandFor(stateDir, roots),
    v1,
    v2Parent,
    parentLimit: effectiveLimitFrom(parentDir, limits.mount, limits.version),
    hostHasSwap: swaps.ok ? swaps.value.trim().split("\n").length > 1 : null,
    hostMemTotalBytes: readMeminfo(roots)?.memTotalBytes ?? null,
  };
}

/** The no-internal-process rule, explained where it bites. */
export function enableMemoryError(file: string, parentDir: string, err: unknown): DrillError {
  if ((err as NodeJS.ErrnoException).code === "EBUSY") {
    return new DrillError(
      `cannot enable the memory controller for children of ${parentDir}: writing "+memory" to ${file} failed with EBUSY. ` +
        "cgroup v2's no-internal-process rule: a non-root cgroup that has processes of its own cannot hand controllers to its children " +
        "(--parent self is the caller's own, populated cgroup). Use a parent with no processes in it, e.g. --parent /drill after creating it empty, or the root.",
      undefined,
      { cause: err },
    );
  }
  return kernelWriteError(file, err);
}

/**
 * A v1 limit lowered below what the cgroup holds: the kernel tries to reclaim
 * down to it and, failing (anon pages, no swap), answers EBUSY rather than
 * OOM-kill as v2 does. Said as that, with the usage and what the limit still is.
 */
export function limitWriteError(file: string, value: string, err: unknown): DrillError {
  if ((err as NodeJS.ErrnoException).code !== "EBUSY" || !/limit_in_bytes$/.test(file)) return kernelWriteError(file, err);
  const dir = path.dirname(file);
  const read = (name: string): string | null => {
    const text = readKernelText(path.join(dir, name));
    return text.ok ? text.value.trim() : null;
  };
  const bytes = (text: string | null): string => (text !== null && /^\d+$/.test(text) ? formatBytes(Number(text)) : "unknown");
  const usage = bytes(read(file.endsWith("memsw.limit_in_bytes") ? "memory.memsw.usage_in_bytes" : "memory.usage_in_bytes"));
  return new DrillError(
    `cannot lower ${file} to ${bytes(value)}: EBUSY: the cgroup holds ${usage} and the kernel could not reclaim it below the new limit ` +
      `(v1 refuses instead of OOM-killing); stop what runs in it (a hog, the worker) or give a limit above its usage. ${path.basename(file)} is still ${bytes(read(path.basename(file)))}`,
    ExitCode.failed,
    { cause: err },
  );
}

/** The one kernel write setup makes; injectable so tests can play EBUSY/EACCES on a fake tree. */
export type KernelWriter = (file: string, value: string) => void;
const writeToKernel: KernelWriter = (file, value) => writeKernelFile(file, value);

/**
 * Why the marker on disk is no longer the one a plan was judged on (another
 * setup of the cgroup got there between the look and the act), or null.
 */
export function markerChange(judged: CgroupMarker | null, current: CgroupMarker | null, where: string, file: string, drillCmd: string): string | null {
  if (JSON.stringify(current) === JSON.stringify(judged)) return null;
  if (current === null) {
    return `drill's marker ${file} of ${where} was removed after this setup judged the cgroup (a teardown ran meanwhile); refusing to act on a stale look. Run it again`;
  }
  const holder = current.owner ? `drill ${current.owner.drill} (run ${current.owner.runId})` : "drill cgroup setup";
  // On this setup's state dir and tree: a rollback without them acts on the default state dir, or on the real /sys.
  const way = current.owner ? `Run ${rollbackAgain(drillCmd, {}, current.owner.drill)} first, or pick another --name` : "Pick another --name";
  return `${where} was just taken by ${holder}: its marker ${file} changed after this setup judged the cgroup (two setups of one cgroup at once); refusing to share it. ${way}`;
}

/**
 * Runs a plan: marker (intent) → mkdirs → marker (inodes) → writes → read back.
 * Undoes its mkdirs on failure. Under the cgroup's lock, and only while its
 * marker is still the one the plan was judged on: of two setups of one
 * cgroup at once, the second is refused instead of overwriting the first's.
 * `claimed` runs under the lock once the cgroup is this setup's, before any act.
 */
export function applySetup(plan: SetupPlan, stateDir: string, writeKernel: KernelWriter = writeToKernel, claimed: () => void = () => {}): SetupResult {
  const lock = lockMarker(stateDir, plan.cgroup);
  try {
    const current = readMarker(stateDir, plan.cgroup);
    const change = markerChange(plan.judgedMarker, current, plan.cgroup.limits.dir, markerFile(stateDir, plan.cgroup), plan.drillCmd);
    if (change !== null) throw new RefusedError(change);
    // The cgroup is ours to act on from here: the caller records it now, not
    // before a refusal (its rollback would then tear down what another made).
    claimed();
    return applyJudged(plan, current, stateDir, writeKernel);
  } finally {
    lock.release();
  }
}

function applyJudged(plan: SetupPlan, current: CgroupMarker | null, stateDir: string, writeKernel: KernelWriter): SetupResult {
  const cgroup = plan.cgroup;
  const created: CgroupDir[] = [];
  const writes: WriteResult[] = [];
  const warnings = [...plan.warnings];
  const previousMarker = plan.ownership === "ours" ? current : null;
  const owner = plan.owner ? { owner: plan.owner } : {};
  const marker = (state: CgroupMarker["state"]): CgroupMarker => ({
    kind: "drill-cgroup",
    name: cgroup.name,
    layout: cgroup.layout,
    state,
    dirs: cgroup.dirs.map((dir) => ({ ...dir, inode: state === "created" ? inodeOf(dir.dir) : (previousMarker?.dirs.find((d) => d.dir === dir.dir)?.inode ?? null) })),
    createdAt: previousMarker?.createdAt ?? new Date().toISOString(),
    createdByPid: previousMarker?.createdByPid ?? process.pid,
    ...owner,
  });

  // Intent before the act: a crash after mkdir still leaves a record rollback can follow.
  if (plan.steps.some((s) => s.kind === "mkdir")) writeMarker(stateDir, cgroup, marker("creating"));
  else if (previousMarker && plan.owner && plan.owner.runId !== ownerOf(previousMarker)?.runId) {
    // Adopted by a new run: the next drill that tries this name must see whose it is now.
    const adopted: CgroupMarker = { ...previousMarker, owner: plan.owner };
    writeMarker(stateDir, cgroup, adopted);
  }
  let markedCreated = false;
  try {
    for (const step of plan.steps) {
      if (step.kind === "enable-memory") {
        try {
          writeKernel(step.file, "+memory");
        } catch (err) {
          throw enableMemoryError(step.file, step.parentDir, err);
        }
      } else if (step.kind === "mkdir") {
        try {
          makeCgroupDir(step.dir.dir);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "EEXIST") {
            throw new RefusedError(`${step.dir.dir} appeared while drill was creating it; refusing to adopt it`);
          }
          throw kernelWriteError(step.dir.dir, err, "create");
        }
        created.push(step.dir);
      } else {
        if (created.length > 0 && !markedCreated) {
          writeMarker(stateDir, cgroup, marker("created"));
          markedCreated = true;
        }
        const before = readKernelText(step.file);
        try {
          writeKernel(step.file, step.value);
        } catch (err) {
          if (step.bestEffort === null) throw limitWriteError(step.file, step.value, err);
          const code = (err as NodeJS.ErrnoException).code ?? "error";
          writes.push({ file: step.file, wrote: step.value, readBack: null, before: before.ok ? before.value.trim() : null, skipped: `${code}: ${step.bestEffort}` });
          warnings.push(`${step.bestEffort} (${code} writing ${step.file})`);
          continue;
        }
        const back = readKernelText(step.file);
        writes.push({ file: step.file, wrote: step.value, readBack: back.ok ? back.value.trim() : null, before: before.ok ? before.value.trim() : null, skipped: null });
      }
    }
    if (created.length > 0 && !markedCreated) writeMarker(stateDir, cgroup, marker("created"));
  } catch (err) {
    for (const dir of created.reverse()) {
      try {
        rmdirSync(dir.dir);
      } catch {
        // Left for teardown: the marker still names it.
      }
    }
    if (plan.ownership === "fresh" && created.every((d) => inodeOf(d.dir) === null)) removeMarker(stateDir, cgroup);
    throw err;
  }
  for (const write of writes) {
    if (write.readBack !== null && write.readBack !== write.wrote && /^\d+$/.test(write.wrote)) {
      warnings.push(`${write.file}: wrote ${write.wrote}, kernel shows ${write.readBack}`);
    }
    const raised = limitRaised(write, plan.memoryMaxFrom);
    if (raised) warnings.push(raised);
  }
  return { plan, created: created.map((d) => d.dir), writes, warnings };
}

/**
 * A memory limit this setup loosened (QA: setup run again without
 * --memory-max put its 2G default over a 64M limit, said as "updated"): the
 * drill then rehearses under another limit than the one it was set up for.
 * Asked for (`from`), it is said as done; only the default gets the advice.
 */
export function limitRaised(write: Pick<WriteResult, "file" | "wrote" | "before" | "skipped">, from: string | null): string | null {
  if (write.skipped !== null || write.before === null || !/^memory\.(max|limit_in_bytes)$/.test(path.basename(write.file))) return null;
  const bytes = (v: string): number | null => (v === "max" ? Infinity : /^\d+$/.test(v) ? Number(v) : null);
  const [before, after] = [bytes(write.before), bytes(write.wrote)];
  if (before === null || after === null || after <= before) return null;
  const text = (n: number): string => (n === Infinity ? "max" : formatBytes(n));
  const raised = `${write.file}: the limit went up from ${text(before)} to ${text(after)}`;
  if (from !== null) return `${raised}, as ${from} asked`;
  return `${raised} (--memory-max, 2G when not given): give --memory-max again to keep the limit the drill was set up with`;
}

/** inspect → plan → apply. */
export function setupWorkerCgroup(roots: HostRoots, cgroup: WorkerCgroup, stateDir: string, options: SetupOptions): SetupResult {
  const plan = planSetup(cgroup, inspectForSetup(roots, cgroup, stateDir), options);
  return applySetup(plan, stateDir);
}
