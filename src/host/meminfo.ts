import { ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";

export interface Meminfo {
  memTotalBytes: number | null;
  swapTotalBytes: number | null;
}

/** MemTotal and SwapTotal of /proc/meminfo (`SwapTotal:        0 kB`) in bytes, each null when absent; why not, when the file does not read. */
export function readMeminfoReading(roots: HostRoots): Reading<Meminfo> {
  const text = readKernelText(roots.proc("meminfo"));
  if (!text.ok) return text;
  const kb = (field: string): number | null => {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text.value);
    return match ? Number(match[1]) * 1024 : null;
  };
  return ok({ memTotalBytes: kb("MemTotal"), swapTotalBytes: kb("SwapTotal") });
}

/** readMeminfoReading, null if unreadable. */
export function readMeminfo(roots: HostRoots): Meminfo | null {
  const reading = readMeminfoReading(roots);
  return reading.ok ? reading.value : null;
}

/**
 * MemTotal + SwapTotal in bytes: the most memory this host could ever hold
 * for one process. Null if unreadable (a fake --procfs without meminfo):
 * then no bound is applied rather than a guessed one.
 */
export function readHostMemoryBytes(roots: HostRoots): number | null {
  const meminfo = readMeminfo(roots);
  if (meminfo === null || meminfo.memTotalBytes === null) return null;
  return meminfo.memTotalBytes + (meminfo.swapTotalBytes ?? 0);
}
