import { existsSync, readdirSync, readFileSync } from "node:fs";
import { expect } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readState, type DrillState } from "../../src/drill/state.js";
import { findByCwd, findByRunId } from "../../src/drill/strays.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";

/**
 * RELIABILITY.md's "host clean" after rollback: no drill cgroup directory in
 * any hierarchy, no process the drill started (by record or by DRILL_RUN_ID),
 * the file directory gone, the state file marked complete.
 */
export function assertHostClean(stateDir: string, name: string, before: DrillState): void {
  const roots = new HostRoots();
  const after = readState(stateDir, name);
  expect(after?.phase ?? "complete").toBe("complete");
  for (const dir of after?.cgroup?.dirs ?? before.cgroup?.dirs ?? []) expect(existsSync(dir), `${dir} left behind`).toBe(false);
  for (const p of before.processes) {
    if (p.pid !== null && p.startTime !== null) expect(isSameProcess(roots, p.pid, p.startTime), `${p.role} pid ${p.pid} alive`).toBe(false);
  }
  if (before.owner.startTime !== null && before.owner.pid !== process.pid) {
    expect(isSameProcess(roots, before.owner.pid, before.owner.startTime), `drill up pid ${before.owner.pid} alive`).toBe(false);
  }
  expect(findByRunId(roots, before.runId)).toEqual([]);
  // redis-server overwrites its environment with its title: find it by its --dir.
  if (before.redis.embedded) {
    expect(findByCwd(roots, before.redis.embedded.dir), "embedded redis-server alive").toEqual([]);
    // its `timeout` wrapper carries no DRILL_RUN_ID; it names the dir on its command line
    expect(processesNaming(before.redis.embedded.dir), "a process naming the embedded redis dir").toEqual([]);
  }
  if (before.fileDir) expect(existsSync(before.fileDir), `${before.fileDir} left behind`).toBe(false);
}

/** Live processes whose command line has `dir` as one argument (redis-server --dir <dir>, and its timeout wrapper). */
export function processesNaming(dir: string): number[] {
  const roots = new HostRoots();
  const needle = Buffer.from(`\0${dir}\0`);
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readProcessStat(roots, Number(entry));
      if (stat.ok && stat.value.state !== "Z" && Buffer.concat([Buffer.from([0]), readFileSync(`/proc/${entry}/cmdline`)]).includes(needle)) pids.push(Number(entry));
    } catch {
      // gone
    }
  }
  return pids;
}
