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
