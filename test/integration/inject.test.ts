import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { existsSync, readFileSync, rmSync, readdirSync } from "node:fs";
import path from "node:path";
import { execa } from "execa";
import { spawnInCgroup } from "../../src/cgroup/join.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { hogsDir } from "../../src/cgroup/stateFiles.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import type { InjectDocument } from "../../src/commands/inject.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";

const skipReason = realCgroupSkipReason();
if (skipReason) console.warn(`skipping real-cgroup inject tests: ${skipReason}`);

const M = 1024 * 1024;
const root = path.resolve(import.meta.dirname, "../..");
let stateDir = "";
const made: WorkerCgroup[] = [];
let counter = 0;

function drill(args: string[]) {
  return execa("node", [path.join(root, "bin/drill.js"), ...args], {
    env: { FORCE_COLOR: "0", DRILL_STATE_DIR: stateDir },
    reject: false,
    timeout: 90_000,
  });
}

/**
 * A path a detached inject reported (its hog's file, its record): a string
 * naming a file that exists now, so that "gone after teardown" proves
 * something (existsSync(undefined) is false too).
 */
function existingPath(reported: string | null | undefined, what: string): string {
  expect(typeof reported, `${what} reported`).toBe("string");
  expect(existsSync(reported!), `${what} ${reported} exists before teardown`).toBe(true);
  return reported!;
}

/** A fresh drill cgroup under the test's own cgroup, always torn down after the test. */
function cgroupWithLimit(memoryMax: number): WorkerCgroup {
  const cg = realWorkerCgroup(`inj${process.pid}x${counter++}`);
  made.push(cg);
  setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax, swapMax: 0 });
  return cg;
}

beforeAll(() => {
  stateDir = tempStateDir();
});

afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

afterEach(async () => {
  for (const cg of made.splice(0)) await forceCleanup(cg, stateDir);
});

