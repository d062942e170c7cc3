import path from "node:path";
import { fail, ok, readKernelText, type Reading } from "../host/kernelFile.js";
import type { CgroupDir } from "./paths.js";

/** A memory limit: bytes, or unlimited (`max` on v2, PAGE_COUNTER_MAX bytes on v1). */
export type Limit = number | "max";

export interface MissingFile {
  file: string;
  reason: string;
}

/**
 * The memory files of one cgroup, v1 or v2, in one shape. A value that could
 * not be read is null with its file in `missing`, never 0. Fields the version
 * does not have (v1 has no oom count, v2 no under_oom) are null without a
 * `missing` entry.
 */
export interface CgroupMemory {
  version: 1 | 2;
  dir: string;
  /** memory.max / memory.limit_in_bytes. */
  limit: Limit | null;
  /** The tightest limit over this cgroup and its ancestors, and where it is set. */
  effectiveLimit: Limit | null;
  effectiveLimitDir: string | null;
  /** Swap allowed on top of memory: memory.swap.max, or v1 memsw − limit. */
  swapLimit: Limit | null;
  /** memory.current / memory.usage_in_bytes. */
  usage: number | null;
  /** memory.peak / memory.max_usage_in_bytes. */
  peak: number | null;
  /** memory.swap.current, or v1 memsw.usage − usage. */
  swapCurrent: number | null;
  events: {
    /** v2 memory.events `oom`: the limit was hit and reclaim failed. */
    oom: number | null;
    /** v2 memory.events / v1 memory.oom_control `oom_kill`. */
    oomKill: number | null;
    /** v2 memory.events `max`: times usage was about to exceed the limit. */
    max: number | null;
    /** v1 memory.oom_control `under_oom`. */
    underOom: boolean | null;
    /** v1 memory.failcnt: charges that hit the limit. */
    failcnt: number | null;
  };
  /** Pids in cgroup.procs. */
  tasks: number[] | null;
  /** memory.stat, key → value. */
  stat: Record<string, number> | null;
  missing: MissingFile[];
}

// Above this a v1 limit is "unlimited": PAGE_COUNTER_MAX * PAGE_SIZE prints
// as 9223372036854771712 with 4 KiB pages, and no real limit is near 2^53.
const V1_UNLIMITED_FLOOR = Number.MAX_SAFE_INTEGER;

/**
 * A limit file:
 *   max                      (v2 memory.max, memory.swap.max)
 *   268435456
 *   9223372036854771712      (v1 memory.limit_in_bytes, unlimited)
 */
export function parseLimit(text: string, file: string): Reading<Limit> {
  const value = text.trim();
  if (value === "max") return ok("max");
  if (!/^\d+$/.test(value)) return fail(file, `not a limit: "${value.slice(0, 40)}"`);
  const n = Number(value);
  return ok(n >= V1_UNLIMITED_FLOOR ? "max" : n);
}

/** A single counter such as memory.current: `4571136`. */
export function parseCounter(text: string, file: string): Reading<number> {
  const value = text.trim();
  if (!/^\d+$/.test(value)) return fail(file, `not a number: "${value.slice(0, 40)}"`);
  const n = Number(value);
  return Number.isSafeInteger(n) ? ok(n) : fail(file, `out of range: ${value}`);
}

/**
 * Flat keyed files, one `key value` per line (memory.events, memory.stat, v1 memory.oom_control):
 *   oom_kill 3
 */
export function parseFlatKeyed(text: string, file: string): Reading<Map<string, number>> {
  const values = new Map<string, number>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") continue;
    const parts = line.split(/\s+/);
    if (parts.length !== 2 || !/^[a-z0-9_]+$/.test(parts[0]!) || !/^-?\d+$/.test(parts[1]!)) {
      return fail(file, `unparseable line "${line.slice(0, 60)}"`);
    }
    if (values.has(parts[0]!)) return fail(file, `duplicated key ${parts[0]}`);
    values.set(parts[0]!, Number(parts[1]));
  }
  return ok(values);
}

/** cgroup.procs / tasks: one pid per line (`6898`). Empty is a valid, empty cgroup. */
export function parsePids(text: string, file: string): Reading<number[]> {
  const pids: number[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") continue;
    if (!/^\d+$/.test(line)) return fail(file, `not a pid: "${line.slice(0, 40)}"`);
    pids.push(Number(line));
  }
  return ok(pids);
}

