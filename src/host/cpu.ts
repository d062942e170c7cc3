import { fail, ok, type Reading } from "./kernelFile.js";

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
