import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readState, writeState, type DrillState, type ProcessRole } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { forceCleanup, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { startBystander, type Bystander } from "../helpers/hostClean.js";

/**
 * RELIABILITY 2 and 6 at the rollback level: what rollback finds on the host
 * that is not the drill's is never touched. A cgroup of the drill's name with
 * a foreign task, no state file: left alone, task alive. A recorded pid that
 * now names another process (its start time differs): never signalled.
 */

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping rollback foreign tests: ${skip}`);

let root = "";
const children: ChildProcess[] = [];
const bystanders: Bystander[] = [];
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "drill-foreign-"));
});
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const b of bystanders.splice(0)) b.stop();
});
afterAll(async () => {
  if (skip === null) await forceCleanup(realWorkerCgroup("fgn"), root);
  rmSync(root, { recursive: true, force: true });
});

describe.skipIf(skip !== null)("rollback leaves what is not the drill's alone", () => {
  it("no state file, a foreign task in a cgroup of the drill's name (and its twin): task alive, cgroup left, exit 0 (2)", async () => {
    const cgroup = realWorkerCgroup("fgn");
    const task = spawn("sleep", ["300"], { stdio: "ignore", env: { PATH: process.env.PATH } });
    children.push(task);
    await new Promise((r) => task.once("spawn", r));
    for (const dir of cgroup.dirs) {
      mkdirSync(dir.dir);
      writeFileSync(path.join(dir.dir, "cgroup.procs"), String(task.pid));
    }
    const stat = readProcessStat(new HostRoots(), task.pid!);
    expect(stat.ok).toBe(true);
    const startTime = stat.ok ? stat.value.startTime : 0;

    const stateDir = mkdtempSync(path.join(root, "none-"));
    for (const args of [["rollback", "--name", "fgn"], ["rollback"]]) {
      const r = await runDrill(["--state-dir", stateDir, ...args], { timeout: 60_000 });
      // Without --name rollback also names any drill running elsewhere on this host (exit 4): that
      // is not this test's to judge, what it did to the foreign cgroup is.
      if (args.includes("--name")) {
        expect(r.exitCode, r.stdout + r.stderr).toBe(0);
        expect(r.stdout).toMatch(/nothing to roll back/);
      }
      expect(isSameProcess(new HostRoots(), task.pid!, startTime), `foreign task killed by ${args.join(" ")}`).toBe(true);
      for (const dir of cgroup.dirs) expect(existsSync(dir.dir), `${dir.dir} removed by ${args.join(" ")}`).toBe(true);
    }
    // teardown (afterAll) moves nothing: kill the task, then the dirs can go
    task.kill("SIGKILL");
    await new Promise((r) => task.once("exit", r));
    await forceCleanup(cgroup, root);
  }, 60_000);

  it("a recorded pid that now belongs to another process (start time differs) is not signalled, in any role (6)", async () => {
    const decoy = await startBystander("pidreuse");
    bystanders.push(decoy);
    const stateDir = mkdtempSync(path.join(root, "reuse-"));
    const roles: ProcessRole[] = ["packer", "gate", "worker", "watch", "hog"];
    // What up recorded for processes long gone, whose pid the decoy has now: same pid, another start time.
    const state: DrillState = {
      version: 1,
      name: "reuse",
      runId: "reuse-20260101000000-abcdef",
      drillFile: "x.yaml",
      createdAt: new Date().toISOString(),
      phase: "running",
      queue: "jobs",
      redis: { url: "", embedded: null },
      cgroup: null,
      processes: roles.map((role) => ({ role, key: role, pid: decoy.pid, startTime: decoy.startTime - 1, files: [], intendedAt: new Date().toISOString() })),
      fileDir: null,
      owner: { pid: decoy.pid, startTime: decoy.startTime - 1 },
    };
    writeState(stateDir, state);
    const r = await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(isSameProcess(new HostRoots(), decoy.pid, decoy.startTime), "the decoy was signalled").toBe(true);
    expect(readState(stateDir, "reuse")?.phase).toBe("complete");
  }, 60_000);
});
