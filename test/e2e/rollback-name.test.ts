import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { runDrill } from "../helpers/cli.js";

/**
 * `drill rollback --name`: which drill it names. A name is a directory under
 * --state-dir, never a path out of it, and empty is not "every drill".
 */

let root = "";
const children: ChildProcess[] = [];
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "drill-rb-name-"));
});
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A drill's state as up leaves it before it set up a Redis or a cgroup (its owner gone), and a process of its run. */
async function drillWithProcess(stateDir: string, name: string): Promise<{ state: DrillState; child: ChildProcess }> {
  const gone = spawnSync("true");
  const runId = `${name}-20260101000000-abcdef`;
  const child = spawn("sleep", ["300"], { stdio: "ignore", env: { PATH: process.env.PATH, DRILL_RUN_ID: runId, DRILL_STATE_DIR: stateDir } });
  children.push(child);
  await new Promise((r) => child.once("spawn", r));
  const stat = readProcessStat(new HostRoots(), child.pid!);
  const state: DrillState = {
    version: 1, name, runId, drillFile: "drills/smoke.yaml", createdAt: new Date().toISOString(), phase: "running", queue: "jobs",
    redis: { url: "", embedded: null }, cgroup: null, fileDir: null, owner: { pid: gone.pid ?? 999_999, startTime: null },
    processes: [{ role: "gate", key: "gate", pid: child.pid!, startTime: stat.ok ? stat.value.startTime : null, files: [], intendedAt: new Date().toISOString() }],
  };
  mkdirSync(path.join(stateDir, name), { recursive: true });
  writeState(stateDir, state);
  return { state, child };
}

const alive = (child: ChildProcess, state: DrillState) => isSameProcess(new HostRoots(), child.pid!, state.processes[0]!.startTime!);