export function readPids(procsFile: string): Reading<number[]> {
  const text = readKernelText(procsFile);
  return text.ok ? parsePids(text.value, procsFile) : text;
}

/** Tightest of two limits. */
export function minLimit(a: Limit, b: Limit): Limit {
  if (a === "max") return b;
  if (b === "max") return a;
  return Math.min(a, b);
}

export function limitFileName(version: 1 | 2): string {
  return version === 2 ? "memory.max" : "memory.limit_in_bytes";
}

/** The tightest readable limit on a walk, and the limit files on it that could not be read. */
export interface LimitWalk {
  limit: Limit;
  dir: string | null;
  /** A limit file that is there but garbled or unreadable: the real limit may be tighter than `limit`. */
  unreadable: MissingFile[];
}

/**
 * The tightest limit from `dir` up to the hierarchy's mount. Ancestors without
 * a limit file (v2 root, or memory not enabled there) do not count; on v1 the
 * walk stops at a parent with use_hierarchy=0, whose limit does not apply below.
 * A limit file that does not read is not "max": it is in `unreadable`.
 */
export function effectiveLimitFrom(dir: string, mount: string, version: 1 | 2): LimitWalk {
  let limit: Limit = "max";
  let tightest: string | null = null;
  const unreadable: MissingFile[] = [];
  let current = path.resolve(dir);
  const top = path.resolve(mount);
  for (;;) {
    const file = path.join(current, limitFileName(version));
    const reading = readKernelText(file);
    const parsed = reading.ok ? parseLimit(reading.value, file) : reading.reason === "missing" ? null : reading;
    if (parsed && !parsed.ok) unreadable.push({ file: parsed.file, reason: parsed.reason });
    if (parsed?.ok && parsed.value !== "max" && (limit === "max" || parsed.value < limit)) {
      limit = parsed.value;
      tightest = current;
    }
    if (current === top || !current.startsWith(top)) break;
    const parent = path.dirname(current);
    if (version === 1) {
      const hierarchy = readKernelText(path.join(parent, "memory.use_hierarchy"));
      if (hierarchy.ok && hierarchy.value.trim() === "0") break;
    }
    current = parent;
  }
  return { limit, dir: tightest, unreadable };
}

/** Reads a cgroup's memory files (either version) into one shape. */
export function readCgroupMemory(cgroup: CgroupDir): CgroupMemory {
  const missing: MissingFile[] = [];
  const file = (name: string): string => path.join(cgroup.dir, name);
  function read<T>(name: string, parse: (text: string, file: string) => Reading<T>): T | null {
    const text = readKernelText(file(name));
    const parsed = text.ok ? parse(text.value, file(name)) : text;
    if (parsed.ok) return parsed.value;
    missing.push({ file: parsed.file, reason: parsed.reason });
    return null;
  }
  const keyed = (name: string): Map<string, number> | null => read(name, parseFlatKeyed);
  const needKey = (values: Map<string, number> | null, name: string, key: string): number | null => {
    if (!values) return null;
    const value = values.get(key);
    if (value === undefined) missing.push({ file: file(name), reason: `no ${key} line` });
    return value ?? null;
  };

  const v2 = cgroup.version === 2;
  const statValues = keyed("memory.stat");
  const limit = read(limitFileName(cgroup.version), parseLimit);
  const usage = read(v2 ? "memory.current" : "memory.usage_in_bytes", parseCounter);
  const peak = read(v2 ? "memory.peak" : "memory.max_usage_in_bytes", parseCounter);
  const swap = readCgroupSwap(cgroup);
  // v1 swap reads memory.limit_in_bytes again: one entry per file.
  missing.push(...swap.missing.filter((s) => !missing.some((m) => m.file === s.file)));
  const { swapLimit, swapCurrent } = swap;
  const events: CgroupMemory["events"] = { oom: null, oomKill: null, max: null, underOom: null, failcnt: null };
  if (v2) {
    const memoryEvents = keyed("memory.events");
    events.oom = needKey(memoryEvents, "memory.events", "oom");
    events.oomKill = needKey(memoryEvents, "memory.events", "oom_kill");
    events.max = needKey(memoryEvents, "memory.events", "max");
  } else {
    const oomControl = keyed("memory.oom_control");
    events.oomKill = needKey(oomControl, "memory.oom_control", "oom_kill");
    const underOom = needKey(oomControl, "memory.oom_control", "under_oom");
    events.underOom = underOom === null ? null : underOom !== 0;
    events.failcnt = read("memory.failcnt", parseCounter);
  }
  const tasks = read("cgroup.procs", parsePids);
  const walk = effectiveLimitFrom(cgroup.dir, cgroup.mount, cgroup.version);
  // The own limit file is in missing already; an ancestor's that does not read leaves the effective limit unknown.
  missing.push(...walk.unreadable.filter((u) => !missing.some((m) => m.file === u.file)));
  const effective = limit === null || walk.unreadable.length > 0 ? null : walk;

  return {
    version: cgroup.version,
    dir: cgroup.dir,
    limit,
    effectiveLimit: effective ? effective.limit : null,
    effectiveLimitDir: effective ? effective.dir : null,
    swapLimit,
    usage,
    peak,
    swapCurrent,
    events,
    tasks,
    stat: statValues ? Object.fromEntries(statValues) : null,
    missing,
  };
}

