import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { refuseWhileUp, undoRefusedStart } from "../../src/drill/up.js";
import { readState, runDir, statePath, writeState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";

const roots = new HostRoots();
const root = mkdtempSync(path.join(tmpdir(), "drill-refused-start-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function stateOf(name: string, runId: string, phase: DrillState["phase"]): DrillState {
  return {
    version: 1, name, runId, drillFile: "d.yaml", createdAt: new Date().toISOString(), phase, queue: "jobs",
    redis: { url: "", embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: process.pid, startTime: null },
  };
}

/** A process standing in for the embedded redis-server this start spawned. */
async function standIn(): Promise<{ pid: number; startTime: number }> {
  const child = spawn("sleep", ["60"], { stdio: "ignore", detached: true });
  child.unref();
  await new Promise((resolve) => child.once("spawn", resolve));
  const stat = readProcessStat(roots, child.pid!);
  if (!stat.ok) throw new Error(stat.reason);
  return { pid: child.pid!, startTime: stat.value.startTime };
}

// QA: two `up` on one cgroup at once: the loser, refused by the cgroup's
// second judgment, left its embedded redis-server running and its
// "starting" state in place of the drill's last, completed run.
describe("undoRefusedStart: a start refused before it claimed the cgroup leaves nothing behind", () => {
  it("stops the Redis it started, removes its run dir and puts the drill's last state back", async () => {
    const stateDir = path.join(root, "a");
    const previous = { ...stateOf("d", "d-old", "complete"), completedAt: "2026-12-01T10:00:00.000Z" };
    const state = stateOf("d", "d-new", "starting");
    const redis = await standIn();
    state.processes.push({ role: "redis", key: "redis", pid: redis.pid, startTime: redis.startTime, files: [], intendedAt: state.createdAt });
    const dir = runDir(stateDir, "d", state.runId);
    mkdirSync(path.join(dir, "redis"), { recursive: true });
    writeFileSync(path.join(dir, "redis", "appendonly.aof"), "");
    mkdirSync(runDir(stateDir, "d", previous.runId), { recursive: true });
    writeState(stateDir, state);

    await undoRefusedStart(roots, stateDir, state, previous, dir);

    expect(isSameProcess(roots, redis.pid, redis.startTime)).toBe(false);
    expect(existsSync(dir)).toBe(false);
    expect(existsSync(runDir(stateDir, "d", previous.runId))).toBe(true);
    expect(readState(stateDir, "d")).toEqual(previous);
  });

  it("a drill's first start: no state left, and no empty runs dir", async () => {
    const stateDir = path.join(root, "b");
    const state = stateOf("e", "e-new", "starting");
    const dir = runDir(stateDir, "e", state.runId);
    mkdirSync(dir, { recursive: true });
    writeState(stateDir, state);

    await undoRefusedStart(roots, stateDir, state, null, dir);

    expect(existsSync(statePath(stateDir, "e"))).toBe(false);
    expect(existsSync(path.dirname(dir))).toBe(false);
  });
});

// QA: "already up (run …, stopped)" read as nothing left to roll back, with gate, worker, watch and Redis still running.
describe("refuseWhileUp", () => {
  it.each([
    ["running", "running"],
    ["stopped", "stopped: its schedule ended, its processes and cgroup stay until rollback"],
    ["rolling_back", "rolling back"],
  ] as const)("%s: says what the phase means and the rollback to run", (phase, words) => {
    expect(() => refuseWhileUp(stateOf("smoke", "smoke-1", phase), "smoke", "drill --state-dir /s")).toThrow(
      `drill smoke is already up (run smoke-1, ${words}); run drill --state-dir /s rollback --name smoke first`,
    );
  });

  it("complete: not up, not refused", () => {
    expect(() => refuseWhileUp(stateOf("smoke", "smoke-1", "complete"), "smoke", "drill")).not.toThrow();
  });
});
