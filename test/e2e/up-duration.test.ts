import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

// Declared for 30 s and run with --duration 3s: the 2/s trickle from 1 s is
// cut by the end (its 20 jobs need ~10 s) and the phase at 20 s never starts.
const DRILL = tinyDrill("updur", {
  duration: "30s",
  phases: [
    ["0s", pack(2)],
    ["1s", pack(20, 1000, ", rate: 2, label: trickle")],
    ["20s", pack(1, 1000, ", label: past the override")],
  ],
});
const CGROUP = "updurcg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping drill up --duration: ${skip}`);

describe.skipIf(skip !== null)("drill up --duration (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  let files: string;
  let drillFile: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-duration-"));
    stateDir = path.join(root, "state");
    files = path.join(root, "files");
    mkdirSync(files);
    drillFile = path.join(root, "updur.yaml");
    writeFileSync(drillFile, DRILL);
  });
  afterAll(async () => {
    // Only does something when a case failed half-way: never leave a drill running.
    if (existsSync(stateDir)) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
  });

  it("--duration 0s: exit 2 naming the flag, nothing started", async () => {
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP, "--file-dir", files, "--duration", "0s"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--duration: "0s" ends the drill before its first phase starts/);
    expect(r.stdout).not.toMatch(/redis:/);
    expect(existsSync(path.join(stateDir, "updur"))).toBe(false);
  });

  it("packing stops at the end, later phases are logged as skipped, and the gate's decision of every packed job is in up's output", async () => {
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP, "--file-dir", files, "--duration", "3s"], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[]; not_packed: number; skipped_jobs: number };
    const log = up.stderr;

    expect(log).toContain("phase 2: skipped: starts at 20s, not before the drill's end at 3s");
    expect(log).not.toMatch(/phase 2: pack/);
    const cut = /phase 1: packed (\d+) of 20 jobs; (\d+) not packed: the drill ended at 3s/.exec(log);
    expect(cut, log).not.toBeNull();
    const [trickled, notPacked] = [Number(cut![1]), Number(cut![2])];
    expect(trickled + notPacked).toBe(20);
    expect(notPacked).toBeGreaterThan(0);
    // Every job of the started phases is either pushed or reported not packed.
    expect(summary.not_packed).toBe(notPacked);
    expect(summary.pushed_ids).toHaveLength(2 + trickled);
    // The skipped phase's job is counted apart, in up's document and in the report's ended line (QA: "all N jobs packed").
    expect(summary.skipped_jobs).toBe(1);
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "updur"], { timeout: 60_000 });
    expect(report.stdout).toContain(`; ${notPacked} of ${22} jobs not packed; 1 more in phases past the drill's end, skipped`);

    // up followed the gate until it had decided each pushed job.
    expect(log).toContain(`gate: decided every packed job (${summary.pushed_ids.length})`);
    for (const id of summary.pushed_ids) expect(log, `no decision line for job=${id}`).toMatch(new RegExp(`^  (admit|reject_[a-z_]+|dead) job=${id}( |$)`, "m"));

    const before = readState(stateDir, "updur") as DrillState;
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "updur"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "updur", before);
    const exported = readdirSync(path.join(stateDir, "updur")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    // Exactly the pushed ids are in the queue's lists: none half-pushed, none lost.
    assertNoJobLostInExport(path.join(stateDir, "updur", exported[0]!), "jobs", summary.pushed_ids);
  }, 180_000);
});
