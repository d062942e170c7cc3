import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const CGROUP = "startstatecg";
const skip = realDrillSkipReason();
if (skip) console.warn(`skipping rollback of an up stopped mid-start: ${skip}`);

/**
 * QA: a rollback while up was starting (its state written, its cgroup just
 * claimed): up went on after the rollback's deny-all, set the lever back to
 * admit, created its file dir and started gate, worker and watch; the
 * rollback, working from the state it had read, left the cgroup and the dir.
 * Here up is wedged right after claiming its cgroup (DRILL_CRASH_AT=cgroup:stop),
 * and continued by the rollback's stop.
 */
describe.skipIf(skip !== null)("drill rollback while up is mid-start (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  let files: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-start-state-"));
    stateDir = path.join(root, "state");
    files = path.join(root, "files");
    mkdirSync(files);
    writeFileSync(path.join(root, "startstate.yaml"), tinyDrill("startstate", { duration: "6s", phases: [["0s", pack(1)]] }));
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("up stops at its next step, the lever stays reject_all, and nothing it made is left", async () => {
    const up = runDrill(["--state-dir", stateDir, "up", "--drill", path.join(root, "startstate.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", files], {
      timeout: 60_000,
      env: { DRILL_CRASH_AT: "cgroup:stop" },
    });
    const deadline = Date.now() + 30_000;
    let before: DrillState | null = null;
    while (before === null) {
      if (Date.now() > deadline) throw new Error("up did not stop after claiming its cgroup");
      await sleep(50);
      const state = readState(stateDir, "startstate");
      if (state?.cgroup) {
        const stat = readFileSync(`/proc/${state.owner.pid}/stat`, "utf8");
        if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("T")) before = state;
      }
    }
    // The ids its queue gave, read live while up is stopped: what the rollback's export must hold, and only that.
    const given = await idsGivenByQueue(before.redis.url, before.queue);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "startstate"], { timeout: 60_000 });
    const said = rollback.stdout + rollback.stderr;
    expect(rollback.exitCode, said).toBe(0);
    const upDone = await up;
    expect(upDone.exitCode, upDone.stdout + upDone.stderr).not.toBe(0);
    expect(upDone.stdout + upDone.stderr).not.toMatch(/started gate, worker/);
    const state = readState(stateDir, "startstate");
    expect(state?.phase).toBe("complete");
    expect(cgroupDirsLeft(realWorkerCgroup(CGROUP)), said).toEqual([]);
    expect(readdirSync(files), said).toEqual([]);
    // The export holds the lever as the rollback left it.
    const exported = state?.rollback?.exported;
    expect(exported && existsSync(exported), said).toBeTruthy();
    const mode = readFileSync(exported!, "utf8").split("\n").filter((l) => l.includes(":mode")).join("\n");
    expect(mode, said).toMatch(/reject_all/);
    expect(mode).not.toMatch(/"admit"/);
    assertHostClean(stateDir, "startstate", before, { cgroupName: CGROUP });
    assertNoJobLostInExport(exported!, before.queue, given);
  });
});
