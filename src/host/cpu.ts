import { fail, ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";

/** Aggregate jiffies from the `cpu` line of /proc/stat. */
export interface CpuTimes {
  user: number;
  nice: number;
  system: number;
  idle: number;
  iowait: number;
  irq: number;
  softirq: number;
  steal: number;
  total: number;
}

/**
 * Parses the aggregate line of /proc/stat:
 *   cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
 * Fields after steal (guest, guest_nice) are already counted in user/nice.
 * Older kernels have fewer columns: missing ones count as absent work (0),
 * but fewer than four (up to idle) is an error.
 */
export function parseProcStatCpu(text: string, file: string): Reading<CpuTimes> {
  const line = aggregateCpuLine(text);
  if (line === null) return fail(file, "no aggregate cpu line");
  const fields = line.trim().split(/\s+/).slice(1);
  if (fields.length < 4) return fail(file, `cpu line has ${fields.length} fields, need at least 4`);
  if (!fields.every((f) => /^\d+$/.test(f))) return fail(file, `non-numeric field in cpu line "${line.slice(0, 60)}"`);
  const n = fields.map(Number);
  // Digits past what a double holds are Infinity, and idle % from it NaN.
  if (!n.every(Number.isFinite)) return fail(file, `a field out of range (too many digits) in cpu line "${line.slice(0, 60)}"`);
  const at = (i: number): number => n[i] ?? 0;
  const times = {
    user: at(0),
    nice: at(1),
    system: at(2),
    idle: at(3),
    iowait: at(4),
    irq: at(5),
    softirq: at(6),
    steal: at(7),
  };
  const total = Object.values(times).reduce((a, b) => a + b, 0);
  return ok({ ...times, total });
}

/** The first line that starts with "cpu" and a blank, found without splitting the whole file (its intr line alone can be KiBs). */
function aggregateCpuLine(text: string): string | null {
  for (let at = 0; at < text.length; ) {
    let eol = text.indexOf("\n", at);
    if (eol < 0) eol = text.length;
    if (at + 3 < eol && text.startsWith("cpu", at) && /\s/.test(text.charAt(at + 3))) return text.slice(at, eol);
    at = eol + 1;
  }
  return null;
}

export interface CpuUsage {
  /** Idle only: iowait is reported apart, it is not spare capacity. */
  idlePct: number;
  iowaitPct: number;
}

/** CPU idle % between two readings; null when no time passed or counters went back. */
export function cpuUsageBetween(prev: CpuTimes, next: CpuTimes): CpuUsage | null {
  const total = next.total - prev.total;
  const idle = next.idle - prev.idle;
  // proc(5): iowait "may decrease in certain conditions" (per-CPU accounting,
  // worst while thrashing): a decrease is no iowait, not an unreadable sample.
  const iowait = Math.max(0, next.iowait - prev.iowait);
  if (total <= 0 || idle < 0) return null;
  return { idlePct: (idle / total) * 100, iowaitPct: (iowait / total) * 100 };
}

/**
 * How many CPUs a kernel cpu list names (`0-3`, `0,2-5`, as in
 * /sys/devices/system/cpu/online); null when it is not one.
 */
export function countCpuList(text: string): number | null {
  const list = text.trim();
  if (list === "") return null;
  let count = 0;
  for (const part of list.split(",")) {
    const range = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!range) return null;
    const first = Number(range[1]);
    const last = range[2] === undefined ? first : Number(range[2]);
    if (last < first) return null;
    count += last - first + 1;
  }
  return count;
}

/** The host's online CPUs, read from sysfs (the count the kernel schedules on, not the cgroup's quota). */
export function readOnlineCpus(roots: HostRoots): Reading<number> {
  const file = roots.sys("devices", "system", "cpu", "online");
  const text = readKernelText(file);
  if (!text.ok) return text;
  const count = countCpuList(text.value);
  return count === null ? fail(file, `not a cpu list: ${JSON.stringify(text.value.trim().slice(0, 40))}`) : ok(count);
}

/**
 * The runbook's "if your box differs, rewrite the thresholds, not the story":
 * a drill file that declares `host.vcpus` for another box than this one runs
 * with thresholds written for that box. A warning, never a refusal (the
 * thresholds may have been rewritten already); null when they agree or
 * either side is unknown.
 */
export function vcpusMismatch(declared: number | undefined, online: Reading<number>, drillFile: string): string | null {
  if (declared === undefined || !online.ok || online.value === declared) return null;
  return `host.vcpus ${declared} in ${drillFile}, this host has ${online.value} online: its thresholds were written for ${declared} vCPU; if your box differs, rewrite the thresholds, not the story`;
}
