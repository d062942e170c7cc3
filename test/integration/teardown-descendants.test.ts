import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readPids } from "../../src/cgroup/memoryFiles.js";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { until } from "../helpers/stateFill.js";

/**
 * Teardown of a drill-made cgroup with child cgroups inside it (someone's
 * mkdir, a task moved there): DESIGN "kill what is inside, verify empty, then
 * rmdir" covers them. Real cgroups under the test's own cgroup, names unique
 * to this file, always cleaned up.
 */

const skipReason = realCgroupSkipReason();
if (skipReason) console.warn(`skipping real-cgroup descendant tests: ${skipReason}`);

const M = 1024 * 1024;
let stateDir = "";
let counter = 0;
const made: WorkerCgroup[] = [];
const children: ChildProcess[] = [];

const uniqueName = () => `tdesc${process.pid}x${counter++}`;
const hybrid = skipReason === null && realWorkerCgroup("probe").layout === "hybrid";
if (skipReason === null && !hybrid) console.warn("skipping the hybrid-twin cases (a task in a child of the twin, a drill cgroup set up inside another): this host is not hybrid (the cgroup2 twin exists only there)");
const alive = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;
const exited = (c: ChildProcess): Promise<NodeJS.Signals | null> =>
  !alive(c) ? Promise.resolve(c.signalCode) : new Promise((resolve) => c.once("exit", (_code, signal) => resolve(signal)));

beforeAll(() => {
  stateDir = tempStateDir();
});
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

afterEach(async () => {
  for (const c of children.splice(0)) if (alive(c)) c.kill("SIGKILL");
  for (const cg of made.splice(0)) {
    // Children first (forceCleanup removes only the cgroup's own dirs), deepest first.
    for (const dir of cg.dirs) for (const child of childDirs(dir.dir).reverse()) removeByHand(child);
    await forceCleanup(cg, stateDir);
  }
});

/** Child cgroup dirs below `dir`, parents first. */
function childDirs(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => [path.join(dir, e.name), ...childDirs(path.join(dir, e.name))]);
}

function removeByHand(dir: string): void {
  const pids = readPids(path.join(dir, "cgroup.procs"));
  for (const pid of pids.ok ? pids.value : []) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  for (let i = 0; i < 100 && existsSync(dir); i++) {
    try {
      rmdirSync(dir);
    } catch {
      spawnSync("sleep", ["0.05"]); // EBUSY while the killed task exits
    }
  }
}

/** A `sleep` moved into `procs`; `ignoreTerm`: it ignores SIGTERM (inherited across exec), so only the kill ends it. */
async function sleeperIn(procs: string, ignoreTerm = false): Promise<ChildProcess> {
  const child = ignoreTerm ? spawn("sh", ["-c", "trap '' TERM; exec sleep 1000"], { stdio: "ignore" }) : spawn("sleep", ["1000"], { stdio: "ignore" });
  children.push(child);
  await new Promise((r) => child.once("spawn", r));
  writeFileSync(procs, String(child.pid));
  return child;
}

