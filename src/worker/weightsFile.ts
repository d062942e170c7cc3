import { readdirSync } from "node:fs";
import path from "node:path";
import { checkFileDir } from "../host/filesystem.js";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess } from "../host/process.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";


/**
 * The weights file: `<file-dir>/drill-weights-<worker>-<pid>-<starttime>.bin`,
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

/**
 * Unlinks this worker id's files whose owner process is gone: what it
 * removed, and what it could not, with why (`left`: its dir immutable or
 * read-only; QA: rmSync's ENOTDIR stack trace stopped the worker at start).
 */
export function removeStaleWeightsFiles(roots: HostRoots, dir: string, workerId: string): { removed: string[]; left: Array<{ file: string; why: string }> } {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return { removed: [], left: [] };
  }
  const removed: string[] = [];
  const left: Array<{ file: string; why: string }> = [];
  for (const name of names) {
    const parsed = parseWeightsFileName(name);
    if (!parsed || parsed.workerId !== workerId) continue;
    if (isSameProcess(roots, parsed.pid, parsed.startTime)) continue;
    const file = path.join(dir, name);
    const why = unlinkLeftover(file);
    if (why === null) removed.push(file);
    else left.push({ file, why });
  }
  return { removed, left };
}

/** --file-dir (or --weights-dir, `flag`): absolute, on a disk filesystem (page cache, reclaimable), with room for the file. */
export function checkWeightsDir(dir: string, sizeBytes: number, flag: string): void {
  checkFileDir(dir, sizeBytes, flag, "the weights file");
}
