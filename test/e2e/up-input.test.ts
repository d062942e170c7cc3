import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { repoRoot, runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const smoke = readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8");

// A tiny drill: a few seconds, small sizes (the up is killed early anyway).
const TINY = tinyDrill("tinyin", { phases: [["0s", pack(1)]] });

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the --parent with no such cgroup case and relative --file-dir up/rollback: ${skip}`);

/**
 * `drill up` input that is bad (or only relative) is caught before anything
 * starts: exit 2 naming where it came from, no state, no Redis, nothing for
 * rollback to trip over.
 */
describe("drill up: bad input is caught before anything starts", () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-input-"));
  });
  afterAll(async () => {
    // Only does something when a case failed half-way: never leave a drill running.
    for (const entry of ["parent-file", "prompt-tokens", "parent-flag", "missing", "not-dir"]) {
      const stateDir = path.join(root, entry);
      if (existsSync(stateDir)) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    }
    rmSync(root, { recursive: true, force: true });
  });

  it("the drill file's cgroup.parent: exit 2 naming the file and the field, before Redis or state", async () => {
    const file = path.join(root, "bad-parent.yaml");
    writeFileSync(file, smoke.replace("  swap_max: 0\n", "  swap_max: 0\n  parent: ../x\n"));
    const stateDir = path.join(root, "parent-file");
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", file, "--name", "upinputcg"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}: cgroup.parent: component ".." of "../x" is a relative path component`);
    expect(r.stderr).not.toContain("--parent");
    expect(r.stdout).not.toMatch(/redis:/);
    expect(existsSync(path.join(stateDir, "smoke")), "state written for a drill that never started").toBe(false);
  });

  // Accepted once: every job the drill packed went to dead (the gate's job schema caps prompt_tokens at 10000000).
  it("a pack's prompt_tokens over the job's cap: exit 2 naming the file, the phase and the field, before Redis or state", async () => {
    const file = path.join(root, "big-prompt.yaml");
    writeFileSync(file, smoke.replace("prompt_tokens: 24000", "prompt_tokens: 20000000"));
    const stateDir = path.join(root, "prompt-tokens");
    // --parent self and --file-dir: were the file accepted, the drill would run under this test's own cgroup.
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", file, "--parent", "self", "--name", "upinputcg", "--file-dir", root], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}: phases.0.pack.prompt_tokens: must be at most 10000000, not 20000000`);
    expect(r.stdout).not.toMatch(/redis:/);
    expect(existsSync(path.join(stateDir, "smoke")), "state written for a drill that never started").toBe(false);
  });

  it("--parent: exit 2 naming the flag, nothing created", async () => {
    const stateDir = path.join(root, "parent-flag");
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", path.join(repoRoot, "drills", "smoke.yaml"), "--parent", "a/../b"], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--parent: component "\.\."/);
    expect(existsSync(path.join(stateDir, "smoke"))).toBe(false);
  });

  // QA: found once the lock was taken (the cgroup is resolved after doctor), it left the state dir up made, empty.
  it.skipIf(skip !== null)("a --parent with no such cgroup: exit 2 naming the flag, and not even the state dir left", async () => {
    const stateDir = path.join(root, "no-such-parent", "state");
    const missing = `upinput${process.pid}nosuch`;
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", path.join(repoRoot, "drills", "smoke.yaml"), "--parent", `/${missing}`, "--name", "upinputcg", "--file-dir", root], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^drill: --parent /${missing}: no such cgroup: `));
    expect(existsSync(path.join(root, "no-such-parent")), "state dir left by an up that made nothing").toBe(false);
  });

  it("a relative --file-dir that does not exist: exit 2 naming the flag and the resolved path", async () => {
    const stateDir = path.join(root, "missing");
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", path.join(repoRoot, "drills", "smoke.yaml"), "--parent", "self", "--name", "upinputcg", "--file-dir", "nope"], { cwd: root, timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`--file-dir: ${path.join(root, "nope")} does not exist`);
    expect(existsSync(path.join(stateDir, "smoke"))).toBe(false);
    expect(existsSync(path.join(root, "nope"))).toBe(false);
  });

  it("a --file-dir that is a file: exit 2 naming the flag", async () => {
    const stateDir = path.join(root, "not-dir");
    const file = path.join(root, "plain-file");
    writeFileSync(file, "");
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", path.join(repoRoot, "drills", "smoke.yaml"), "--parent", "self", "--name", "upinputcg", "--file-dir", file], { timeout: 60_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(`--file-dir: ${file} is not a directory`);
    expect(existsSync(path.join(stateDir, "smoke"))).toBe(false);
  });
});

describe.skipIf(skip !== null)("drill up --file-dir relative (real cgroup, embedded Redis)", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-filedir-"));
    stateDir = path.join(root, "state");
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "tiny.yaml"), TINY);
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    rmSync(root, { recursive: true, force: true });
  });

  it("is recorded absolute, so rollback from another directory removes the run's files", async () => {
    // SIGKILLed once the file dir is made and the gate spawned: what a crash leaves rollback.
    const up = await runDrill(
      ["--state-dir", stateDir, "up", "--drill", path.join(root, "tiny.yaml"), "--parent", "self", "--name", "tinyincg", "--file-dir", "files"],
      { cwd: root, env: { DRILL_CRASH_AT: "gate-spawn" }, timeout: 60_000 },
    );
    expect(up.exitCode, up.stdout + up.stderr).not.toBe(0);
    const before = readState(stateDir, "tinyin") as DrillState;
    expect(before.fileDir).toBe(path.join(root, "files", `drill-${before.runId}`));
    expect(existsSync(before.fileDir!)).toBe(true);
    // The ids its queue gave, read live (up, the packer, is dead): what the rollback's export must hold, and only that.
    const given = await idsGivenByQueue(before.redis.url, before.queue);

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "tinyin"], { cwd: repoRoot, timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "tinyin", before, { cgroupName: "tinyincg" });
    const exported = readState(stateDir, "tinyin")?.rollback?.exported;
    expect(typeof exported, rollback.stdout).toBe("string");
    assertNoJobLostInExport(exported!, before.queue, given);
  }, 90_000);
});
