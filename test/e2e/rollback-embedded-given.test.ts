import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const NAME = "rbembgiven";
const CGROUP = "rbembgivencg";
// 1s, the shortest drill: up ends before anything else here, and its jobs are pushed at 0s (3s added 2 s and tested nothing more).
const DRILL = tinyDrill(NAME, { duration: "1s", phases: [["0s", pack(3)]] });

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping rollback --redis <the embedded Redis's URL>: ${skip}`);

/**
 * `rollback --redis <url>` with the URL of the drill's own embedded Redis
 * (copied from up's output): rollback exports its keys and stops it, then
 * told the operator to re-admit on that stopped server. The closing advice
 * is the one a rollback without --redis gives.
 */
describe.skipIf(skip !== null)("rollback --redis naming the embedded Redis (real cgroup, embedded redis-server)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-rb-embgiven-"));
    stateDir = path.join(root, "state");
    writeFileSync(path.join(root, `${NAME}.yaml`), DRILL);
  });
  afterAll(async () => {
    if (existsSync(stateDir) && readState(stateDir, NAME)?.phase !== "complete") await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("says there is nothing to re-admit (its Redis stopped with the drill), never a re-admit on that stopped server", async () => {
    const up = await runDrill(["--state-dir", stateDir, "up", "--drill", path.join(root, `${NAME}.yaml`), "--parent", "self", "--name", CGROUP, "--file-dir", root], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const before = readState(stateDir, NAME) as DrillState;
    expect(before.redis.embedded).not.toBeNull();
    const url = before.redis.url;

    const rb = await runDrill(["--state-dir", stateDir, "--redis", url, "rollback", "--name", NAME], { timeout: 90_000 });
    expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    expect(rb.stdout).toMatch(/stop embedded redis: redis \d+: stopped/);
    expect(rb.stdout).toContain(`${before.fileDir}/ (directory)`);
    expect(rb.stdout).toMatch(new RegExp(`^  ${NAME}: nothing to re-admit, its embedded Redis stopped with the drill \\(every key in .*final-.*\\.jsonl\\); the next drill up admits from the start$`, "m"));
    expect(rb.stdout).not.toMatch(/^ {2}\S+: drill .*gate mode admit$/m);
    // QA: the PSI condition for a re-admit stood above "nothing to re-admit".
    expect(rb.stdout).not.toContain("Re-enable admission");
    expect(rb.stdout).toContain(`For the incident notes:\n  drill --state-dir ${stateDir} report --name ${NAME} --format md`);
    assertHostClean(stateDir, NAME, before);
  }, 240_000);
});
