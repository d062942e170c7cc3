import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { drillBin, runDrill } from "../helpers/cli.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping rollback-from-the-record tests: ${skip}`);

/** A drill's state as `up` leaves it once the cgroup is recorded (no Redis, no children). */
function recordDrill(stateDir: string, name: string, cgroup: WorkerCgroup): DrillState {
  const gone = spawnSync("true"); // a pid that has exited: the owner is not running
  const state: DrillState = {
    version: 1,
    name,
    runId: `${name}-test`,
    drillFile: "drills/smoke.yaml",
    createdAt: new Date().toISOString(),
    phase: "running",
    queue: "jobs",
    redis: { url: "", embedded: null },
    cgroup: { name: cgroup.name, parent: "self", dirs: cgroup.dirs.map((d) => d.dir) },
    processes: [],
    fileDir: null,
    owner: { pid: gone.pid ?? 999_999, startTime: null },
  };
  mkdirSync(path.join(stateDir, name), { recursive: true });
  writeState(stateDir, state);
  return state;
}

describe.skipIf(skip !== null)("rollback tears down what up recorded (real cgroups under the test's own)", () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("--parent self: a rollback run from another cgroup (another shell, a cron job) still removes the drill's cgroup", async () => {
    const stateDir = tempStateDir();
    const name = `rbself${process.pid}`;
    const cgroup = realWorkerCgroup(name);
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    cleanups.push(() => forceCleanup(cgroup, stateDir));
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    recordDrill(stateDir, name, cgroup);

    // rollback runs in a sibling cgroup: its own `self` is not the one up had.
    const limitsParent = path.dirname(cgroup.limits.dir);
    const elsewhere = path.join(limitsParent, `rbother${process.pid}`);
    mkdirSync(elsewhere);
    cleanups.push(() => {
      if (existsSync(elsewhere)) rmdirSync(elsewhere);
    });
    const script = `echo $$ > '${elsewhere}/cgroup.procs' && exec node '${drillBin}' --state-dir '${stateDir}' rollback --name ${name}`;
    const rollback = spawnSync("sh", ["-c", script], { encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
    expect(rollback.status, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toMatch(/kill and remove cgroup: .*removed/);
    expect(cgroupDirsLeft(cgroup)).toEqual([]);
    expect(readState(stateDir, name)?.phase).toBe("complete");
  });

  it("a cgroup drill did not make (up refused it) is left alone, and rollback still completes, twice", async () => {
    const stateDir = tempStateDir();
    const name = `rbforeign${process.pid}`;
    const cgroup = realWorkerCgroup(name);
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    cleanups.push(() => forceCleanup(cgroup, stateDir));
    mkdirSync(cgroup.limits.dir); // somebody else's: no drill marker
    recordDrill(stateDir, name, cgroup);

    const first = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toMatch(/not created by drill/);
    expect(existsSync(cgroup.limits.dir)).toBe(true);
    expect(readState(stateDir, name)?.phase).toBe("complete");
    const second = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(second.exitCode, second.stdout + second.stderr).toBe(0);
  });

  // A state file moved from the --state-dir that set the cgroup up: its
  // marker is not here, so rollback may not remove the cgroup, yet the tasks
  // in it are this drill's. It said "ok" and exited 0 with them inside.
  it("a cgroup it may not remove that holds this drill's own tasks: FAIL, each task named once, exit 4; the tasks are stopped", async () => {
    const setupDir = tempStateDir();
    const stateDir = tempStateDir();
    const name = `rbowntask${process.pid}`;
    const cgroup = realWorkerCgroup(name);
    cleanups.push(() => rmSync(setupDir, { recursive: true, force: true }));
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    cleanups.push(() => forceCleanup(cgroup, setupDir));
    const setup = await runDrill(["--state-dir", setupDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    const state = recordDrill(stateDir, name, cgroup);
    // In every dir of the cgroup (the v1 dir and its unified twin list it both), with the run's id.
    const joins = cgroup.procsFiles.map((f) => `echo $$ > '${f}'`).join(" && ");
    const task = spawn("sh", ["-c", `${joins} && exec sleep 300`], { stdio: "ignore", env: { PATH: process.env.PATH, DRILL_RUN_ID: state.runId } });
    cleanups.push(() => void task.kill("SIGKILL"));
    await new Promise((r) => task.once("spawn", r));
    for (let i = 0; i < 200 && !readFileSync(path.join(cgroup.limits.dir, "cgroup.procs"), "utf8").includes(`${task.pid}`); i++) await new Promise((r) => setTimeout(r, 10));

    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    const step = r.stdout.split("\n").find((l) => l.includes("kill and remove cgroup")) ?? "";
    expect(step).toMatch(/^ {2}FAIL kill and remove cgroup: cgroup .* not removed, yet it holds this drill's own tasks \d+ \(sleep\) \(run rbowntask\d+-test; stopped by pid below\): .*not created by drill/);
    // Named once by rollback (teardown's own refusal, after the colon, still lists it per dir).
    const own = step.slice(0, step.indexOf("(run "));
    expect(own.match(new RegExp(`\\b${task.pid} \\(sleep\\)`, "g")), step).toHaveLength(1);
    expect(r.stderr).toMatch(/rollback incomplete; left: .*not removed, yet it holds this drill's own tasks/);
    expect(readState(stateDir, name)?.phase).toBe("rolling_back");
    await new Promise((resolve) => (task.exitCode !== null || task.signalCode !== null ? resolve(null) : task.once("exit", resolve)));
    expect(task.signalCode, "stopped by the rollback").not.toBeNull();
  });
  // QA (S5): a rollback killed a worker run by hand in the drill's cgroup ("killed 4: … 14601 (node) …") as if it were the drill's.
  it("a task in the drill's cgroup that the drill did not start is killed, and its line says so", async () => {
    const stateDir = tempStateDir();
    const name = `rbhand${process.pid}`;
    const cgroup = realWorkerCgroup(name);
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    cleanups.push(() => forceCleanup(cgroup, stateDir));
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    const state = recordDrill(stateDir, name, cgroup);
    const joins = cgroup.procsFiles.map((f) => `echo $$ > '${f}'`).join(" && ");
    const start = (env: Record<string, string>) => {
      const task = spawn("sh", ["-c", `${joins} && exec sleep 300`], { stdio: "ignore", env: { PATH: process.env.PATH, ...env } });
      cleanups.push(() => void task.kill("SIGKILL"));
      return task;
    };
    const own = start({ DRILL_RUN_ID: state.runId });
    const byHand = start({});
    const procs = () => readFileSync(path.join(cgroup.limits.dir, "cgroup.procs"), "utf8");
    for (let i = 0; i < 200 && !(procs().includes(`${own.pid}`) && procs().includes(`${byHand.pid}`)); i++) await new Promise((r) => setTimeout(r, 10));

    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    const step = r.stdout.split("\n").find((l) => l.includes("kill and remove cgroup")) ?? "";
    expect(step).toContain(`${byHand.pid} (sleep): not started by this drill`);
    expect(step).toMatch(new RegExp(`\\b${own.pid} \\(sleep\\)(,| via)`));
    expect(cgroupDirsLeft(cgroup)).toEqual([]);
  });
});
