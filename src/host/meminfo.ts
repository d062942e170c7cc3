import { readKernelText, type HostRoots } from "./kernelFile.js";

/**
 * MemTotal + SwapTotal of /proc/meminfo in bytes: the most memory this host
 * could ever hold for one process. Null if unreadable (a fake --procfs without
 * meminfo): then no bound is applied rather than a guessed one.
 */
export function readHostMemoryBytes(roots: HostRoots): number | null {
  const text = readKernelText(roots.proc("meminfo"));
  if (!text.ok) return null;
  const mem = /^MemTotal:\s+(\d+) kB$/m.exec(text.value);
  if (!mem) return null;
  const swap = /^SwapTotal:\s+(\d+) kB$/m.exec(text.value);
  return (Number(mem[1]) + (swap ? Number(swap[1]) : 0)) * 1024;
}
