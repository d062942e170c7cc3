import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess } from "../../src/host/process.js";
import { cgroupDirsLeft, forceCleanup, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping cgroup teardown/setup of a drill that is up: ${skip}`);

const CGROUP = `cgfix-up-${process.pid}`;
const M = 1024 * 1024;

/** The limit the kernel holds for the cgroup the drill recorded (v1 memory dir or v2 dir). */
function recordedLimit(state: DrillState): number {
  for (const dir of state.cgroup!.dirs) {
    for (const file of ["memory.limit_in_bytes", "memory.max"]) {
      if (existsSync(path.join(dir, file))) return Number(readFileSync(path.join(dir, file), "utf8").trim());
    }
  }
  throw new Error(`no memory limit file in ${state.cgroup!.dirs.join(", ")}`);
}

/**
 * QA 7: `drill cgroup teardown` of the worker cgroup of a drill that is up
 * killed its worker without a word (the drill then stopped early, "killed by
 * SIGKILL: likely the OOM killer"), and `cgroup setup` rewrote its limits.
 * Both are refused like up refuses another drill's cgroup, naming the drill
 * and its rollback; `--force` tears it down and says so.
 */
describe.skipIf(skip !== null)("drill cgroup teardown and setup of a drill that is up (real cgroup)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "cgfix-up-"));
    stateDir = path.join(root, "state");
    // Long enough that the drill is still up while teardown is tried.
    writeFileSync(path.join(root, "qa.yaml"), tinyDrill("qaup", { duration: "60s", gate: "{ interval: 500ms }", phases: [["0s", pack(1)]] }));
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    await forceCleanup(realWorkerCgroup(CGROUP), stateDir);
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  const drill = (args: string[]) => runDrill(["--state-dir", stateDir, ...args], { timeout: 120_000 });

  it("refuses (exit 3, naming the drill and its rollback), the worker and the limit untouched; --force tears it down and says so", async () => {
    const up = await drill(["up", "--detach", "--drill", path.join(root, "qa.yaml"), "--parent", "self", "--name", CGROUP]);
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const state = readState(stateDir, "qaup") as DrillState;
    const worker = state.processes.find((p) => p.role === "worker")!;
    const roots = new HostRoots();
    const limit = recordedLimit(state);

    const teardown = await drill(["cgroup", "teardown", "--parent", "self", "--name", CGROUP]);
    expect(teardown.exitCode, teardown.stdout + teardown.stderr).toBe(3);
    expect(teardown.stderr).toMatch(new RegExp(`(is|are) the worker cgroup of drill qaup \\(run ${state.runId}\\), which is up \\((starting|running)\\); refusing to kill its worker and hog mid-drill`));
    expect(teardown.stderr).toContain(`Run drill --state-dir ${stateDir} rollback --name qaup`);
    expect(teardown.stderr).toMatch(/--force/);
    expect(teardown.stdout).not.toMatch(/killed/);
    expect(isSameProcess(roots, worker.pid!, worker.startTime!), "the drill's worker").toBe(true);
    expect(state.cgroup!.dirs.every((dir) => existsSync(dir))).toBe(true);

    const setup = await drill(["cgroup", "setup", "--parent", "self", "--name", CGROUP, "--memory-max", "256M"]);
    expect(setup.exitCode, setup.stdout + setup.stderr).toBe(3);
    expect(setup.stderr).toMatch(/(is|are) the worker cgroup of drill qaup .*which is up .*refusing to rewrite its limits/);
    expect(setup.stderr).toContain(`rollback --name qaup first`);
    expect(recordedLimit(state)).toBe(limit);
    expect(limit).not.toBe(256 * M);

    const forced = await drill(["cgroup", "teardown", "--parent", "self", "--name", CGROUP, "--force"]);
    expect(forced.exitCode, forced.stdout + forced.stderr).toBe(0);
    expect(forced.stderr).toMatch(new RegExp(`warning: --force: tore down cgroup ${CGROUP}, the worker cgroup of drill qaup \\(run ${state.runId}\\), which was up`));
    expect(forced.stderr).toContain(`rollback --name qaup`);
    expect(forced.stdout).toMatch(/torn down/);
    // Killed, not necessarily finished: a SIGKILLed task leaves its cgroup (so the rmdir succeeds)
    // before it is done exiting, and on a loaded host that last stretch is visible for a moment.
    await expect.poll(() => isSameProcess(roots, worker.pid!, worker.startTime!), { timeout: 5000, interval: 50, message: "the drill's worker after --force" }).toBe(false);

    const rollback = await drill(["rollback", "--name", "qaup"]);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "qaup", state);
  }, 240_000);
});
