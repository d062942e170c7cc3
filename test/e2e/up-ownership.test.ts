import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { findByRunId } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess } from "../../src/host/process.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping two drills on one cgroup name: ${skip}`);

const CGROUP = "ownedcg";
const M = 1024 * 1024;

// Long enough that the first drill still runs while the second is tried.
const drillNamed = (name: string, memoryMax: string) => tinyDrill(name, { duration: "30s", memoryMax, gate: "{ interval: 500ms }", phases: [["0s", pack(1)]] });

/** The limit the kernel holds for the cgroup a drill recorded (v1 memory dir or v2 dir). */
function recordedLimit(state: DrillState): number {
  for (const dir of state.cgroup!.dirs) {
    for (const file of ["memory.limit_in_bytes", "memory.max"]) {
      if (existsSync(path.join(dir, file))) return Number(readFileSync(path.join(dir, file), "utf8").trim());
    }
  }
  throw new Error(`no memory limit file in ${state.cgroup!.dirs.join(", ")}`);
}

/**
 * Two drills, one --name: the second must not adopt the first one's live
 * cgroup (rewrite its limits, put its worker beside the other, and let its
 * rollback kill the other drill's worker). It is refused before it starts
 * anything; once the first is rolled back the name is free again.
 */
describe.skipIf(skip !== null)("a second drill on a cgroup name another drill runs in (real cgroup)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-owned-"));
    stateDir = path.join(root, "state");
    writeFileSync(path.join(root, "first.yaml"), drillNamed("ownfirst", "96M"));
    writeFileSync(path.join(root, "second.yaml"), drillNamed("ownsecond", "128M"));
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  const up = (file: string, extra: string[] = ["--detach"]) =>
    runDrill(["--state-dir", stateDir, "up", "--drill", path.join(root, file), "--parent", "self", "--name", CGROUP, ...extra], { timeout: 120_000 });

  it("is refused (exit 3, naming the drill that owns it) and leaves the first drill's cgroup, limit and worker alone", async () => {
    const first = await up("first.yaml");
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    const firstState = readState(stateDir, "ownfirst") as DrillState;
    const worker = firstState.processes.find((p) => p.role === "worker")!;
    expect(recordedLimit(firstState)).toBe(96 * M);

    // In the foreground, so the refusal itself is on stderr (a detached up points at its log).
    const second = await up("second.yaml", []);
    expect(second.exitCode, second.stdout + second.stderr).toBe(3);
    expect(second.stderr).toMatch(/drill ownfirst/);
    expect(second.stderr).toMatch(/--name/);
    // Refused before it started anything: no state, so its rollback cannot reach the first drill's cgroup.
    expect(readState(stateDir, "ownsecond")).toBeNull();
    expect(recordedLimit(firstState)).toBe(96 * M);
    expect(isSameProcess(new HostRoots(), worker.pid!, worker.startTime!), "the first drill's worker").toBe(true);

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "ownfirst"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "ownfirst", firstState);

    // The name is free once its drill is rolled back.
    const again = await up("second.yaml");
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    const secondState = readState(stateDir, "ownsecond") as DrillState;
    expect(recordedLimit(secondState)).toBe(128 * M);
    const rollbackSecond = await runDrill(["--state-dir", stateDir, "rollback", "--name", "ownsecond"], { timeout: 90_000 });
    expect(rollbackSecond.exitCode, rollbackSecond.stdout + rollbackSecond.stderr).toBe(0);
    assertHostClean(stateDir, "ownsecond", secondState);
  }, 240_000);

  /**
   * The rollback side: the first drill's cgroup is torn down by hand (--force) while it
   * runs, a second drill creates a new cgroup at the same path, and then the
   * first drill is rolled back. Its rollback tears down the dirs it recorded,
   * which are now the second drill's: it must leave them (and that drill's
   * worker) alone, and still complete.
   */
  it("a rollback leaves alone the cgroup another drill now owns at the path it recorded, and completes", async () => {
    const first = await up("first.yaml");
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    const firstState = readState(stateDir, "ownfirst") as DrillState;

    // --force: without it, teardown refuses the cgroup of a drill that is up.
    const byHand = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--name", CGROUP, "--parent", "self", "--force"], { timeout: 60_000 });
    expect(byHand.exitCode, byHand.stdout + byHand.stderr).toBe(0);
    expect(byHand.stderr).toMatch(/warning: --force: tore down cgroup ownedcg, the worker cgroup of drill ownfirst/);
    const second = await up("second.yaml");
    expect(second.exitCode, second.stdout + second.stderr).toBe(0);
    const secondState = readState(stateDir, "ownsecond") as DrillState;
    expect(secondState.cgroup!.dirs).toEqual(firstState.cgroup!.dirs);
    const worker = secondState.processes.find((p) => p.role === "worker")!;

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "ownfirst"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const roots = new HostRoots();
    expect(readState(stateDir, "ownfirst")!.phase).toBe("complete");
    for (const p of firstState.processes) {
      if (p.pid !== null && p.startTime !== null) expect(isSameProcess(roots, p.pid, p.startTime), `ownfirst's ${p.role} pid ${p.pid} alive`).toBe(false);
    }
    expect(findByRunId(roots, firstState.runId)).toEqual([]);
    // The second drill is untouched: its cgroup, its limit, its worker.
    expect(secondState.cgroup!.dirs.every((dir) => existsSync(dir))).toBe(true);
    expect(recordedLimit(secondState)).toBe(128 * M);
    expect(isSameProcess(roots, worker.pid!, worker.startTime!), "the second drill's worker").toBe(true);
    expect(rollback.stdout + rollback.stderr).toMatch(/worker cgroup of drill ownsecond .*leaving it and its tasks alone/);

    const rollbackSecond = await runDrill(["--state-dir", stateDir, "rollback", "--name", "ownsecond"], { timeout: 90_000 });
    expect(rollbackSecond.exitCode, rollbackSecond.stdout + rollbackSecond.stderr).toBe(0);
    assertHostClean(stateDir, "ownsecond", secondState);
  }, 240_000);
});
