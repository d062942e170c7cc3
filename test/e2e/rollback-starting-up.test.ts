import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { findDrillRunProcesses } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean, drillCgroupDirsOnHost } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const CGROUP = "startingupcg";
const skip = realDrillSkipReason();
if (skip) console.warn(`skipping rollback of an up still starting: ${skip}`);

/**
 * QA: `up` holds up.lock from its first step but records its run only after
 * doctor; a rollback in between said "nothing to roll back: ... no process of
 * drill X on this host" (exit 0), and the drill came up behind it. Here the up
 * is wedged right after taking its lock (DRILL_CRASH_AT=lock:stop: SIGSTOP),
 * so the window is as long as the test needs.
 */
describe.skipIf(skip !== null)("drill rollback while an up is still starting (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  const wedged: number[] = [];
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-starting-up-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "startup.yaml"), tinyDrill("startup", { duration: "6s", phases: [["0s", pack(1)]] }));
  });
  afterAll(async () => {
    for (const pid of wedged) {
      try {
        process.kill(pid, "SIGKILL");
        process.kill(pid, "SIGCONT");
      } catch {
        // gone, as it should be
      }
    }
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  /** Starts an up that stops itself right after taking up.lock; its pid once it is stopped. */
  async function wedgedUp() {
    const up = runDrill(["--state-dir", stateDir, "up", "--drill", path.join(root, "startup.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], {
      timeout: 60_000,
      env: { DRILL_CRASH_AT: "lock:stop" },
    });
    const lock = path.join(stateDir, "startup", "up.lock");
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (Date.now() > deadline) throw new Error("up did not take its lock and stop");
      if (existsSync(lock)) {
        const pid = (JSON.parse(readFileSync(lock, "utf8")) as { pid: number }).pid;
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("T")) {
          wedged.push(pid);
          return { up, pid };
        }
      }
      await sleep(50);
    }
  }

  it("stops the up first and says so, instead of 'nothing to roll back'; the drill never comes up", async () => {
    const { up, pid } = await wedgedUp();
    const upStart = startTimeOf(pid);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "startup"], { timeout: 60_000 });
    const said = rollback.stdout + rollback.stderr;
    expect(rollback.exitCode, said).toBe(0);
    expect(said).toContain(`drill up of startup (pid ${pid}) was starting, no run of it recorded yet: stopped`);
    expect(said).not.toMatch(/nothing to roll back/);
    expect((await up).exitCode).toBe(143);
    // What it recorded before the signal reached it (its state, maybe its Redis) is rolled back with it.
    expect(readState(stateDir, "startup")?.phase ?? "complete", said).toBe("complete");
    expect(cgroupDirsLeft(realWorkerCgroup(CGROUP))).toEqual([]);
    assertStartingUpRolledBack(pid, upStart, said);
  });

  it("without --name, and in --json: the stopped up is in the document, which is not 'nothing to roll back'", async () => {
    const { up, pid } = await wedgedUp();
    const upStart = startTimeOf(pid);
    const rollback = await runDrill(["--state-dir", stateDir, "--json", "rollback"], { timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const doc = JSON.parse(rollback.stdout) as { starting_ups: unknown[]; nothing_to_roll_back: boolean };
    expect(doc.starting_ups).toEqual([{ name: "startup", pid, outcome: "stopped" }]);
    expect(doc.nothing_to_roll_back).toBe(false);
    expect((await up).exitCode).toBe(143);
    assertStartingUpRolledBack(pid, upStart, rollback.stdout + rollback.stderr);
  });

  // QA: a SIGTERM while up set up (after its Redis started) still opened the lever and started gate, worker and
  // watch before up stopped. Here up stops itself right after its Redis started; the signal lands there.
  it("SIGTERM while it sets up: exit 143, admission not opened, no child started; the rollback reaches host clean", async () => {
    const up = runDrill(["--state-dir", stateDir, "up", "--drill", path.join(root, "startup.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], {
      timeout: 60_000,
      env: { DRILL_CRASH_AT: "redis-spawn:stop" },
    });
    let pid = 0;
    for (const deadline = Date.now() + 30_000; pid === 0; await sleep(50)) {
      if (Date.now() > deadline) throw new Error("up did not start its Redis and stop");
      const owner = readState(stateDir, "startup")?.owner.pid;
      if (owner === undefined || !existsSync(`/proc/${owner}/stat`)) continue;
      const stat = readFileSync(`/proc/${owner}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("T")) pid = owner;
    }
    wedged.push(pid);
    process.kill(pid, "SIGTERM");
    process.kill(pid, "SIGCONT");
    const result = await up;
    const said = result.stdout + result.stderr;
    expect(result.exitCode, said).toBe(143);
    expect(said).toContain("stopped by SIGTERM while setting up: admission not opened, gate, worker and watch not started");
    expect(said).not.toContain("started gate, worker");
    expect(said).not.toContain("waiting for gate and worker");
    const state = readState(stateDir, "startup")!;
    expect(state.processes.map((p) => p.role)).toEqual(["redis"]);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "startup"], { timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "startup", state, { cgroupName: CGROUP });
  });

  function startTimeOf(pid: number): number {
    const stat = readProcessStat(new HostRoots(), pid);
    if (!stat.ok) throw new Error(`wedged up ${pid}: ${stat.reason}`);
    return stat.value.startTime;
  }

  /**
   * Host clean (and no job lost) after the rollback of an up stopped before it
   * recorded a run: whatever it recorded once the signal let it go on (a state,
   * maybe a Redis) is the "before"; either way the up is gone, no drill cgroup,
   * no process of a run from this state dir, no file dir left.
   */
  function assertStartingUpRolledBack(upPid: number, upStart: number, said: string): void {
    const roots = new HostRoots();
    expect(isSameProcess(roots, upPid, upStart), `up ${upPid} alive`).toBe(false);
    expect(drillCgroupDirsOnHost(CGROUP), said).toEqual([]);
    expect(findDrillRunProcesses(roots).filter((p) => p.stateDir === stateDir), said).toEqual([]);
    expect(readdirSync(path.join(root, "files")), said).toEqual([]);
    const recorded = readState(stateDir, "startup");
    if (recorded === null) return;
    assertHostClean(stateDir, "startup", recorded, { cgroupName: CGROUP });
    // Stopped before its schedule: it pushed nothing, and its Redis (if it got one) was exported with nothing in it.
    if (recorded.redis.embedded !== null) {
      expect(typeof recorded.rollback?.exported, said).toBe("string");
      assertNoJobLostInExport(recorded.rollback!.exported!, recorded.queue, []);
    }
  }
});
