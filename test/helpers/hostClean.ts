import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import { readProcessCgroups, requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readState, type DrillState } from "../../src/drill/state.js";
import { findByCwd, findByRunId } from "../../src/drill/strays.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { runDrill } from "./cli.js";

export interface HostCleanOptions {
  /** The drill's cgroup name (--name), looked for in every hierarchy even when up died before recording it. */
  cgroupName?: string;
  /** Unrelated processes that must survive rollback. */
  bystanders?: Bystander[];
}

/** `drill rollback --name <name>` of a drill that stopped (or failed) with what `before` recorded: exit 0, then assertHostClean. */
export async function rollsBackClean(stateDir: string, name: string, before: DrillState, options: HostCleanOptions = {}): Promise<void> {
  const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", name], { timeout: 90_000 });
  expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
  assertHostClean(stateDir, name, before, options);
}

/**
 * RELIABILITY.md's "host clean" after rollback: no drill cgroup directory in
 * any hierarchy, no process the drill started (by record or by DRILL_RUN_ID),
 * every unrelated process alive, the file directory gone, the state file
 * marked complete.
 */
export function assertHostClean(stateDir: string, name: string, before: DrillState, options: HostCleanOptions = {}): void {
  const roots = new HostRoots();
  const after = readState(stateDir, name);
  expect(after?.phase ?? "complete").toBe("complete");
  for (const dir of after?.cgroup?.dirs ?? before.cgroup?.dirs ?? []) expect(existsSync(dir), `${dir} left behind`).toBe(false);
  const cgroupName = options.cgroupName ?? after?.cgroup?.name ?? before.cgroup?.name;
  if (cgroupName !== undefined) expect(drillCgroupDirsOnHost(cgroupName), `cgroup ${cgroupName} left behind`).toEqual([]);
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
  for (const b of options.bystanders ?? []) expect(isSameProcess(roots, b.pid, b.startTime), `bystander ${b.pid} (${b.argv0}) killed`).toBe(true);
}

/**
 * Every directory named after the drill's cgroup `cgroupName` (--parent self)
 * or its unified twin, wherever it is: the v1 memory tree under the test's own
 * cgroup and the whole unified tree (twins of nested drills sit flat under its
 * root), not only the dirs a state file recorded.
 */
export function drillCgroupDirsOnHost(cgroupName: string): string[] {
  const roots = new HostRoots();
  const layout = requireLayout(roots);
  const self = readProcessCgroups(roots);
  if (!self.ok) throw new Error(`${self.file}: ${self.reason}`);
  const expected = resolveWorkerCgroup(roots, layout, cgroupName, { kind: "self" });
  const found = new Set(expected.dirs.map((d) => d.dir).filter((dir) => existsSync(dir)));
  const searches: Array<{ top: string; names: Set<string> }> = [];
  if (expected.memory) searches.push({ top: path.join(expected.memory.mount, self.value.memory ?? "/"), names: new Set([cgroupName]) });
  if (expected.unified) {
    // v2: the cgroup itself, under the test's own cgroup; hybrid: the twin, whose name is unique to this v1 path.
    const top = expected.memory ? expected.unified.mount : path.join(expected.unified.mount, self.value.unified ?? "/");
    searches.push({ top, names: new Set([path.basename(expected.unified.dir)]) });
  }
  for (const { top, names } of searches) for (const dir of walkDirs(top, 8)) if (names.has(path.basename(dir))) found.add(dir);
  return [...found].sort();
}

function walkDirs(top: string, depth: number): string[] {
  if (depth < 0) return [];
  let entries;
  try {
    entries = readdirSync(top, { withFileTypes: true });
  } catch {
    return []; // removed meanwhile
  }
  return entries.filter((e) => e.isDirectory()).flatMap((e) => [path.join(top, e.name), ...walkDirs(path.join(top, e.name), depth - 1)]);
}

/**
 * An unrelated process that must outlive rollback: its command line has
 * `packed` and the drill's name (what `pgrep -f packed` or a match on the
 * name would kill), it carries no DRILL_RUN_ID and sits outside the drill's
 * cgroup (in the test's own).
 */
export interface Bystander {
  pid: number;
  startTime: number;
  argv0: string;
  stop(): void;
}

export async function startBystander(...drillNames: string[]): Promise<Bystander> {
  const argv0 = `packed ${drillNames.join(" ")} bystander`;
  const env = { ...process.env };
  delete env.DRILL_RUN_ID;
  delete env.DRILL_STATE_DIR;
  const child: ChildProcess = spawn("bash", ["-c", `exec -a "${argv0}" sleep 600`], { stdio: "ignore", env });
  const pid = child.pid!;
  const roots = new HostRoots();
  const deadline = Date.now() + 10_000;
  for (;;) {
    let cmdline = "";
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      // not there yet, or gone
    }
    const stat = readProcessStat(roots, pid);
    if (cmdline.startsWith(`${argv0}\0`) && stat.ok) {
      return { pid, startTime: stat.value.startTime, argv0, stop: () => void child.kill("SIGKILL") };
    }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`bystander ${pid} did not start (cmdline ${JSON.stringify(cmdline)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
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
