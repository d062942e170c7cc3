import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { pack, tinyDrill } from "../helpers/drills.js";

// A hog phase 3 s in; the drill is taken over by a rollback before it.
const DRILL = tinyDrill("takeover", { duration: "10s", phases: [["0s", pack(1)], ["3s", "inject: { mode: anon, size: 8M, hold: 1s }"]] });
const CGROUP = "takeovercg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping up taken over by a rollback: ${skip}`);

/**
 * Code review: between a rollback's "rolling_back" write and its step 2
 * (stop the packer: this up), up's schedule went on: a hog phase spawned its
 * hog and wrote up's own copy of state.json ("running") over the rollback's,
 * whose later writes then dropped the hog's record.
 */
describe.skipIf(skip !== null)("drill up after a rollback took it over (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-takeover-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "takeover.yaml"), DRILL);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("starts no hog and leaves the rollback's state.json as it is; the rollback then finishes the drill", async () => {
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--detach", "--drill", path.join(root, "takeover.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], { timeout: 120_000 });
    expect(up.exitCode, up.stderr).toBe(0);
    // What a rollback's first write does: the phase, nothing else.
    const running = readState(stateDir, "takeover") as DrillState;
    expect(running.phase).toBe("running");
    writeState(stateDir, { ...running, phase: "rolling_back" });

    const logFile = path.join(stateDir, "takeover-up.log");
    const deadline = Date.now() + 30_000;
    let log = "";
    while (!/phase \d+: (inject not started|hog )/.test(log) && Date.now() < deadline) {
      await sleep(200);
      log = readFileSync(logFile, "utf8");
    }
    expect(log).toMatch(/phase \d+: inject not started: drill rollback has taken this drill over/);
    const onDisk = readState(stateDir, "takeover") as DrillState;
    expect(onDisk.phase).toBe("rolling_back");
    expect(onDisk.processes.map((p) => p.key)).not.toContain("hog-1");

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "takeover"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "takeover", onDisk);
  });
});
