import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";
import { cgroupDirsLeft, forceCleanup, immutableSkipReason, realCgroupSkipReason, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { readProcessStat } from "../../src/host/process.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";

const skip = realCgroupSkipReason() ?? immutableSkipReason();
if (skip) console.warn(`skipping rollback-on-a-refusing-state-dir tests: ${skip}`);

const roots = new HostRoots();

// QA AB 2: rollback exited 1 on "cannot create the lock …/rollback.lock: ENOSPC" (EPERM for an immutable dir)
// and did nothing: gate, worker, hog and the cgroup kept running. An immutable drill dir refuses the lock and
// state.json as a full disk does (one a test can make without a mount).
describe.skipIf(skip !== null)("rollback on a state dir that refuses writes (full disk, immutable dir)", () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** A drill as up records it once its worker runs in its cgroup: the worker a sleep inside, with the run's id. */
  async function drillWithWorker(name: string, redis: DrillState["redis"]): Promise<{ stateDir: string; cgroup: WorkerCgroup; worker: ReturnType<typeof spawn> }> {
    const stateDir = tempStateDir();
    const cgroup = realWorkerCgroup(name);
    cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
    cleanups.push(() => forceCleanup(cgroup, stateDir));
    cleanups.push(() => void spawnSync("chattr", ["-i", path.join(stateDir, name)]));
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    const runId = `${name}-test`;
    const joins = cgroup.procsFiles.map((f) => `echo $$ > '${f}'`).join(" && ");
    const worker = spawn("sh", ["-c", `${joins} && exec sleep 300`], { stdio: "ignore", env: { PATH: process.env.PATH, DRILL_RUN_ID: runId } });
    cleanups.push(() => void worker.kill("SIGKILL"));
    await new Promise((r) => worker.once("spawn", r));
    for (let i = 0; i < 200 && !readFileSync(path.join(cgroup.limits.dir, "cgroup.procs"), "utf8").includes(`${worker.pid}`); i++) await new Promise((r) => setTimeout(r, 10));
    const stat = readProcessStat(roots, worker.pid!);
    const gone = spawnSync("true"); // up itself has exited
    const state: DrillState = {
      version: 1,
      name,
      runId,
      drillFile: "drills/smoke.yaml",
      createdAt: new Date().toISOString(),
      phase: "running",
      queue: "jobs",
      redis,
      cgroup: { name, parent: "self", dirs: cgroup.dirs.map((d) => d.dir) },
      processes: [{ role: "worker", key: "worker", pid: worker.pid!, startTime: stat.ok ? stat.value.startTime : null, files: [], intendedAt: new Date().toISOString() }],
      fileDir: null,
      owner: { pid: gone.pid ?? 999_999, startTime: null },
    };
    mkdirSync(path.join(stateDir, name), { recursive: true });
    writeState(stateDir, state);
    return { stateDir, cgroup, worker };
  }

  const exited = (p: ReturnType<typeof spawn>) => new Promise((resolve) => (p.exitCode !== null || p.signalCode !== null ? resolve(null) : p.once("exit", resolve)));

  it("no lock, no state write: the worker is stopped and the cgroup removed anyway, exit 4 with the --json document; writable again, the next rollback completes", async () => {
    const name = `fxarb${process.pid}`;
    const { stateDir, cgroup, worker } = await drillWithWorker(name, { url: "", embedded: null });
    const drillDir = path.join(stateDir, name);
    expect(spawnSync("chattr", ["+i", drillDir]).status).toBe(0);

    const r = await runDrill(["--state-dir", stateDir, "--json", "rollback"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    const doc = JSON.parse(r.stdout) as { drills: Array<{ steps: Array<{ step: string; ok: boolean; detail: string }> }>; left: string[] };
    const steps = doc.drills[0]!.steps;
    // Said once, first, with why and without "another --state-dir" (the drill is in this one).
    expect(steps.filter((s) => s.step === "record progress")).toHaveLength(1);
    expect(steps[0]).toMatchObject({ step: "record progress", ok: false });
    expect(steps[0]!.detail).toMatch(/^cannot create the lock .*rollback\.lock: EPERM \(.*make it writable\): no rollback holds it, so this one goes on without it/);
    expect(steps[0]!.detail).not.toMatch(/--state-dir/);
    expect(steps.find((s) => s.step === "kill and remove cgroup")).toMatchObject({ ok: true, detail: expect.stringMatching(/killed 1: .*removed/) });
    expect(doc.left).toEqual([expect.stringMatching(/state\.json not written \(could not create the lock .*EPERM.*\): the drill is not marked rolled back.*run drill --state-dir \S+ rollback --name \S+: it finishes/)]);
    await exited(worker);
    expect(worker.signalCode).not.toBeNull();
    expect(cgroupDirsLeft(cgroup)).toEqual([]);
    expect(readState(stateDir, name)?.phase).toBe("running"); // nothing written

    // Safe to run twice: still refused, nothing left on the host to do, the same one thing left.
    const again = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(again.exitCode, again.stdout + again.stderr).toBe(4);
    expect(again.stdout).toMatch(/ok {3}kill and remove cgroup: nothing at/);

    expect(spawnSync("chattr", ["-i", drillDir]).status).toBe(0);
    const last = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(last.exitCode, last.stdout + last.stderr).toBe(0);
    expect(last.stdout).not.toMatch(/record progress/);
    expect(readState(stateDir, name)?.phase).toBe("complete");
  });

  it("its embedded Redis down: not restarted where its port cannot be recorded (the jobs stay in its AOF), the host cleaned, the drain named as left", async () => {
    const name = `fxarbr${process.pid}`;
    // A free port: no server listens there (the drill's Redis is down).
    const port = await freePort();
    const { stateDir, cgroup, worker } = await drillWithWorker(name, { url: "", embedded: null });
    // Its data dir where up makes it, in the drill's dir.
    const redisDir = path.join(stateDir, name, "runs", `${name}-test`, "redis");
    mkdirSync(redisDir, { recursive: true });
    const state = readState(stateDir, name)!;
    state.redis = { url: `redis://127.0.0.1:${port}`, embedded: { dir: redisDir, port } };
    writeState(stateDir, state);
    expect(spawnSync("chattr", ["+i", path.join(stateDir, name)]).status).toBe(0);

    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toMatch(/FAIL connect redis: embedded redis is down; not restarted on its AOF in .*: its port could not be recorded in state\.json first/);
    expect(r.stdout).toMatch(/FAIL stop embedded redis: not running: the jobs stay in its AOF in /);
    expect(r.stdout).toMatch(/ok {3}kill and remove cgroup: killed 1: /);
    expect(r.stderr).toMatch(new RegExp(`left: .*drain pending: redis at redis://127\\.0\\.0\\.1:${port} unreachable.*; .*state\\.json not written`));
    await exited(worker);
    expect(cgroupDirsLeft(cgroup)).toEqual([]);
    // No redis-server was started on the drill's AOF.
    const inRedisDir = readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((pid) => {
      try {
        return readlinkSync(`/proc/${pid}/cwd`) === redisDir;
      } catch {
        return false;
      }
    });
    expect(inRedisDir).toEqual([]);
    expect(existsSync(path.join(stateDir, name, "state.json"))).toBe(true);
  });
});
