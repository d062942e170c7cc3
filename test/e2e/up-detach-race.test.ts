import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { findDrillRunProcesses } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const JOBS = 2;
const DRILL = tinyDrill("detachrace", { duration: "10s", phases: [["0s", pack(JOBS)]] });
const CGROUP = "detachracecg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping two up --detach at once: ${skip}`);

/**
 * QA: two `up --detach` of one drill at once both exited 0 "detached" with
 * the winner's run_id: the loser's parent took the winner's state for its own
 * child's, and reported a refused, dead pid as up. Both background ups wrote
 * into the one log. RELIABILITY #17: exactly one proceeds.
 */
describe.skipIf(skip !== null)("two drill up --detach at once (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-detach-race-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "detachrace.yaml"), DRILL);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("exactly one exits 0 detached with its own pid; the other exits 3 refused and writes nothing into the log", async () => {
    const args = ["--state-dir", stateDir, "--json", "up", "--detach", "--drill", path.join(root, "detachrace.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
    const results = await Promise.all([runDrill(args, { timeout: 120_000 }), runDrill(args, { timeout: 120_000 })]);
    const said = results.map((r) => `exit ${r.exitCode}: ${r.stdout}${r.stderr}`).join("\n---\n");
    const winners = results.filter((r) => r.exitCode === 0);
    const losers = results.filter((r) => r.exitCode === 3);
    expect(winners.length, said).toBe(1);
    expect(losers.length, said).toBe(1);
    const won = JSON.parse(winners[0]!.stdout) as { verdict: string; run_id: string; pid: number };
    expect(won).toMatchObject({ name: "detachrace", label: "lab expectation from a declared drill, not observed production", verdict: "detached", run_id: expect.stringMatching(/^detachrace-/), pid: expect.any(Number) });
    expect(JSON.parse(losers[0]!.stdout)).toMatchObject({ name: "detachrace", verdict: "refused", run_id: null, state: path.join(stateDir, "detachrace", "state.json") });
    expect(losers[0]!.stderr).not.toMatch(/is up in the background/);
    // The pid reported is the up that runs the drill, and it is alive.
    const state = readState(stateDir, "detachrace") as DrillState;
    expect(state.runId).toBe(won.run_id);
    expect(state.owner.pid).toBe(won.pid);
    expect(() => process.kill(won.pid, 0)).not.toThrow();
    // One run in the log: one header, no refusal from the loser's background up.
    const log = readFileSync(path.join(stateDir, "detachrace-up.log"), "utf8");
    expect(log.match(/^==== drill up --detach/gm)?.length, log).toBe(1);
    expect(log).not.toMatch(/refused|holds .*up\.lock/);
    // The loser owns nothing: one run dir (the winner's), no process of another run from this state dir.
    expect(readdirSync(path.join(stateDir, "detachrace", "runs"))).toEqual([won.run_id]);
    const others = findDrillRunProcesses(new HostRoots()).filter((p) => p.stateDir === stateDir && p.runId !== won.run_id);
    expect(others, "a process of the loser's run").toEqual([]);
    // The winner's pack (JOBS jobs at 0s), read live from its Redis: the ids the export must hold, and only those.
    const given = await idsGivenByQueue(state.redis.url, state.queue, JOBS);
    expect(given).toEqual(Array.from({ length: JOBS }, (_, i) => String(i + 1)));
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "detachrace"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "detachrace", state);
    const exported = readState(stateDir, "detachrace")?.rollback?.exported;
    expect(typeof exported, rollback.stdout).toBe("string");
    assertNoJobLostInExport(exported!, state.queue, given);

    // The next --detach replaces that run and says on the terminal that it is kept (QA: only in the log).
    const next = await runDrill(args, { timeout: 120_000 });
    expect(next.exitCode, next.stderr).toBe(0);
    expect(next.stderr).toContain(`up: drill detachrace's previous run ${won.run_id} (`);
    expect(next.stderr).toContain(`report --name detachrace --run ${won.run_id}\` the previous one`);
    const nextState = readState(stateDir, "detachrace") as DrillState;
    const again = await runDrill(["--state-dir", stateDir, "rollback", "--name", "detachrace"], { timeout: 90_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    assertHostClean(stateDir, "detachrace", nextState);
  }, 240_000);
});
