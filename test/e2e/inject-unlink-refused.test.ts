import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnInCgroup } from "../../src/cgroup/join.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { hogsDir, newHogRecordFile, writeHogRecord } from "../../src/cgroup/stateFiles.js";
import { cgroupKey } from "../../src/cgroup/stateFiles.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { forceCleanup, immutableSkipReason, realDrillSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

const skip = realDrillSkipReason() ?? immutableSkipReason();
if (skip) console.warn(`skipping a hog file that cannot be unlinked: ${skip}`);

const chattr = (flag: "+i" | "-i", dir: string): void => {
  const r = spawnSync("chattr", [flag, dir], { encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
};

/**
 * QA: a thrash file that could not be unlinked (its dir made immutable, or
 * remounted read-only, mid-run: EPERM, EROFS) crashed inject, and then every
 * cgroup teardown, with a stack trace (`unexpected error: ENOTDIR ... scandir`:
 * rmSync's force falls back to rmdir on EPERM), no outcome printed, the
 * cgroup's marker left. The file is named as left, its record kept, and a
 * teardown run once it can be removed unlinks it.
 */
describe.skipIf(skip !== null)("a hog's file that cannot be unlinked (real cgroup under --parent self)", () => {
  const name = `iunl${process.pid}`;
  let stateDir: string;
  let fileDir: string;
  let cg: WorkerCgroup;
  beforeAll(() => {
    stateDir = tempStateDir();
    fileDir = path.join(stateDir, "..", `drill-unlink-${process.pid}`);
    mkdirSync(fileDir);
    cg = realWorkerCgroup(name);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
  });
  /** `cgroup teardown` with the file dir immutable (chattr +i) meanwhile: it exits 4 naming what it could not unlink, without a stack trace. */
  const teardownWhileImmutable = async (): Promise<{ exitCode: number; stdout: string; stderr: string }> => {
    chattr("+i", fileDir);
    try {
      const td = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", name]);
      expect(td.stderr).not.toContain("unexpected error");
      expect(td.exitCode, td.stdout + td.stderr).toBe(4);
      return td;
    } finally {
      chattr("-i", fileDir);
    }
  };
  afterAll(async () => {
    spawnSync("chattr", ["-i", fileDir]);
    await forceCleanup(cg, stateDir);
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(fileDir, { recursive: true, force: true });
  });

  it("inject: its outcome printed, the file named as left with why, its record kept; teardown unlinks it later", async () => {
    const run = runDrill(["--state-dir", stateDir, "--json", "inject", "--parent", "self", "--name", name, "--mode", "thrash", "--size", "16M", "--hold", "3s", "--file-dir", fileDir], { timeout: 30_000 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    chattr("+i", fileDir);
    let r;
    try {
      r = await run;
    } finally {
      chattr("-i", fileDir);
    }
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { outcome: string; file: string; file_left: string | null; state_file: string | null };
    expect(doc.outcome).toBe("packed");
    expect(doc.file_left).toMatch(/^EPERM/);
    expect(existsSync(doc.file)).toBe(true);
    expect(doc.state_file).not.toBeNull();
    expect(existsSync(doc.state_file!)).toBe(true);
    expect(r.stderr).toContain(`could not unlink the hog's file ${doc.file}: EPERM`);

    const td = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", name]);
    expect(td.exitCode, td.stdout + td.stderr).toBe(0);
    expect(td.stdout).toContain(`unlinked ${doc.file}`);
    expect(existsSync(doc.file)).toBe(false);
    expect(readdirSync(hogsDir(stateDir))).toEqual([]);
  });

  it("cgroup teardown: a recorded hog file it cannot unlink is left, named (exit 4, no stack trace), the record kept; run again, it finishes", async () => {
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const file = path.join(fileDir, `drill-hog-${name}-0badf00d.bin`);
    writeFileSync(file, "x");
    const record = newHogRecordFile(stateDir, cg);
    writeHogRecord(record, { kind: "drill-hog", cgroupKey: cgroupKey(cg), name, mode: "thrash", pid: null, startTime: null, file, logFile: null, sizeBytes: 4096, holdMs: 1000, detached: true, startedAt: new Date().toISOString() });
    const td = await teardownWhileImmutable();
    expect(td.stderr).toContain(`could not unlink the hog's file ${file}: EPERM`);
    expect(existsSync(record)).toBe(true);
    const again = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", name]);
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toContain(`unlinked ${file}`);
    expect(existsSync(file)).toBe(false);
    expect(existsSync(record)).toBe(false);
  });

  it("cgroup teardown: a dead worker's weights file it cannot unlink is named (exit 4, no stack trace)", async () => {
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    // Named for an owner that is gone (pid above pid_max): teardown unlinks what a SIGKILLed worker left.
    const file = path.join(fileDir, "drill-weights-w1-4194305-1.bin");
    writeFileSync(file, "x");
    const holder = spawnInCgroup(cg, "/bin/sh", ["-c", 'exec 3<"$0"; exec sleep 60', file], { stdio: "ignore" });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const td = await teardownWhileImmutable().finally(() => holder.kill("SIGKILL"));
    expect(td.stderr).toContain(`could not unlink the weights file ${file}: EPERM`);
    expect(existsSync(file)).toBe(true);
    rmSync(file);
  });

  it("inject: a hog record it cannot remove at the end (its dir immutable) is named; the outcome printed, no stack trace", async () => {
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const run = runDrill(["--state-dir", stateDir, "--json", "inject", "--parent", "self", "--name", name, "--size", "8M", "--hold", "2s"], { timeout: 30_000 });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    chattr("+i", hogsDir(stateDir));
    let r;
    try {
      r = await run;
    } finally {
      chattr("-i", hogsDir(stateDir));
    }
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ outcome: "packed" });
    const [record] = readdirSync(hogsDir(stateDir));
    expect(r.stderr).toContain(`could not remove its record ${path.join(hogsDir(stateDir), record!)}: EPERM`);
  });
});
