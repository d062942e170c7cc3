import { spawn, type ChildProcess } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

/**
 * QA AB 6: a file named `served` in the state dir (where `drill worker`
 * records the queue it serves). The teardown read that dir before its kill,
 * and ENOTDIR stopped it: rollback exit 4, both cgroup dirs left. The served
 * records only name queues: the kill and the rmdir go on, and what went
 * unread is said. Real cgroups under the test's own (--parent self).
 */

const skipReason = realCgroupSkipReason();
if (skipReason) console.warn(`skipping the served-file teardown tests: ${skipReason}`);

const M = 1024 * 1024;
let stateDir = "";
let counter = 0;
const made: WorkerCgroup[] = [];
const children: ChildProcess[] = [];
const uniqueName = () => `fxbserved${process.pid}x${counter++}`;

beforeAll(() => {
  stateDir = tempStateDir();
});
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const cg of made.splice(0)) await forceCleanup(cg, stateDir);
  rmSync(path.join(stateDir, "served"), { recursive: true, force: true });
});

describe.skipIf(skipReason)("teardown with a file where the served dir belongs (real cgroups, --parent self)", () => {
  it("kills what is inside and removes the cgroup, saying the served records went unread", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    made.push(cg);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * M, swapMax: 0 });
    const sleeper = spawn("sleep", ["1000"], { stdio: "ignore" });
    children.push(sleeper);
    await new Promise((r) => sleeper.once("spawn", r));
    for (const procs of cg.procsFiles) writeFileSync(procs, String(sleeper.pid));
    writeFileSync(path.join(stateDir, "served"), "");

    const torn = await teardownWorkerCgroup(realRoots(), cg, { stateDir, timeoutMs: 10_000, termGraceMs: 300 });
    expect(torn.kind).toBe("removed");
    if (torn.kind === "removed") {
      expect(torn.killed.map((t) => t.pid)).toContain(sleeper.pid);
      expect(torn.queuesServedUnread).toMatch(new RegExp(`^cannot read ${path.join(stateDir, "served")}: ENOTDIR \\(a file stands where drill keeps a directory: move it aside`));
    }
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  it("drill rollback of a cgroup set up by hand: removed, exit 0, the step says the served records went unread", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    made.push(cg);
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    writeFileSync(path.join(stateDir, "served"), "");

    const r = await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/kill and remove cgroup.*the queues its workers served go unnamed: cannot read \S+\/served: ENOTDIR/);
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });
});
