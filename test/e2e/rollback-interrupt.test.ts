import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";

// The shortest drill (1s): every test waits for up to end before its rollback, and a job not packed
// by the end would only shorten `pushed` (up still exits 0); 3s added 2 s a test and tested nothing more.
const DRILL = tinyDrill("rbint", { duration: "1s", phases: [["0s", pack(3)]] });
const CGROUP = "rbintcg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping rollback under Ctrl-C and a closed pipe: ${skip}`);

describe.skipIf(skip !== null)("rollback stopped from outside: Ctrl-C, a closed pipe (real cgroup, embedded Redis)", () => {
  let root: string;
  let files: string;
  let drillFile: string;
  const stateDirs: string[] = [];
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-rb-int-"));
    files = path.join(root, "files");
    mkdirSync(files);
    drillFile = path.join(root, "rbint.yaml");
    writeFileSync(drillFile, DRILL);
  });
  afterAll(async () => {
    for (const dir of stateDirs) if (existsSync(dir)) await runDrill(["--state-dir", dir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
  });

  async function upDrill(label: string): Promise<{ stateDir: string; before: DrillState; pushed: string[] }> {
    const stateDir = path.join(root, label);
    stateDirs.push(stateDir);
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP, "--file-dir", files], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const pushed = (JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    return { stateDir, before: readState(stateDir, "rbint") as DrillState, pushed };
  }

  /**
   * `count` signals, each after the rollback acknowledged the one before: two
   * sent 20 ms apart to a process not yet scheduled merge into one pending
   * signal on a loaded host, and the rollback then finished (exit 0).
   */
  async function signalOneByOne(child: ReturnType<typeof execa>, signal: "SIGINT" | "SIGTERM" | "SIGHUP", count: number) {
    let stderr = "";
    child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    for (let i = 0; i < count; i++) {
      child.kill(signal);
      if (i + 1 === count) break;
      while (!stderr.includes("finishing the rollback") && child.exitCode === null) await sleep(5);
    }
  }

  /** A rollback that gets `count` of `signal` as soon as it has said which drill it rolls back. */
  async function interruptedRollback(stateDir: string, count: number, signal: "SIGINT" | "SIGHUP" = "SIGINT") {
    const child = execa("node", [drillBin, "--state-dir", stateDir, "rollback", "--name", "rbint"], { reject: false, timeout: 90_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    let stdout = "";
    child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    while (!stdout.includes("rollback rbint:")) {
      if (child.exitCode !== null) break;
      await sleep(5);
    }
    await signalOneByOne(child, signal, count);
    const result = await child;
    return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr) };
  }

  function exportedJobs(stateDir: string, pushed: string[]) {
    const exported = readdirSync(path.join(stateDir, "rbint")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    assertNoJobLostInExport(path.join(stateDir, "rbint", exported[0]!), "jobs", pushed);
  }

  it("one Ctrl-C: the rollback says it is finishing, finishes (exit 0), host clean, no job lost", async () => {
    const { stateDir, before, pushed } = await upDrill("once");
    const r = await interruptedRollback(stateDir, 1);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stderr).toContain("drill: SIGINT: finishing the rollback (stopping now would leave it half done); Ctrl-C again to stop anyway");
    // up had ended by itself: the packer was not running when rollback came, and it says so.
    expect(r.stdout).toMatch(/stop packer: up \(packer\) \d+: already gone$/m);
    assertHostClean(stateDir, "rbint", before);
    exportedJobs(stateDir, pushed);
  }, 180_000);

  // The terminal closed (an SSH session dropped) as the operator walked away: no one is left to finish it. QA: it stopped half-way.
  it("SIGHUP, twice: the rollback says it is finishing, finishes (exit 0), host clean, no job lost", async () => {
    const { stateDir, before, pushed } = await upDrill("hup");
    const r = await interruptedRollback(stateDir, 2, "SIGHUP");
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stderr.match(/drill: SIGHUP \(the terminal closed\): finishing the rollback \(stopping now would leave it half done\)/g)).toHaveLength(1);
    assertHostClean(stateDir, "rbint", before);
    exportedJobs(stateDir, pushed);
  }, 180_000);

  it("two Ctrl-C: exit 130 naming the drill, where it stopped and the command that finishes it; that command finishes it", async () => {
    const { stateDir, before, pushed } = await upDrill("twice");
    const r = await interruptedRollback(stateDir, 2);
    expect(r.exitCode, r.stdout + r.stderr).toBe(130);
    expect(r.stderr).toMatch(
      new RegExp(`drill: interrupted by SIGINT during the rollback of rbint (before its first step|after step "[^"]+"); run \`drill --state-dir ${stateDir} rollback --name rbint\` again to finish it`),
    );
    const half = readState(stateDir, "rbint") as DrillState;
    expect(half.phase).not.toBe("complete");
    // QA: the report in between said only "phase rolling_back", and the finishing rollback became the run's end.
    const takeover = half.rollbackStartedAt;
    if (half.phase === "rolling_back") {
      expect(takeover).toBeDefined();
      const between = await runDrill(["--state-dir", stateDir, "report", "--name", "rbint"], { timeout: 90_000 });
      expect(between.exitCode, between.stderr).toBe(0);
      expect(between.stdout).toContain(`a rollback started at ${takeover} has not finished (still running, or interrupted): \`drill --state-dir ${stateDir} rollback --name rbint\` again finishes it`);
    }
    const again = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rbint"], { timeout: 90_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    const done = readState(stateDir, "rbint") as DrillState;
    if (takeover !== undefined) expect(done.rollback).toMatchObject({ at: takeover, lastAt: expect.any(String) });
    assertHostClean(stateDir, "rbint", before);
    exportedJobs(stateDir, pushed);
  }, 180_000);

  // `drill --json rollback` stopped by SIGTERM or a second Ctrl-C printed nothing on stdout:
  // a script lost the steps done and what is left exactly when it needs them.
  it.each([
    ["SIGTERM", 1, 143],
    ["SIGINT", 2, 130],
  ] as const)("--json, stopped by %s (x%d): exit %d with the rollback's JSON document, marked interrupted after the step it stopped after; its command finishes it", async (signal, count, code) => {
    const { stateDir, before, pushed } = await upDrill(`json-${signal}`);
    const child = execa("node", [drillBin, "--state-dir", stateDir, "--json", "rollback", "--name", "rbint"], { reject: false, timeout: 90_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    // --json prints nothing as it goes: the state file says the rollback has begun.
    while (readState(stateDir, "rbint")?.phase !== "rolling_back" && child.exitCode === null) await sleep(5);
    await signalOneByOne(child, signal, count);
    const r = await child;
    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(code);
    const doc = JSON.parse(String(r.stdout)) as {
      drills: Array<{ name: string; steps: Array<{ step: string }> }>;
      nothing_to_roll_back: boolean;
      left: string[];
      interrupted: { signal: string; drill: string; after_step: string | null; command: string };
    };
    const command = `drill --state-dir ${stateDir} rollback --name rbint`;
    expect(doc.interrupted).toMatchObject({ signal, drill: "rbint", command });
    expect(doc.nothing_to_roll_back).toBe(false);
    expect(doc.drills.map((d) => d.name)).toEqual(["rbint"]);
    expect(doc.interrupted.after_step).toBe(doc.drills[0]!.steps.at(-1)?.step ?? null);
    const where = doc.interrupted.after_step === null ? "before its first step" : `after step "${doc.interrupted.after_step}"`;
    expect(doc.left).toContain(`rbint: rollback interrupted by ${signal} ${where}; run ${command} again to finish it`);
    expect((readState(stateDir, "rbint") as DrillState).phase).not.toBe("complete");

    const again = await runDrill(["--state-dir", stateDir, "--json", "rollback", "--name", "rbint"], { timeout: 90_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect((JSON.parse(again.stdout) as { interrupted: unknown }).interrupted).toBeNull();
    assertHostClean(stateDir, "rbint", before);
    exportedJobs(stateDir, pushed);
  }, 180_000);

  // `drill rollback 2>&1 | head -1`: it exited 0 after its first line with the
  // state at rolling_back, the drain not exported and the embedded Redis up.
  it("the reader of its output goes away after the first line: the rollback finishes (exit 0), host clean, no job lost", async () => {
    const { stateDir, before, pushed } = await upDrill("closed");
    const child = execa("node", [drillBin, "--state-dir", stateDir, "rollback", "--name", "rbint"], { reject: false, timeout: 90_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve()));
    child.stdout!.destroy(); // what head does once it has its line
    child.stderr!.destroy();
    const result = await child;
    expect(result.exitCode).toBe(0);
    assertHostClean(stateDir, "rbint", before);
    exportedJobs(stateDir, pushed);
  }, 180_000);
});
