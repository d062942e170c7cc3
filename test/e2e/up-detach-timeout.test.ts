// QA: `up --detach` gave up waiting ("did not reach running within 270 s; see <log>, then drill rollback
// --name X"): no --state-dir, and its background up, stopped before its lock, left running: rollback said
// "nothing to roll back", then that up brought the drill up. The wait is cut short here
// (DRILL_TEST_DETACH_WAIT_MS) while the background up is still held at its start (DRILL_TEST_START_DELAY_MS).
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { pastedArgv } from "../helpers/pasted.js";

const CGROUP = `fixhdt${process.pid}`;
const skip = realDrillSkipReason();
if (skip) console.warn(`skipping up --detach's timeout: ${skip}`);

describe.skipIf(skip !== null)("up --detach that gives up waiting for its background up", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-detach-timeout-"));
    // A $ in it: the rollback named must be on this dir, not on what the shell makes of it.
    stateDir = path.join(root, "state $X");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "dt.yaml"), tinyDrill("dt", { duration: "5s", phases: [["0s", pack(1)]] }));
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    expect(cgroupDirsLeft(realWorkerCgroup(CGROUP))).toEqual([]);
  });

  it("kills its background up, names its pid, and names the rollback on its state dir", async () => {
    const started = Date.now();
    const up = await runDrill(["--state-dir", stateDir, "up", "--detach", "--drill", path.join(root, "dt.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], {
      timeout: 60_000,
      env: { DRILL_TEST_START_DELAY_MS: "3000", DRILL_TEST_DETACH_WAIT_MS: "300" },
    });
    expect(up.exitCode, up.stderr).toBe(1);
    const pid = Number(/its background up \(pid (\d+)\) is killed/.exec(up.stderr)?.[1]);
    expect(pid, up.stderr).toBeGreaterThan(0);
    expect(() => process.kill(pid, 0)).toThrow();
    const rollback = /then run (.*) for what it started/.exec(up.stderr)?.[1];
    expect(rollback, up.stderr).toBeDefined();
    expect(pastedArgv(rollback!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "dt"]);
    // Past the background up's start delay (3 s from the start, with a margin): it brought nothing up behind the operator's back.
    await sleep(Math.max(0, 3500 - (Date.now() - started)));
    expect(existsSync(path.join(stateDir, "dt", "state.json"))).toBe(false);
  });
});