describe("rollback --name is a drill under --state-dir", () => {
  it.each(["../other/smoke", "", ".", "..", "a/b"])("--name %j: exit 2, as report says it, and nothing rolled back", async (name) => {
    const stateDir = mkdtempSync(path.join(root, "bad-"));
    const { state, child } = await drillWithProcess(stateDir, "smoke");
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", name]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`drill: --name: "${name}" is not a drill name`);
    expect(r.stdout).toBe("");
    expect(readState(stateDir, "smoke")?.phase).toBe("running");
    expect(alive(child, state)).toBe(true);
  });

  it("--name ../<other state dir>/<drill> does not reach the other state dir's drill, nor write its state into this one", async () => {
    const here = mkdtempSync(path.join(root, "here-"));
    const other = mkdtempSync(path.join(root, "other-"));
    const { state, child } = await drillWithProcess(other, "smoke");
    const before = readFileSync(path.join(other, "smoke", "state.json"), "utf8");
    const r = await runDrill(["--state-dir", here, "rollback", "--name", `../${path.basename(other)}/smoke`]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(readFileSync(path.join(other, "smoke", "state.json"), "utf8")).toBe(before);
    expect(existsSync(path.join(here, "smoke"))).toBe(false);
    expect(alive(child, state)).toBe(true);
  });
});

/** A drill's state file as up leaves it (nothing of it running), `extra` over it. */
function fakeDrill(stateDir: string, name: string, extra: Partial<DrillState> = {}): DrillState {
  const state: DrillState = {
    version: 1, name, runId: `${name}-20260101000000-abcdef`, drillFile: "drills/smoke.yaml", createdAt: new Date().toISOString(), phase: "stopped", queue: "jobs",
    redis: { url: "", embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: spawnSync("true").pid ?? 999_999, startTime: null }, ...extra,
  };
  mkdirSync(path.join(stateDir, name), { recursive: true });
  writeState(stateDir, state);
  return state;
}

describe("rollback --name of no drill in the state dir, and of a drill already rolled back", () => {
  // `up --name` is the worker cgroup; `rollback --name` is the drill (the drill file's name).
  it("--name of up's worker cgroup, beside the drill that uses it: exit 2 naming the drills there and the one to roll back", async () => {
    const stateDir = mkdtempSync(path.join(root, "cgname-"));
    fakeDrill(stateDir, "rbnsmoke", { cgroup: { name: "rbnqaup", parent: "self", dirs: ["/sys/fs/cgroup/memory/rbnqaup"] } });
    fakeDrill(stateDir, "rbnold", { phase: "complete", completedAt: "2026-01-01T00:00:00.000Z" });
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbnqaup"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr.trim()).toBe(
      `drill: --name: no drill "rbnqaup" in ${stateDir} (drills there: rbnold (complete), rbnsmoke (stopped, worker cgroup rbnqaup)); ` +
        `rbnqaup is the worker cgroup of drill rbnsmoke: drill --state-dir ${stateDir} rollback --name rbnsmoke`,
    );
    expect(readState(stateDir, "rbnsmoke")?.phase).toBe("stopped");
    // Any other name that is no drill there: the drills, and how to pick one.
    const other = await runDrill(["--state-dir", stateDir, "--json", "rollback", "--name", "rbnnosuch"]);
    expect(other.exitCode).toBe(2);
    expect(other.stdout).toBe("");
    expect(other.stderr).toContain(`drill: --name: no drill "rbnnosuch" in ${stateDir} (drills there: rbnold (complete), rbnsmoke (stopped, worker cgroup rbnqaup)); roll back one of them`);
  });

  it("a drill already rolled back: says so with when, exit 0, three times (RELIABILITY 8)", async () => {
    const stateDir = mkdtempSync(path.join(root, "complete-"));
    fakeDrill(stateDir, "rbndone", { phase: "complete", completedAt: "2026-01-01T00:00:00.000Z" });
    for (let i = 0; i < 3; i++) {
      const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbndone"]);
      expect(r.exitCode, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toBe(
        "rollback rbndone:\n" +
          "  already rolled back (complete since 2026-01-01T00:00:00.000Z): nothing to do\n" +
          `nothing to roll back: rbndone already rolled back (complete) in ${stateDir}, and no process of drill rbndone on this host`,
      );
    }
    const json = await runDrill(["--state-dir", stateDir, "--json", "rollback", "--name", "rbndone"]);
    expect(json.exitCode).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ drills: [], complete: [{ name: "rbndone", completed_at: "2026-01-01T00:00:00.000Z" }], nothing_to_roll_back: true, left: [] });
  });

  // QA: a run whose up failed at its embedded Redis's start is closed by up itself (complete, nothing started):
  // its rollback said "already rolled back", of a run no rollback ever touched.
  it("a run its up closed having started nothing: says it never needed a rollback, exit 0; the --json document as for any complete drill", async () => {
    const stateDir = mkdtempSync(path.join(root, "closed-by-up-"));
    const at = "2026-01-01T00:00:00.000Z";
    fakeDrill(stateDir, "rbnnostart", {
      phase: "complete",
      completedAt: at,
      ended: { verdict: "stopped_early", at, reason: "drill up failed: redis-server exited at start (code 1): bad config", pushed: null, notPacked: null },
    });
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbnnostart"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toBe(
      "rollback rbnnostart:\n" +
        `  nothing to roll back: its drill up ended at ${at} before it started anything (no Redis, process or cgroup)\n` +
        `nothing to roll back: rbnnostart's drill up started nothing in ${stateDir}, and no process of drill rbnnostart on this host`,
    );
    const json = await runDrill(["--state-dir", stateDir, "--json", "rollback", "--name", "rbnnostart"]);
    expect(json.exitCode).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ drills: [], complete: [{ name: "rbnnostart", completed_at: at }], nothing_to_roll_back: true, left: [] });
    // A run a rollback closed keeps its words, beside it.
    fakeDrill(stateDir, "rbnrolled", { phase: "complete", completedAt: at, ended: { verdict: "ran", at, reason: null, pushed: 3, notPacked: 0 }, rollback: { at, left: [] } });
    const both = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbnrolled"]);
    expect(both.exitCode, both.stdout + both.stderr).toBe(0);
    expect(both.stdout).toContain(`  already rolled back (complete since ${at}): nothing to do\n`);
  });

  it("no drill at all: exit 0, nothing to roll back", async () => {
    const stateDir = mkdtempSync(path.join(root, "empty-"));
    const named = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbnabsent"]);
    expect(named.exitCode, named.stdout + named.stderr).toBe(0);
    expect(named.stdout).toBe(`nothing to roll back: no drill rbnabsent in ${stateDir}, and no process of drill rbnabsent on this host`);
    // (Without --name a rollback names every drill process on the host: not here, where other tests run drills.)
  });
});

