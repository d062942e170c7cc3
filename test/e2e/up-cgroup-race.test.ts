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

const CGROUP = "cgracecg";
const JOBS = 1;

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping two drills up on one cgroup at once: ${skip}`);

/** Processes whose command line names `dir` (an embedded redis-server runs with --dir in its run dir). */
function processesUnder(dir: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((e) => /^\d+$/.test(e))) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
      if (args.includes(dir)) found.push(`${pid}: ${args}`);
    } catch {
      // gone
    }
  }
  return found;
}

/**
 * QA: two drills started at once on one worker cgroup: the one refused by the
 * cgroup's second judgment (after its Redis started) exited 3 and left its
 * embedded redis-server running and its state "starting": its rerun was
 * refused as "already up", and its report read the refused run.
 */
describe.skipIf(skip !== null)("two drills up on one cgroup at once (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-cgrace-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    for (const name of ["cgracea", "cgraceb"]) writeFileSync(path.join(root, `${name}.yaml`), tinyDrill(name, { duration: "8s", phases: [["0s", pack(JOBS)]] }));
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("one runs; the other exits 3 and leaves no Redis, no run dir and no state behind", async () => {
    const up = (name: string) =>
      runDrill(["--state-dir", stateDir, "--json", "up", "--detach", "--drill", path.join(root, `${name}.yaml`), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")], { timeout: 120_000 });
    const first = up("cgracea");
    await sleep(100);
    const results = await Promise.all([first, up("cgraceb")]);
    const said = results.map((r) => `exit ${r.exitCode}: ${r.stdout}${r.stderr}`).join("\n---\n");
    expect(results.map((r) => r.exitCode).sort(), said).toEqual([0, 3]);
    const loser = results[0]!.exitCode === 3 ? "cgracea" : "cgraceb";
    const winner = loser === "cgracea" ? "cgraceb" : "cgracea";
    expect(JSON.parse(results.find((r) => r.exitCode === 3)!.stdout), said).toMatchObject({ name: loser, verdict: "refused", run_id: null });
    expect(readState(stateDir, loser), said).toBeNull();
    // The background up of the refused drill exits after undoing its start: give it a moment to.
    const deadline = Date.now() + 10_000;
    while (processesUnder(path.join(stateDir, loser)).length > 0 && Date.now() < deadline) await sleep(100);
    expect(processesUnder(path.join(stateDir, loser)), said).toEqual([]);
    // Its drill dir is gone, or holds nothing of a run (a lock being released).
    const drillDir = path.join(stateDir, loser);
    expect(existsSync(drillDir) ? readdirSync(drillDir).filter((e) => e !== "up.lock") : [], said).toEqual([]);

    // The winner's drill, rolled back, meets both invariants: its pack (JOBS jobs at 0s) read live from its Redis.
    const before = readState(stateDir, winner) as DrillState;
    expect(before.cgroup?.name, said).toBe(CGROUP);
    const given = await idsGivenByQueue(before.redis.url, before.queue, JOBS);
    expect(given).toEqual(Array.from({ length: JOBS }, (_, i) => String(i + 1)));
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", winner], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, winner, before, { cgroupName: CGROUP });
    const exported = readState(stateDir, winner)?.rollback?.exported;
    expect(typeof exported, rollback.stdout).toBe("string");
    assertNoJobLostInExport(exported!, before.queue, given);
  }, 120_000);
});
