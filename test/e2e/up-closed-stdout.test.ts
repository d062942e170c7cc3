import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";

// Two packs, the second after the first lines are printed: a reader that
// went away after them (`drill up | head -3`) must not stop the drill half-way.
const DRILL = tinyDrill("upclosed", { duration: "4s", phases: [["0s", pack(2)], ["2s", pack(2)]] });
// The same drill in 1 s, one pack: for the case that closes the pipes during
// setup, whose question is only whether up runs to its end at all.
const SHORT = tinyDrill("upclosed", { duration: "1s", phases: [["0s", pack(2)]] });
const CGROUP = "upclosedcg";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping drill up | head: ${skip}`);

describe.skipIf(skip !== null)("drill up and its output: a closed pipe, a second detach (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  let twiceStateDir: string;
  let leverStateDir: string;
  let jsonStateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-closed-"));
    stateDir = path.join(root, "state");
    twiceStateDir = path.join(root, "state-twice");
    leverStateDir = path.join(root, "state-lever");
    jsonStateDir = path.join(root, "state-json");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "upclosed.yaml"), DRILL);
    writeFileSync(path.join(root, "upclosed-short.yaml"), SHORT);
  });
  afterAll(async () => {
    for (const dir of [stateDir, twiceStateDir, leverStateDir, jsonStateDir]) await runDrill(["--state-dir", dir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
  });

  it("the reader of stdout goes away after the first lines: up runs the drill to its end, exit 0, every pack pushed", async () => {
    const args = ["--state-dir", stateDir, "up", "--drill", path.join(root, "upclosed.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
    const child = execa("node", [drillBin, ...args], { reject: false, timeout: 120_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve()));
    child.stdout!.destroy(); // what head does once it has its lines
    const result = await child;
    expect(result.exitCode, String(result.stderr)).toBe(0);
    const before = readState(stateDir, "upclosed") as DrillState;
    expect(before.phase).toBe("stopped");
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "upclosed"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "upclosed", before);
    const exported = readdirSync(path.join(stateDir, "upclosed")).filter((f) => /^final-.*\.jsonl$/.test(f));
    // Ids come from the queue's sequence: both packs pushed, none lost.
    assertNoJobLostInExport(path.join(stateDir, "upclosed", exported[0]!), "jobs", ["1", "2", "3", "4"]);
  }, 180_000);

  // Under --json up's lines go to stderr: `drill up --json 2>&1 | head` closed
  // stderr, and up exited 0 mid-setup with its embedded Redis left running.
  it("--json, the reader of both stdout and stderr goes away: up still runs the drill to its end", async () => {
    const args = ["--state-dir", jsonStateDir, "--json", "up", "--drill", path.join(root, "upclosed-short.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
    const child = execa("node", [drillBin, ...args], { reject: false, timeout: 120_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    await new Promise<void>((resolve) => child.stderr!.once("data", () => resolve()));
    child.stderr!.destroy();
    child.stdout!.destroy();
    const result = await child;
    expect(result.exitCode).toBe(0);
    expect((readState(jsonStateDir, "upclosed") as DrillState).phase).toBe("stopped");
    const rollback = await runDrill(["--state-dir", jsonStateDir, "rollback", "--name", "upclosed"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
  }, 180_000);

  it("a second up --detach of a drill that is up is refused (exit 3) before it writes a line into the running drill's log, which marks each run", async () => {
    const stateDir = twiceStateDir;
    const args = ["--state-dir", stateDir, "up", "--detach", "--drill", path.join(root, "upclosed.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
    const first = await runDrill(["--json", ...args], { timeout: 120_000 });
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({ name: "upclosed", verdict: "detached", run_id: expect.stringMatching(/^upclosed-/), pid: expect.any(Number) });
    const logFile = path.join(stateDir, "upclosed-up.log");
    const log = readFileSync(logFile, "utf8");
    expect(log).toMatch(/^==== drill up --detach upclosed at \d{4}-\d\d-\d\dT/);
    const second = await runDrill(args, { timeout: 120_000 });
    expect(second.exitCode, second.stdout + second.stderr).toBe(3);
    expect(second.stderr).toMatch(/drill upclosed is already up \(run upclosed-\S+, (running|stopped: its schedule ended, its processes and cgroup stay until rollback); log \S+upclosed-up\.log\); run drill --state-dir \S+ rollback --name upclosed first/);
    // QA: under --json the refusal left stdout empty; a script gets up's document with verdict refused.
    for (const detach of [["--detach"], []]) {
      const json = await runDrill(["--state-dir", stateDir, "--json", "up", ...detach, ...args.slice(args.indexOf("--drill"))], { timeout: 120_000 });
      expect(json.exitCode, json.stdout + json.stderr).toBe(3);
      expect(JSON.parse(json.stdout)).toMatchObject({ name: "upclosed", verdict: "refused", reason: expect.stringMatching(/^drill upclosed is already up \(run upclosed-/), run_id: null, state: path.join(stateDir, "upclosed", "state.json") });
      expect(json.stderr).toMatch(/^drill: drill upclosed is already up/m);
    }
    // The first run's log has only grown by the first run's own lines since.
    expect(readFileSync(logFile, "utf8").startsWith(log)).toBe(true);
    expect(readFileSync(logFile, "utf8")).not.toMatch(/already up|==== drill up --detach upclosed at .*\n[\s\S]*==== drill up/);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "upclosed"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
  }, 180_000);

  it("the deny-all lever pulled by hand during the drill shows in up's output", async () => {
    const args = ["--state-dir", leverStateDir, "up", "--drill", path.join(root, "upclosed.yaml"), "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
    let ended: string | null = null;
    const up = runDrill(args, { timeout: 120_000 }).then((r) => ((ended = r.stdout + r.stderr), r));
    let state: DrillState | null = null;
    for (let i = 0; state?.phase !== "running"; i++) {
      if (i > 600 || ended !== null) throw new Error(`drill up did not reach running: ${JSON.stringify(state)} ${ended ?? ""}`);
      await new Promise((r) => setTimeout(r, 100));
      state = readState(leverStateDir, "upclosed");
    }
    const lever = await runDrill(["--redis", state.redis.url, "gate", "mode", "reject_all"]);
    expect(lever.exitCode, lever.stdout + lever.stderr).toBe(0);
    const result = await up;
    expect(result.exitCode, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^ {2}gate mode: reject_all \(was admit\)$/m);
    expect(result.stdout).not.toMatch(/^ {2}gate mode: admit/m);
  }, 180_000);
});
