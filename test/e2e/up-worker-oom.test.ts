import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import type { ReportDocument } from "../../src/report/render.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";

// One job's KV (2000 prompt tokens × 64K = 125M) overfills the 96M cgroup: the worker itself is the OOM killer's pick.
const DRILL = tinyDrill("h5wrkoom", {
  duration: "8s",
  memoryMax: "96M",
  phases: [
    ["0s", pack(1, 2000)],
    ["6s", pack(2)],
  ],
}).replace("kv_bytes_per_token: 64,", "kv_bytes_per_token: 64K,");
const CGROUP = "h5wrkoomcg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the worker OOM-killed through up: ${skip}`);

/**
 * RELIABILITY 4: an OOM kill in the cgroup is reported with the oom_kill
 * count, not a tool failure, also when the worker is the one killed: up stops
 * there (nobody serves the queue), says so, and exits 0, as for the hog.
 */
describe.skipIf(skip !== null)("the worker OOM-killed in its cgroup during up (RELIABILITY 4, real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-h5wrkoom-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "h5wrkoom.yaml"), DRILL);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback", "--name", "h5wrkoom"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("up stops early naming the OOM kill and its count, exit 0 (not a tool failure); report counts it; rollback reaches host clean", async () => {
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", path.join(root, "h5wrkoom.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], { timeout: 120_000 });
    expect(up.stderr, up.stderr).toMatch(/^worker: OOM-killed in its cgroup \(oom_kill 0 → [1-9]\d*\) .*not a tool failure/m);
    expect(up.stderr).toMatch(/phase 1: not started/);
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[]; verdict: string; stopped_early: Array<{ process: string; how: string }> };
    expect(summary.verdict).toBe("stopped_early");
    expect(summary.stopped_early).toMatchObject([{ process: "worker", how: expect.stringMatching(/^OOM-killed in its cgroup/) }]);

    const report = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "h5wrkoom"]);
    expect(report.exitCode, report.stderr).toBe(0);
    expect((JSON.parse(report.stdout) as ReportDocument).pressure?.oom_kills_in_window).toBeGreaterThanOrEqual(1);

    const before = readState(stateDir, "h5wrkoom") as DrillState;
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "h5wrkoom"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "h5wrkoom", before);
    // The incident notes' report, after the rollback: the kill that stopped the drill still counts (rollback read the counter before removing the cgroup).
    const notes = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "h5wrkoom"]);
    expect(notes.exitCode, notes.stderr).toBe(0);
    expect((JSON.parse(notes.stdout) as ReportDocument).pressure?.oom_kills_in_window).toBeGreaterThanOrEqual(1);
    const exported = readdirSync(path.join(stateDir, "h5wrkoom")).filter((f) => /^final-.*\.jsonl$/.test(f));
    assertNoJobLostInExport(path.join(stateDir, "h5wrkoom", exported[0]!), "jobs", summary.pushed_ids);
  }, 180_000);
});
