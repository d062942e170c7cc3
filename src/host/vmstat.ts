import { fail, ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";
import { scanKeyedCounters } from "./keyedCounters.js";

export type Vmstat = ReadonlyMap<string, number>;

/**
 * Parses /proc/vmstat, one counter a line:
 *   pswpin 0
 *   workingset_refault_file 1234
 * A line that is not `name integer` is an error value; a duplicated name too.
 */
export function parseVmstat(text: string, file: string): Reading<Vmstat> {
  const counters = new Map<string, number>();
  for (const rawLine of text.split("\n")) {
    const line = rawLine.trim();
    if (line === "") continue;
    const match = /^([a-z0-9_]+)\s+(\d+)$/.exec(line);
    if (!match) return fail(file, `unparseable line "${line.slice(0, 40)}"`);
    const [, name, value] = match as unknown as [string, string, string];
    if (counters.has(name)) return fail(file, `duplicated counter ${name}`);
    counters.set(name, Number(value));
  }
  if (counters.size === 0) return fail(file, "empty");
  return ok(counters);
}

export function readVmstat(roots: HostRoots): Reading<Vmstat> {
  const file = roots.proc("vmstat");
  const text = readKernelText(file);
  return text.ok ? parseVmstat(text.value, file) : text;
}

/** The counters the sidecar turns into rates. */
export interface SwapCounters {
  /** Pages swapped in, host-wide: a neighbour's swap-in is not your cgroup's leak. */
  pswpin: number | null;
  pswpout: number | null;
  /** Older kernels have workingset_refault; newer ones split it into _anon and _file. */
  workingsetRefault: number | null;
}

export function swapCounters(vmstat: Vmstat): SwapCounters {
  const split = ["workingset_refault_anon", "workingset_refault_file"].map((name) => vmstat.get(name));
  const refault = vmstat.get("workingset_refault") ??
    (split.every((v) => v === undefined) ? undefined : split.reduce<number>((sum, v) => sum + (v ?? 0), 0));
  return {
    pswpin: vmstat.get("pswpin") ?? null,
    pswpout: vmstat.get("pswpout") ?? null,
    workingsetRefault: refault ?? null,
  };
}

/** The counters swapCounters reads: all the sidecar needs from /proc/vmstat. */
export const SWAP_COUNTER_NAMES: readonly string[] = [
  "pswpin",
  "pswpout",
  "workingset_refault",
  "workingset_refault_anon",
  "workingset_refault_file",
];

/**
 * parseVmstat keeping only `names`, for a reader that runs every sample (see
 * scanKeyedCounters): the same check on every line, without a regex match and
 * a Map entry for each of the ~180 counters; bad text is parseVmstat's error.
 */
export function parseVmstatCounters(text: string, file: string, names: readonly string[]): Reading<Vmstat> {
  return scanKeyedCounters(text, file, names, parseVmstat);
}

