// A --state-dir where no directory can be made: a clear error naming the
// directory that refused, at once, and nothing created. QA: under /proc, `up`
// and `cgroup setup` spun at 100 % CPU forever, deaf to SIGINT and SIGTERM
// (Node's recursive mkdir retrying the parent); on a read-only mount they
// said ENOENT for EROFS. The built binary, cgroups under this test's own.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmdirSync, rmSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeDirs } from "../../src/util/makeDirs.js";
import { realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

const CGROUP = "statedirbad";

/** The one `drill: ` line of stderr (up prints its banner first). */
function drillLine(stderr: string): string {
  const lines = stderr.split("\n").filter((l) => l.startsWith("drill: "));
  expect(lines, stderr).toHaveLength(1);
  return lines[0]!;
}

describe("makeDirs", () => {
  let root: string;
  beforeAll(() => (root = mkdtempSync(path.join(os.tmpdir(), "drill-make-dirs-"))));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("makes every missing directory and returns the first it made; undefined when all were there", () => {
    const dir = path.join(root, "a", "b", "c");
    expect(makeDirs(dir)).toBe(path.join(root, "a"));
    expect(existsSync(dir)).toBe(true);
    expect(makeDirs(dir)).toBeUndefined();
  });

  it("a file in the way is ENOTDIR naming it", () => {
    execFileSync("touch", [path.join(root, "file")]);
    expect(() => makeDirs(path.join(root, "file", "x"))).toThrow(expect.objectContaining({ code: "ENOTDIR" }));
  });

  it("under /proc: refused (ENOTSUP, a kernel filesystem) naming where, not a loop", () => {
    expect(() => makeDirs(`/proc/drill-make-dirs-${process.pid}/x`)).toThrow(expect.objectContaining({ code: "ENOTSUP", path: "/proc" }));
  });

  // QA: in cgroupfs each directory made is a cgroup, and they were left behind when the lock file failed.
  it("under a cgroup hierarchy: nothing made (each directory would be a cgroup)", () => {
    const own = realWorkerCgroup(CGROUP).limits.dir;
    const parent = path.dirname(own);
    const dir = path.join(parent, `drill-make-dirs-${process.pid}`, "x");
    try {
      expect(() => makeDirs(dir)).toThrow(expect.objectContaining({ code: "ENOTSUP", path: parent }));
      expect(existsSync(path.dirname(dir))).toBe(false);
    } finally {
      // Made anyway (the bug): empty cgroups, removed with rmdir.
      for (const d of [dir, path.dirname(dir)]) if (existsSync(d)) rmdirSync(d);
    }
  });
});

describe("a --state-dir nothing can be made in (built binary)", () => {
  const procDir = `/proc/drill-e2e-${process.pid}/state`;

  it.each([
    ["up", ["up", "--parent", "self", "--name", CGROUP, "--duration", "5s"], "create the state directory"],
    ["cgroup setup", ["cgroup", "setup", "--parent", "self", "--name", CGROUP, "--memory-max", "64M"], "create the lock"],
  ])("under /proc: %s fails at once naming the directory, nothing created", async (_label, args, action) => {
    const r = await runDrill(["--state-dir", procDir, ...args], { timeout: 30_000 });
    expect(r.exitCode, `exit ${r.exitCode} (-1: killed at the 30 s timeout): ${r.stderr}`).toBe(1);
    expect(drillLine(r.stderr)).toMatch(
      new RegExp(`^drill: cannot ${action} /proc/drill-e2e-${process.pid}/state\\S*: ENOTSUP at /proc \\(a kernel filesystem`),
    );
    expect(existsSync(realWorkerCgroup(CGROUP).limits.dir)).toBe(false);
  }, 60_000);

  // QA: a stack trace from rollback (and an unreadable state dir must not read as "nothing to roll back").
  it("a state dir that cannot be read (a symlink loop): rollback and report say so, exit 1", async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), "drill-loop-"));
    try {
      symlinkSync(path.join(root, "b"), path.join(root, "a"));
      symlinkSync(path.join(root, "a"), path.join(root, "b"));
      for (const args of [["rollback"], ["report"]]) {
        const r = await runDrill(["--state-dir", path.join(root, "a", "state"), ...args], { timeout: 30_000 });
        expect(r.exitCode, r.stderr).toBe(1);
        expect(r.stderr).not.toContain("unexpected error");
        expect(r.stderr).toMatch(/^drill: cannot read .*: ELOOP/m);
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 60_000);

  const isRoot = process.geteuid?.() === 0;
  if (!isRoot) console.warn("skipping the read-only mount case: mounting a tmpfs needs root");
  it.skipIf(!isRoot)("on a read-only mount: EROFS at the directory that refused, not ENOENT", async () => {
    const mnt = mkdtempSync(path.join(os.tmpdir(), "drill-ro-"));
    mkdirSync(mnt, { recursive: true });
    execFileSync("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", mnt]);
    try {
      const r = await runDrill(["--state-dir", mnt, "cgroup", "setup", "--parent", "self", "--name", CGROUP, "--memory-max", "64M"], { timeout: 30_000 });
      expect(r.exitCode, r.stderr).toBe(1);
      expect(drillLine(r.stderr)).toMatch(new RegExp(`^drill: cannot create the lock ${mnt}/cgroups/\\S+\\.lock: EROFS at ${mnt}/cgroups \\(a read-only filesystem`));
      expect(existsSync(realWorkerCgroup(CGROUP).limits.dir)).toBe(false);
    } finally {
      execFileSync("umount", [mnt]);
      rmSync(mnt, { recursive: true, force: true });
    }
  }, 60_000);
});
