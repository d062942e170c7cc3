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

// An anonymous hog twice the cgroup's limit (no swap): the kernel OOM-kills it, the largest task there.
const DRILL = tinyDrill("anonoom", {
  duration: "4s",
  memoryMax: "96M",
  phases: [
    ["0s", pack(2)],
    ["1s", "inject: { mode: anon, size: 192M, hold: 1s }"],
  ],
});
const CGROUP = "anonoomcg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the anon drill's OOM through up and rollback: ${skip}`);

/**
 * RELIABILITY 4 end to end: the OOM kill inside the cgroup is the anon
 * drill's expected outcome, reported with the oom_kill count, not a tool
 * failure; the drill's rollback still reaches host clean with no job lost.
 */
describe.skipIf(skip !== null)("an anon drill OOM-killed in its cgroup (RELIABILITY 4, real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-anonoom-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "anonoom.yaml"), DRILL);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback", "--name", "anonoom"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("up runs to its end (exit 0) naming the OOM kill; report counts it; rollback reaches host clean, no job lost", async () => {
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", path.join(root, "anonoom.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[]; verdict: string };
    expect(summary.verdict).toBe("ran");
    expect(summary.pushed_ids).toHaveLength(2);
    // The hog's end as up says it: killed by the kernel in its cgroup, not a failure of the drill.
    expect(up.stderr, up.stderr).toMatch(/phase 1: hog .*(OOM|oom)/);

    const report = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "anonoom"]);
    expect(report.exitCode, report.stderr).toBe(0);
    const pressure = (JSON.parse(report.stdout) as ReportDocument).pressure;
    expect(pressure?.oom_kills_in_window, JSON.stringify(pressure)).toBeGreaterThanOrEqual(1);

    const before = readState(stateDir, "anonoom") as DrillState;
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "anonoom"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "anonoom", before);
    const exported = readdirSync(path.join(stateDir, "anonoom")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    assertNoJobLostInExport(path.join(stateDir, "anonoom", exported[0]!), "jobs", summary.pushed_ids);
  }, 180_000);
});