describe.skipIf(skipReason)("teardown of a drill-made cgroup with child cgroups (real cgroups, --parent self)", () => {
  it("drill cgroup teardown kills a task moved into a grandchild of the limits cgroup, removes the children, exits 0", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    made.push(cg);
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    // The limits cgroup: v1 memory (no cgroup.kill there) on v1 and hybrid, the v2 cgroup on v2.
    const deeper = path.join(cg.limits.dir, "sub", "deeper");
    mkdirSync(deeper, { recursive: true });
    mkdirSync(path.join(cg.limits.dir, "empty"));
    const sleeper = await sleeperIn(path.join(deeper, "cgroup.procs"));
    const inDeeper = readPids(path.join(deeper, "cgroup.procs"));
    expect(inDeeper.ok && inDeeper.value).toEqual([sleeper.pid]);

    const down = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", name], { timeout: 60_000 });
    expect(down.exitCode, down.stdout + down.stderr).toBe(0);
    expect(down.stdout).toContain(`killed ${sleeper.pid} (sleep) in ${deeper}`);
    // SIGTERM first (a worker gives its jobs back, a hog unlinks its file): a plain sleep ends there.
    expect(await exited(sleeper)).toBe("SIGTERM");
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  // CI: a rollback's teardown found the cgroup empty while the worker's launcher (outside it)
  // was still starting; its worker then joined, and rmdir failed busy until the deadline.
  it("a task that joins after the kill found the cgroup empty is killed when rmdir finds it busy, and the cgroup removed", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    made.push(cg);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * M, swapMax: 0 });
    // Started outside, moved in every hierarchy (v1 first, as the join shim does) just before the removal.
    const late = spawn("sleep", ["1000"], { stdio: "ignore" });
    children.push(late);
    await new Promise((r) => late.once("spawn", r));
    const torn = await teardownWorkerCgroup(realRoots(), cg, {
      stateDir,
      timeoutMs: 10_000,
      termGraceMs: 300,
      onStage: (stage) => {
        if (stage === "remove") for (const procs of cg.procsFiles) writeFileSync(procs, String(late.pid));
      },
    });
    expect(torn.kind).toBe("removed");
    if (torn.kind === "removed") expect(torn.killed.map((t) => t.pid)).toContain(late.pid);
    expect(await exited(late)).toBe("SIGKILL");
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  // Only hybrid has a v1 limits dir and a cgroup2 twin; on v2 the test above is the cgroup2 case.
  it.skipIf(!hybrid)("hybrid twin (cgroup2): a task in a child of the twin is killed, and the child removed before the twin", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    made.push(cg);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * M, swapMax: 0 });
    const sub = path.join(cg.unified!.dir, "sub");
    mkdirSync(sub);
    // Deaf to SIGTERM: the kill after the grace ends it.
    const sleeper = await sleeperIn(path.join(sub, "cgroup.procs"), true);
    // Past the exec (so comm is sleep): a fixed wait was too short on a busy host.
    await until(() => readFileSync(`/proc/${sleeper.pid}/comm`, "utf8").trim() === "sleep", () => `pid ${sleeper.pid} never exec'd sleep`, 10_000);

    const torn = await teardownWorkerCgroup(realRoots(), cg, { stateDir, timeoutMs: 10_000, termGraceMs: 300 });
    expect(torn.kind).toBe("removed");
    if (torn.kind === "removed") expect(torn.killed).toContainEqual({ pid: sleeper.pid, comm: "sleep", dir: sub });
    expect(await exited(sleeper)).toBe("SIGKILL");
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  // QA: a drill cgroup set up inside another (--parent that cgroup) lost its v1 dir
  // with the parent's teardown, but its unified twin and its marker stayed, while
  // teardown said "torn down".
  it.skipIf(!hybrid)("a drill cgroup set up inside this one goes first and whole: its twin and marker too", async () => {
    const parent = realWorkerCgroup(uniqueName());
    made.push(parent);
    const setupParent = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", parent.name, "--memory-max", "64M"]);
    expect(setupParent.exitCode, setupParent.stderr).toBe(0);
    const childName = uniqueName();
    // Cleaned up after a failure too: its twin is not under the parent.
    made.push(resolveWorkerCgroup(realRoots(), requireLayout(realRoots()), childName, { kind: "path", path: parent.limits.cgroupPath }));
    const setupChild = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", parent.limits.cgroupPath, "--name", childName, "--memory-max", "32M"]);
    expect(setupChild.exitCode, setupChild.stderr).toBe(0);
    const childStatus = await runDrill(["--state-dir", stateDir, "--json", "cgroup", "status", "--parent", parent.limits.cgroupPath, "--name", childName]);
    const childDirs = (JSON.parse(childStatus.stdout) as { dirs: Array<{ dir: string }> }).dirs.map((d) => d.dir);
    expect(childDirs.length).toBe(2);
    for (const dir of childDirs) expect(existsSync(dir), dir).toBe(true);

    const down = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", parent.name], { timeout: 60_000 });
    expect(down.exitCode, down.stdout + down.stderr).toBe(0);
    for (const dir of childDirs) expect(existsSync(dir), `${dir} left behind`).toBe(false);
    expect(readdirSync(path.join(stateDir, "cgroups")).filter((f) => f.startsWith(childName))).toEqual([]);
    expect(cgroupDirsLeft(parent)).toEqual([]);
  });
});
