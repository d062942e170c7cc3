import { fail, ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";

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
export const SWAP_COUNTER_NAMES: ReadonlySet<string> = new Set([
  "pswpin",
  "pswpout",
  "workingset_refault",
  "workingset_refault_anon",
  "workingset_refault_file",
]);

const isNameChar = (c: number): boolean => (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 95; // a-z 0-9 _
const isBlank = (c: number): boolean => c === 32 || c === 9 || c === 13 || c === 11 || c === 12;
const isDigit = (c: number): boolean => c >= 48 && c <= 57;

/**
 * parseVmstat keeping only `names`, for a reader that runs every second: the
 * same check on every line, without a regex match and a Map entry for each of
 * the ~180 counters. Any line the scan does not accept goes to parseVmstat,
 * so bad text is the same error value. One difference: a duplicated name is
 * only caught among `names` (the kernel never prints one twice).
 */
export function parseVmstatCounters(text: string, file: string, names: ReadonlySet<string>): Reading<Vmstat> {
  const counters = new Map<string, number>();
  let lines = 0;
  const end = text.length;
  let at = 0;
  while (at < end) {
    let eol = text.indexOf("\n", at);
    if (eol < 0) eol = end;
    let i = at;
    let last = eol;
    while (i < last && isBlank(text.charCodeAt(i))) i++;
    while (last > i && isBlank(text.charCodeAt(last - 1))) last--;
    if (i < last) {
      // name, blanks, digits: /^([a-z0-9_]+)\s+(\d+)$/ after trim
      const nameStart = i;
      while (i < last && isNameChar(text.charCodeAt(i))) i++;
      const nameEnd = i;
      while (i < last && isBlank(text.charCodeAt(i))) i++;
      const valueStart = i;
      while (i < last && isDigit(text.charCodeAt(i))) i++;
      if (nameEnd === nameStart || valueStart === nameEnd || i === valueStart || i !== last) return parseVmstat(text, file);
      lines++;
      const name = text.slice(nameStart, nameEnd);
      if (names.has(name)) {
        if (counters.has(name)) return fail(file, `duplicated counter ${name}`);
        counters.set(name, Number(text.slice(valueStart, last)));
      }
    }
    at = eol + 1;
  }
  if (lines === 0) return fail(file, "empty");
  return ok(counters);
}

/** /proc/vmstat with only `names` kept (see parseVmstatCounters). */
export function readVmstatCounters(file: string, names: ReadonlySet<string> = SWAP_COUNTER_NAMES): Reading<Vmstat> {
  const text = readKernelText(file);
  return text.ok ? parseVmstatCounters(text.value, file, names) : text;
}