/** v1: memsw caps memory + swap together, so the swap allowed is memsw − limit; `max` stays max. */
export function v1SwapLimit(memsw: Limit, limit: Limit): Limit {
  return memsw === "max" || limit === "max" ? "max" : Math.max(0, memsw - limit);
}

/**
 * v1 swap in use, from memory.stat (`total_swap 0`, or `swap` without the
 * hierarchical line), not memsw.usage − usage: those two are read at
 * different instants and charged in per-CPU batches, so during a thrash their
 * difference flickers above zero on a host with no swap.
 */
export function v1SwapInUse(stat: ReadonlyMap<string, number>): number | undefined {
  return stat.get("total_swap") ?? stat.get("swap");
}

/** The v1 memory.stat keys v1SwapInUse reads. */
export const V1_SWAP_STAT_KEYS: readonly string[] = ["total_swap", "swap"];

/** The key oomKillIn reads. */
export const OOM_KILL_KEYS: readonly string[] = ["oom_kill"];

/** The `oom_kill` count of a parsed v2 memory.events or v1 memory.oom_control. */
export function oomKillIn(values: ReadonlyMap<string, number>, file: string): Reading<number> {
  const count = values.get("oom_kill");
  return count === undefined ? fail(file, "no oom_kill line (kernel < 4.13?)") : ok(count);
}

/**
 * Swap allowed and swap in use, and nothing else: the gate reads it every
 * interval to see a swap-disabled cgroup leak (read from the cgroup, not host si).
 */
export function readCgroupSwap(cgroup: CgroupDir): { swapLimit: Limit | null; swapCurrent: number | null; missing: MissingFile[] } {
  const missing: MissingFile[] = [];
  const read = <T>(name: string, parse: (text: string, file: string) => Reading<T>): T | null => {
    const file = path.join(cgroup.dir, name);
    const text = readKernelText(file);
    const parsed = text.ok ? parse(text.value, file) : text;
    if (parsed.ok) return parsed.value;
    missing.push({ file: parsed.file, reason: parsed.reason });
    return null;
  };
  if (cgroup.version === 2) {
    return { swapLimit: read("memory.swap.max", parseLimit), swapCurrent: read("memory.swap.current", parseCounter), missing };
  }
  const limit = read("memory.limit_in_bytes", parseLimit);
  const memsw = read("memory.memsw.limit_in_bytes", parseLimit);
  const swapLimit = memsw === null || limit === null ? null : v1SwapLimit(memsw, limit);
  // memory.stat only, as the sidecar reads it (sampler/read.ts): no fallback
  // to memsw.usage − usage, whose flicker would be a swap leak to the gate.
  const stat = read("memory.stat", parseFlatKeyed);
  const swapCurrent = stat === null ? null : (v1SwapInUse(stat) ?? null);
  if (stat !== null && swapCurrent === null) missing.push({ file: path.join(cgroup.dir, "memory.stat"), reason: "no swap line (swap accounting off)" });
  return { swapLimit, swapCurrent, missing };
}

/** Just the oom_kill count (v2 memory.events, v1 memory.oom_control), for before/after checks. */
export function readOomKillCount(cgroup: CgroupDir): Reading<number> {
  const name = cgroup.version === 2 ? "memory.events" : "memory.oom_control";
  const file = path.join(cgroup.dir, name);
  const text = readKernelText(file);
  if (!text.ok) return text;
  const values = parseFlatKeyed(text.value, file);
  return values.ok ? oomKillIn(values.value, file) : values;
}
