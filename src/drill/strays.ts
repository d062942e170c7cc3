import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import type { HostRoots } from "../host/kernelFile.js";
import { readProcessStat } from "../host/process.js";

/**
 * Processes carrying DRILL_RUN_ID=<runId> in their environment: how rollback
 * finds children whose pid never reached the state file (a SIGKILL between
 * spawn and write). Never by name: `pgrep -f packed` kills the wrong process.
 */
export interface StrayProcess {
  pid: number;
  startTime: number;
  comm: string;
}

export function findByRunId(roots: HostRoots, runId: string, exclude: ReadonlySet<number> = new Set([process.pid])): StrayProcess[] {
  const needle = Buffer.from(`DRILL_RUN_ID=${runId}\0`);
  const found: StrayProcess[] = [];
  let entries: string[];
  try {
    entries = readdirSync(roots.proc());
  } catch {
    return found;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (exclude.has(pid)) continue;
    let environ: Buffer;
    try {
      environ = readFileSync(roots.proc(entry, "environ"));
    } catch {
      continue; // gone, or a kernel thread
    }
    // environ entries are NUL-separated; match a whole entry, not a prefix of another id
    if (!(environ.subarray(0, needle.length).equals(needle) || environ.includes(Buffer.concat([Buffer.from([0]), needle])))) continue;
    const stat = readProcessStat(roots, pid);
    if (stat.ok && stat.value.state !== "Z") found.push({ pid, startTime: stat.value.startTime, comm: stat.value.comm });
  }
  return found;
}

/**
 * Processes whose working directory is `dir`. redis-server rewrites its
 * process title over its environment, so DRILL_RUN_ID cannot be read back
 * from it; it does chdir into its --dir, which is the drill's own.
 */
export function findByCwd(roots: HostRoots, dir: string, exclude: ReadonlySet<number> = new Set([process.pid])): StrayProcess[] {
  const found: StrayProcess[] = [];
  let entries: string[];
  try {
    entries = readdirSync(roots.proc());
  } catch {
    return found;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || exclude.has(Number(entry))) continue;
    let cwd: string;
    try {
      cwd = readlinkSync(roots.proc(entry, "cwd")).replace(/ \(deleted\)$/, "");
    } catch {
      continue;
    }
    if (cwd !== dir) continue;
    const stat = readProcessStat(roots, Number(entry));
    if (stat.ok && stat.value.state !== "Z") found.push({ pid: stat.value.pid, startTime: stat.value.startTime, comm: stat.value.comm });
  }
  return found;
}
