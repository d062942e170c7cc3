import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

/**
 * A rollback pointed at a state dir without the drill (a wrong --state-dir,
 * sudo dropping DRILL_STATE_DIR) must not say "nothing to roll back" and exit
 * 0 while the drill runs: it names the drill's processes, their run id and
 * state dir, and the rollback that reaches them, and exits 4.
 */

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping rollback scope tests: ${skip}`);

// A tiny drill; up is SIGKILLed once it spawned watch, so its detached children keep running.
const TINY = tinyDrill("scope", { phases: [["0s", pack(2)]] });

let root = "";
let realStateDir = "";
const children: ChildProcess[] = [];
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "drill-scope-"));
});
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(async () => {
  // Only if a rollback below failed: the marker is in the state dir removed next.
  if (skip === null) await forceCleanup(realWorkerCgroup("scopecg"), realStateDir || root);
  rmSync(root, { recursive: true, force: true });
});

const alive = (pid: number, startTime: number) => {
  const stat = readProcessStat(new HostRoots(), pid);
  return stat.ok && stat.value.state !== "Z" && stat.value.startTime === startTime;
};

describe("rollback with no drill in its state dir while a drill runs elsewhere", () => {
  it("a process carrying DRILL_RUN_ID and an embedded redis-server in <state-dir>/<drill>/redis are named; exit 4, not 'nothing'", async () => {
    const stateDir = mkdtempSync(path.join(root, "elsewhere-"));
    const runId = "elsew-20260101000000-abcdef";
    // The state up writes, and two of its processes: one with the env up gives
    // its children, and a redis-server (its environment overwritten by its title) in its dir,
    // on a unix socket only (never a TCP port).
    const redisDir = path.join(stateDir, "elsew", "redis");
    mkdirSync(redisDir, { recursive: true });
    const state: DrillState = {
      version: 1, name: "elsew", runId, drillFile: "x.yaml", createdAt: new Date().toISOString(), phase: "running", queue: "jobs",
      redis: { url: "redis://127.0.0.1:1", embedded: { dir: redisDir, port: 1 } }, cgroup: null, processes: [], fileDir: null,
      owner: { pid: 1, startTime: 0 },
    };
    writeState(stateDir, state);
    const child = spawn("sleep", ["300"], { stdio: "ignore", env: { PATH: process.env.PATH, DRILL_RUN_ID: runId, DRILL_STATE_DIR: stateDir } });
    children.push(child);
    const redis = spawn("redis-server", ["--port", "0", "--unixsocket", path.join(redisDir, "s.sock"), "--save", "", "--dir", redisDir], { stdio: "ignore", cwd: "/", env: { PATH: process.env.PATH } });
    children.push(redis);
    await Promise.all([child, redis].map((c) => new Promise((r) => c.once("spawn", r))));
    // redis-server chdirs into --dir once it has started: wait for that, not for a time.
    for (let i = 0; i < 200 && readCwd(redis.pid!) !== redisDir; i++) await new Promise((r) => setTimeout(r, 25));
    expect(readCwd(redis.pid!)).toBe(redisDir);

    const empty = mkdtempSync(path.join(root, "empty-"));
    const r = await runDrill(["--state-dir", empty, "rollback"], { cwd: "/" });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).not.toMatch(/nothing to roll back/);
    expect(r.stdout).toContain(`nothing to do in ${empty} (no drill), but drill processes this rollback does not reach run on this host:`);
    expect(r.stdout).toContain(`drill elsew run ${runId} (state dir ${stateDir})`);
    expect(r.stdout).toContain(`pid ${child.pid} (sleep)`);
    expect(r.stdout).toContain(`pid ${redis.pid} (redis-server)`);
    expect(r.stdout).toContain(`drill --state-dir ${stateDir} rollback --name elsew`);
    expect(r.stderr).toMatch(/rollback incomplete/);

    // --name of that drill: the same; --name of another drill: nothing of it runs.
    const named = await runDrill(["--state-dir", empty, "rollback", "--name", "elsew"], { cwd: "/" });
    expect(named.exitCode).toBe(4);
    expect(named.stdout).toContain(`pid ${child.pid} (sleep)`);
    const other = await runDrill(["--state-dir", empty, "rollback", "--name", "scope-other"], { cwd: "/" });
    expect(other.exitCode, other.stdout).toBe(0);
    expect(other.stdout).toMatch(/nothing to roll back/);

    // Its own drill of that name rolled back here (complete): the one up elsewhere is another operator's.
    // Said, and a rollback run again exits 0 (RELIABILITY 8; QA: exit 4 naming the other state dir's drill).
    const mine = mkdtempSync(path.join(root, "mine-"));
    writeState(mine, { ...state, runId: "elsew-20260101000001-fedcba", phase: "complete", redis: { url: "redis://127.0.0.1:1", embedded: null }, completedAt: new Date().toISOString() });
    const again = await runDrill(["--state-dir", mine, "rollback", "--name", "elsew"], { cwd: "/" });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toContain(`nothing to do in ${mine} (elsew already rolled back (complete)); up from another state dir, not this rollback's to undo:`);
    expect(again.stdout).toContain(`drill elsew run ${runId} (state dir ${stateDir})`);
    expect(again.stderr).not.toMatch(/rollback incomplete/);

    const json = await runDrill(["--json", "--state-dir", empty, "rollback"], { cwd: "/" });
    expect(json.exitCode).toBe(4);
    const out = JSON.parse(json.stdout) as {
      nothing_to_roll_back: boolean;
      running: Array<{ run_id: string; state_dir: string; state_missing: boolean; processes: Array<{ pid: number; start_time: number }>; hint: string }>;
    };
    expect(out.nothing_to_roll_back).toBe(false);
    const run = out.running.find((x) => x.run_id === runId);
    expect(run).toMatchObject({ state_dir: stateDir, state_missing: false });
    expect(run?.processes.map((p) => p.pid)).toEqual(expect.arrayContaining([child.pid, redis.pid]));
    expect(run?.processes.every((p) => typeof p.start_time === "number")).toBe(true);
    expect(run?.hint).toBe(`drill --state-dir ${stateDir} rollback --name elsew`);
    // Reporting is all it does: nothing was stopped.
    expect(child.exitCode === null && redis.exitCode === null).toBe(true);

    // A rollback that did work in its own state dir (a detached hog recorded there, long gone) is done:
    // the drill running elsewhere does not turn it into "processes this rollback does not reach", exit 4 (QA).
    const worked = mkdtempSync(path.join(root, "worked-"));
    mkdirSync(path.join(worked, "hogs"));
    const hog = { kind: "drill-hog", cgroupKey: "scopehog-0123456789", name: "scopehog", mode: "anon", pid: 2 ** 22 + 1, startTime: 1, file: null, logFile: null, sizeBytes: 1, holdMs: 1, detached: true, startedAt: new Date().toISOString() };
    writeFileSync(path.join(worked, "hogs", "scopehog-0123456789-01234567.json"), JSON.stringify(hog));
    const done = await runDrill(["--state-dir", worked, "rollback"], { cwd: "/" });
    expect(done.exitCode, done.stdout + done.stderr).toBe(0);
    expect(done.stdout).toContain("ok   stop hog: hog pid 4194305 already gone");
    expect(done.stdout).not.toContain("does not reach");

    // A record it cannot read may stand for a cgroup or a hog still there: said, exit 4, never "nothing to roll back" (QA).
    const torn = mkdtempSync(path.join(root, "torn-"));
    mkdirSync(path.join(torn, "cgroups"));
    writeFileSync(path.join(torn, "cgroups", "scopetorn-0123456789.json"), "");
    const said = await runDrill(["--json", "--state-dir", torn, "rollback", "--name", "scopetorn"], { cwd: "/" });
    expect(said.exitCode, said.stdout + said.stderr).toBe(4);
    const doc = JSON.parse(said.stdout) as { nothing_to_roll_back: boolean; left: string[] };
    expect(doc.nothing_to_roll_back).toBe(false);
    expect(doc.left).toEqual([`cgroup scopetorn: cannot read ${path.join(torn, "cgroups", "scopetorn-0123456789.json")}: Unexpected end of JSON input; what it records (a cgroup, or a hog in one) is left as it is: read or fix the file (or move it aside once that is gone), then run the rollback again`]);
    const text = await runDrill(["--state-dir", torn, "rollback"], { cwd: "/" });
    expect(text.exitCode).toBe(4);
    expect(text.stdout).toContain("rollback record of cgroup scopetorn");
    expect(text.stdout).not.toMatch(/nothing to roll back/);
    // Another --name is not this record's.
    const other2 = await runDrill(["--state-dir", torn, "rollback", "--name", "scope-other"], { cwd: "/" });
    expect(other2.stdout).not.toContain("scopetorn");
  });

  it.skipIf(skip !== null)("a real drill up (killed after spawning its children), rollback from / with another state dir: named with the way back; following it reaches host clean", async () => {
    const drillFile = path.join(root, "scope.yaml");
    writeFileSync(drillFile, TINY);
    const stateDir = mkdtempSync(path.join(root, "real-"));
    realStateDir = stateDir;
    const up = await runDrill(["--state-dir", stateDir, "up", "--drill", drillFile, "--parent", "self", "--name", "scopecg"], { env: { DRILL_CRASH_AT: "watch-spawn" }, timeout: 60_000 });
    expect(up.exitCode).not.toBe(0);
    const before = readState(stateDir, "scope") as DrillState;
    // The ids its queue gave, read live (up, the packer, is dead): what the rollback's export must hold, and only that.
    const given = await idsGivenByQueue(before.redis.url, before.queue);
    try {
      const gate = before.processes.find((p) => p.role === "gate")!;
      expect(alive(gate.pid!, gate.startTime!)).toBe(true);
      // up gives its children the state dir beside the run id.
      const environ = readFileSync(`/proc/${gate.pid}/environ`, "utf8").split("\0");
      expect(environ).toContain(`DRILL_RUN_ID=${before.runId}`);
      expect(environ).toContain(`DRILL_STATE_DIR=${stateDir}`);

      // sudo drops DRILL_STATE_DIR: the default; here a dir without the drill, from /.
      const empty = mkdtempSync(path.join(root, "empty-"));
      const wrong = await runDrill(["--state-dir", empty, "rollback"], { cwd: "/" });
      expect(wrong.exitCode, wrong.stdout + wrong.stderr).toBe(4);
      expect(wrong.stdout).toContain(`drill scope run ${before.runId} (state dir ${stateDir})`);
      expect(wrong.stdout).toContain(`pid ${gate.pid} (node)`);
      expect(wrong.stdout).toContain(`roll it back: drill --state-dir ${stateDir} rollback --name scope`);
      expect(alive(gate.pid!, gate.startTime!)).toBe(true);
    } finally {
      const rb = await runDrill(["--state-dir", stateDir, "rollback", "--name", "scope"], { timeout: 60_000 });
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    }
    assertHostClean(stateDir, "scope", before, { cgroupName: "scopecg" });
    expect(cgroupDirsLeft(realWorkerCgroup("scopecg"))).toEqual([]);
    const exported = readState(stateDir, "scope")?.rollback?.exported;
    expect(typeof exported, "rollback exported the embedded Redis").toBe("string");
    assertNoJobLostInExport(exported!, before.queue, given);
  }, 120_000);
});

function readCwd(pid: number): string | null {
  try {
    return readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return null;
  }
}
