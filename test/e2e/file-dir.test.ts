import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hogsDir } from "../../src/cgroup/stateFiles.js";
import { forceCleanup, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping --file-dir / --weights-dir that is not a directory: ${skip}`);

/**
 * inject and worker check their file's dir as `up --file-dir` does: a
 * regular file (statfs answers for it too) or a missing dir is exit 2 naming
 * the command's own flag, one line, before a hog or worker starts in the
 * cgroup (set up for real here, so only the dir stands in the way).
 */
describe.skipIf(skip !== null)("a --file-dir / --weights-dir that is not a directory (real cgroup under --parent self)", () => {
  const name = `fdir${process.pid}`;
  let root: string;
  let stateDir: string;
  let plain: string;
  let redis: RedisServer;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-file-dir-"));
    stateDir = path.join(root, "state");
    plain = path.join(root, "plain-file");
    writeFileSync(plain, "");
    // The worker's Redis: its own, never the host's 6379.
    redis = await startRedisServer();
    const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
  });
  afterAll(async () => {
    await forceCleanup(realWorkerCgroup(name), stateDir);
    await redis?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  const oneLine = (stderr: string, message: string): void => {
    expect(stderr).toBe(`drill: ${message}`);
  };

  it("inject --mode thrash --file-dir <a file>: exit 2 naming --file-dir, no hog started, no record left", async () => {
    const r = await runDrill(["--state-dir", stateDir, "inject", "--parent", "self", "--name", name, "--mode", "thrash", "--size", "32M", "--hold", "1s", "--file-dir", plain]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    oneLine(r.stderr, `--file-dir: ${plain} is not a directory; give an existing directory on a disk filesystem`);
    expect(r.stdout).toBe("");
    expect(existsSync(hogsDir(stateDir)) ? readdirSync(hogsDir(stateDir)) : []).toEqual([]);
  });

  it("inject --mode thrash --file-dir <missing>: exit 2 naming --file-dir", async () => {
    const missing = path.join(root, "nope");
    const r = await runDrill(["--state-dir", stateDir, "inject", "--parent", "self", "--name", name, "--mode", "thrash", "--size", "32M", "--hold", "1s", "--file-dir", missing]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    oneLine(r.stderr, `--file-dir: ${missing} does not exist; give an existing directory on a disk filesystem`);
  });

  // QA: a read-only mount passed every check (doctor's row said "pass"); the hog then
  // failed at its file's create (exit 1), and up's worker the same, mid-drill.
  it("inject --mode thrash --file-dir <read-only mount>: exit 2 naming --file-dir, no hog started; doctor and up say the same", async () => {
    const ro = path.join(root, "ro");
    mkdirSync(ro);
    const bind = spawnSync("mount", ["--bind", ro, ro], { encoding: "utf8" });
    expect(bind.status, bind.stderr).toBe(0);
    try {
      const remount = spawnSync("mount", ["-o", "remount,bind,ro", ro], { encoding: "utf8" });
      expect(remount.status, remount.stderr).toBe(0);
      const r = await runDrill(["--state-dir", stateDir, "inject", "--parent", "self", "--name", name, "--mode", "thrash", "--size", "32M", "--hold", "1s", "--file-dir", ro]);
      expect(r.exitCode, r.stdout + r.stderr).toBe(2);
      oneLine(r.stderr, `--file-dir: ${ro} is on a read-only filesystem (EROFS): no file can be made there; give an existing directory on a disk filesystem`);
      expect(r.stdout).toBe("");
      expect(existsSync(hogsDir(stateDir)) ? readdirSync(hogsDir(stateDir)) : []).toEqual([]);
      const doctor = await runDrill(["--state-dir", stateDir, "doctor", "--parent", "self", "--file-dir", ro]);
      expect(doctor.exitCode, doctor.stdout + doctor.stderr).toBe(2);
      expect(doctor.stderr).toBe(r.stderr);
    } finally {
      spawnSync("umount", [ro]);
    }
  });

  it("worker --weights-dir <a file>: exit 2 naming --weights-dir before it joins the cgroup", async () => {
    const r = await runDrill(
      ["--state-dir", stateDir, "--redis", redis.url, "worker", "--parent", "self", "--name", name, "--weights", "16M", "--weights-dir", plain, "--idle-exit", "1s"],
      { timeout: 60_000 },
    );
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    oneLine(r.stderr, `--weights-dir: ${plain} is not a directory; give an existing directory on a disk filesystem`);
    expect(r.stderr).not.toContain("joining");
  });
});
