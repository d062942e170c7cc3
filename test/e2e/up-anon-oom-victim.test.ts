import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";

// QA: at 96M the Node worker (~45 MiB) was the OOM killer's pick over a 192M
// anonymous hog still filling, so up stopped early and skipped the later pack.
// Here the worker holds one job's KV (2000 × 8K = 16M, for its 10 s of decode)
// when the hog starts: bigger than the hog can get, the pick by size alone.
const DRILL = tinyDrill("h5oomvic", {
  duration: "8s",
  memoryMax: "96M",
  phases: [
    ["0s", "pack: { jobs: 1, prompt_tokens: 2000, completion_tokens: 2000 }"],
    ["2s", "inject: { mode: anon, size: 192M, hold: 1s }"],
    ["6s", pack(2)],
  ],
}).replace("kv_bytes_per_token: 64,", "kv_bytes_per_token: 8K,");
const CGROUP = "h5oomviccg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the anon drill's OOM victim: ${skip}`);

/** The hog is the injected fault, the worker what the drill observes: the OOM killer must take the hog. */
describe.skipIf(skip !== null)("the anon drill's OOM victim is the hog, not the worker (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-h5oomvic-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "h5oomvic.yaml"), DRILL);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback", "--name", "h5oomvic"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("96M cgroup, the worker holding 16M of KV, a 192M anon hog at 2 s, a pack at 6 s: the hog is OOM-killed, the worker lives, the pack runs, up exits 0", async () => {
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", path.join(root, "h5oomvic.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], { timeout: 120_000 });
    expect(up.stderr, up.stderr).toMatch(/phase 1: hog .*OOM/);
    expect(up.stderr, up.stderr).not.toMatch(/worker: exited/);
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[]; verdict: string };
    expect(summary.verdict).toBe("ran");
    expect(summary.pushed_ids).toHaveLength(3);

    const before = readState(stateDir, "h5oomvic") as DrillState;
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "h5oomvic"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "h5oomvic", before);
  }, 180_000);
});