describe.skipIf(skipReason)("inject on real cgroups (--parent self)", () => {
  it("RELIABILITY 3: the program is inside every hierarchy's cgroup before its first instruction", async () => {
    const cg = cgroupWithLimit(64 * M);
    // cat's own first read of /proc/self/cgroup: it was exec'd after the join.
    const child = spawnInCgroup(cg, "/bin/cat", ["/proc/self/cgroup"], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()));
    const code = await new Promise((resolve) => child.once("close", resolve));
    expect(code).toBe(0);
    if (cg.memory) expect(out).toMatch(new RegExp(`^\\d+:memory:${cg.memory.cgroupPath}$`, "m"));
    if (cg.unified) expect(out).toContain(`0::${cg.unified.cgroupPath}\n`);
  });

  it("anon under the limit: packed, joined before touching, the cgroup's peak covers the touched size", async () => {
    const cg = cgroupWithLimit(128 * M);
    const result = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "64M", "--mode", "anon", "--hold", "1s"]);
    expect(result.exitCode, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as InjectDocument;
    // The hog is the OOM killer's first pick in its cgroup (QA: the worker went first at 96M).
    expect(report).toMatchObject({ outcome: "packed", joined: true, oom_score_adj: 1000, packed_bytes: 64 * M, hold_ms: 1000 });
    // The hold it had, measured from its packed line to its exit: at least what was asked.
    expect(report.held_ms).toBeGreaterThanOrEqual(900);
    expect(report.cg_mem_peak).toBeGreaterThanOrEqual(64 * M);
    expect(readdirSync(hogsDir(stateDir))).toEqual([]);
  });

  it("RELIABILITY 4: anon over the limit is oom_killed with the oom_kill count, exit 0; teardown leaves the host clean", async () => {
    const cg = cgroupWithLimit(96 * M);
    const result = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "256M", "--mode", "anon", "--hold", "5s"]);
    expect(result.exitCode, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as InjectDocument;
    expect(report.outcome).toBe("oom_killed");
    expect(report.exit?.signal).toBe("SIGKILL");
    expect(report.cg_oom_kill_after).toBeGreaterThan(report.cg_oom_kill_before!);
    const text = await drill(["inject", "--name", cg.name, "--parent", "self", "--size", "256M", "--mode", "anon"]);
    expect(text.stdout).toMatch(/oom_killed.*admission was already late/i);
    const down = await drill(["cgroup", "teardown", "--name", cg.name, "--parent", "self"]);
    expect(down.exitCode, down.stderr).toBe(0);
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  it("QA: 128M anon in a 64M cgroup names where it was OOM-killed, of what, against which limit; the next 32M run's peak is its own, not the cgroup's lifetime 64M", async () => {
    const cg = cgroupWithLimit(64 * M);
    const killed = await drill(["inject", "--name", cg.name, "--parent", "self", "--size", "128M", "--mode", "anon", "--hold", "3s"]);
    expect(killed.exitCode, killed.stderr).toBe(0);
    expect(killed.stdout).toMatch(/^oom_killed: OOM-killed at .+ of 128MiB \(cgroup limit 64\.0MiB\); pid \d+; cgroup oom_kill 0 → 1\. Admission was already late\.$/);
    const next = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "32M", "--mode", "anon", "--hold", "1s"]);
    expect(next.exitCode, next.stderr).toBe(0);
    const report = JSON.parse(next.stdout) as InjectDocument;
    expect(report.outcome).toBe("packed");
    expect(report.cg_mem_peak).toBeGreaterThanOrEqual(63 * M); // the lifetime peak, from the killed run
    expect(report.run_peak_bytes).toBeGreaterThanOrEqual(32 * M);
    expect(report.run_peak_bytes).toBeLessThan(48 * M);
    expect(report.message).not.toMatch(/peak 6\d\.\dMiB this run|; peak 64\.0MiB;/);
    expect(report.message).toMatch(/cgroup peak ≥?3\d\.\dMiB this run/);
  });

  it("inject without --parent self, the cgroup being under the caller's own: says to add --parent self", async () => {
    const cg = cgroupWithLimit(64 * M);
    const result = await drill(["inject", "--name", cg.name, "--size", "16M"]);
    // Not set up where it looked: bad usage or input (exit 2), not a failure.
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`but ${cg.limits.dir} exists under your own cgroup: add --parent self`);
    expect(result.stderr).not.toMatch(/run drill cgroup setup/);
  });

  it("thrash: file created inside, packed, per-second stall rates reported, file unlinked after", async () => {
    const cg = cgroupWithLimit(96 * M);
    const result = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "160M", "--mode", "thrash", "--hold", "3s"]);
    expect(result.exitCode, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as InjectDocument;
    expect(report).toMatchObject({ outcome: "packed", joined: true, packed_bytes: 160 * M });
    expect(report.file).toMatch(/^\/var\/tmp\/drill-hog-/);
    expect(existsSync(report.file!)).toBe(false);
    expect(report.stall_rates_pct.length).toBeGreaterThanOrEqual(3);
    if (cg.pressureFile) expect(report.stall_rates_pct.some((v) => v !== null)).toBe(true);
    expect(report.cg_mem_peak).toBeLessThanOrEqual(96 * M);
  });

  it("refuses a thrash file on tmpfs (shmem: an OOM, not thrash)", async () => {
    const cg = cgroupWithLimit(64 * M);
    const result = await drill(["inject", "--name", cg.name, "--parent", "self", "--size", "32M", "--mode", "thrash", "--file-dir", "/dev/shm", "--hold", "1s"]);
    expect(result.exitCode).toBe(3);
    expect(result.stderr).toMatch(/tmpfs/);
  });

  it("--detach returns once packed; the record names pid + start time; teardown kills it and unlinks its file", async () => {
    const cg = cgroupWithLimit(96 * M);
    const started = Date.now();
    const result = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "64M", "--mode", "thrash", "--hold", "60s", "--detach"]);
    expect(result.exitCode, result.stderr).toBe(0);
    expect(Date.now() - started).toBeLessThan(30_000);
    const report = JSON.parse(result.stdout) as InjectDocument;
    expect(report).toMatchObject({ outcome: "packed", detached: true });
    const stateFile = existingPath(report.state_file, "state_file");
    const hogFile = existingPath(report.file, "file");
    const down = await drill(["cgroup", "teardown", "--name", cg.name, "--parent", "self"]);
    expect(down.exitCode, down.stderr).toBe(0);
    expect(down.stdout).toContain(`killed ${report.pid} (pagetoucher)`);
    expect(existsSync(hogFile)).toBe(false);
    expect(existsSync(stateFile)).toBe(false);
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });

  it("the runbook's step-by-step path (cgroup setup, inject --detach) and then rollback: the hog killed, the cgroup removed; a second rollback has nothing to do", async () => {
    const cg = cgroupWithLimit(96 * M);
    const result = await drill(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "32M", "--mode", "thrash", "--hold", "60s", "--detach"]);
    expect(result.exitCode, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as InjectDocument;
    expect(existsSync(`/proc/${report.pid}`)).toBe(true);
    const stateFile = existingPath(report.state_file, "state_file");
    const hogFile = existingPath(report.file, "file");

    // No drill in this state dir: rollback said "nothing to roll back" and left the hog running.
    const rollback = await drill(["rollback"]);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toContain(`rollback cgroup ${cg.name} (made by drill cgroup setup, in no drill):`);
    expect(rollback.stdout).toMatch(new RegExp(`ok {3}kill and remove cgroup: killed 1: ${report.pid} \\(pagetoucher\\)`));
    expect(rollback.stdout).not.toContain("nothing to roll back");
    expect(cgroupDirsLeft(cg)).toEqual([]);
    expect(existsSync(hogFile)).toBe(false);
    expect(existsSync(stateFile)).toBe(false);
    expect(readdirSync(path.join(stateDir, "cgroups")).filter((f) => f.startsWith(cg.name))).toEqual([]);

    const again = await drill(["--json", "rollback"]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ cgroups: [], nothing_to_roll_back: true, left: [] });
  });

  // QA: with the cgroup set up from one state dir and the hog injected from another, the
  // hog's state dir rolled back with "nothing to roll back" while it ran. That state dir has
  // no record of the cgroup, so inject now refuses it there (QA S5), as setup and teardown
  // from there would: nothing runs that its own rollback would miss.
  it("a hog injected from another state dir than its cgroup's setup: refused (exit 3) naming the way, nothing started or recorded", async () => {
    const cg = cgroupWithLimit(96 * M);
    const other = tempStateDir();
    const inOther = (args: string[]) =>
      execa("node", [path.join(root, "bin/drill.js"), ...args], { env: { FORCE_COLOR: "0", DRILL_STATE_DIR: other }, reject: false, timeout: 90_000 });
    try {
      const result = await inOther(["--json", "inject", "--name", cg.name, "--parent", "self", "--size", "32M", "--mode", "thrash", "--hold", "60s", "--detach"]);
      expect(result.exitCode, result.stderr).toBe(3);
      expect(result.stdout).toBe("");
      expect(result.stderr).toContain(
        `drill did not create it (no marker in ${path.join(other, "cgroups")}); refusing to run inject in it. If drill made it with another --state-dir, give that one; else pick another --name`,
      );
      expect(existsSync(hogsDir(other))).toBe(false);
      for (const dir of cg.dirs) expect(readFileSync(path.join(dir.dir, "cgroup.procs"), "utf8")).toBe("");
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("inject without a cgroup says to set it up where it looked (its --parent and state dir)", async () => {
    const result = await drill(["inject", "--name", `absent${process.pid}`, "--parent", "self", "--size", "16M"]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`run drill --state-dir ${stateDir} cgroup setup --name absent${process.pid} --parent self first`);
  });
});
