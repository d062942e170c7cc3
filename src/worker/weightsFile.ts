import { readdirSync, rmSync, statfsSync } from "node:fs";
import path from "node:path";
import { RefusedError, UsageError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess } from "../host/process.js";
import { formatBytes } from "../units.js";

/**
 * The weights file: `<weights-dir>/drill-weights-<worker>-<pid>-<starttime>.bin`,
 * created fresh (O_EXCL) by the serve coprocess from inside the cgroup, so
 * its page cache is charged there. The coprocess unlinks it on every exit but
 * SIGKILL; the owner's pid and start time in the name let the next worker
 * (or rollback) tell a dead owner's leftover from a live one's file.
 */
export function weightsFileName(workerId: string, pid: number, startTime: number): string {
  return `drill-weights-${workerId}-${pid}-${startTime}.bin`;
}

const NAME = /^drill-weights-(.+)-(\d+)-(\d+)\.bin$/;

export function parseWeightsFileName(name: string): { workerId: string; pid: number; startTime: number } | null {
  const match = NAME.exec(name);
  if (!match) return null;
  return { workerId: match[1]!, pid: Number(match[2]), startTime: Number(match[3]) };
}

/** Unlinks this worker id's files whose owner process is gone; returns what it removed. */
export function removeStaleWeightsFiles(roots: HostRoots, dir: string, workerId: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const parsed = parseWeightsFileName(name);
    if (!parsed || parsed.workerId !== workerId) continue;
    if (isSameProcess(roots, parsed.pid, parsed.startTime)) continue;
    const file = path.join(dir, name);
    rmSync(file, { force: true });
    removed.push(file);
  }
  return removed;
}

const MEMORY_FILESYSTEMS: Record<number, string> = { 0x01021994: "tmpfs", 0x858458f6: "ramfs" };
const FREE_MARGIN = 64 * 1024 * 1024;

/** --weights-dir: absolute, on a disk filesystem (page cache, reclaimable), with room for the file. */
export function checkWeightsDir(dir: string, sizeBytes: number): void {
  if (!path.isAbsolute(dir)) throw new UsageError(`--weights-dir: "${dir}" must be an absolute path`);
  let stats: ReturnType<typeof statfsSync>;
  try {
    stats = statfsSync(dir);
  } catch (err) {
    throw new UsageError(`--weights-dir: cannot use ${dir}: ${(err as Error).message}`);
  }
  const memoryFs = MEMORY_FILESYSTEMS[stats.type];
  if (memoryFs) {
    throw new RefusedError(`--weights-dir ${dir} is on ${memoryFs}: the weights would be shmem, not reclaimable page cache without swap; use a disk filesystem such as /var/tmp`);
  }
  const free = stats.bavail * stats.bsize;
  if (free < sizeBytes + FREE_MARGIN) {
    throw new RefusedError(`--weights-dir ${dir} has ${formatBytes(free)} free; the weights file needs ${formatBytes(sizeBytes)} plus ${formatBytes(FREE_MARGIN)} to spare`);
  }
}
