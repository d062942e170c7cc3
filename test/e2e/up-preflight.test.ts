// QA AB 6 and 7: up started what it then could not finish because of the
// state dir or the environment, and doctor passed them. A read-only or full
// state dir: up --json printed no document (README: one whatever happens once
// its drill file and flags are read), doctor passed. A file named `served`,
// or no coreutils `timeout` on PATH: up started Redis (and the cgroup and the
// children) before failing, leaving a rollback to do. Now doctor fails each,
// up refuses before starting anything, and --json always gets its document.
// The built binary; the doctor's probe cgroup and the drill's under this
// test's own (--parent self).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cgroupDirsLeft, forceCleanup, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping up's preflight of the state dir and PATH: ${skip}`);

const CGROUP = `fxbpre${process.pid}`;

interface Row {
  name: string;
  status: string;
  detail: string;
}

describe.skipIf(skip !== null)("up refuses what doctor now fails, before starting anything (built binary, --parent self)", () => {
  let root = "";
  let drillFile = "";
  const mounts: string[] = [];
  const stateDirs: string[] = [];
  beforeAll(() => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-up-preflight-"));
    mkdirSync(path.join(root, "files"));
    drillFile = path.join(root, "fxbpre.yaml");
    writeFileSync(drillFile, tinyDrill("fxbpre", { duration: "3s", phases: [["0s", pack(1)]] }));
  });
  afterAll(async () => {
    // Only does something when a case failed (up started the drill).
    for (const stateDir of stateDirs) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    await forceCleanup(realWorkerCgroup(CGROUP), path.join(root, "state"));
    for (const mnt of mounts) spawnSync("umount", [mnt]);
    if (root) rmSync(root, { recursive: true, force: true });
  }, 180_000);

  const upArgs = () => ["up", "--drill", drillFile, "--parent", "self", "--name", CGROUP, "--file-dir", path.join(root, "files")];
  const doctorRows = async (args: string[], options = {}): Promise<{ exitCode: number; rows: Map<string, Row> }> => {
    const r = await runDrill([...args, "doctor", "--json", "--parent", "self", "--file-dir", path.join(root, "files")], options);
    const doc = JSON.parse(r.stdout) as { checks: Row[] };
    return { exitCode: r.exitCode, rows: new Map(doc.checks.map((c) => [c.name, c])) };
  };
  /** A tmpfs of `size` at a fresh dir, unmounted in afterAll. */
  const tmpfs = (label: string, options: string): string => {
    const mnt = path.join(root, label);
    mkdirSync(mnt);
    execFileSync("mount", ["-t", "tmpfs", "-o", options, "tmpfs", mnt]);
    mounts.push(mnt);
    return mnt;
  };
  const nothingStarted = (stateDir: string) => {
    expect(cgroupDirsLeft(realWorkerCgroup(CGROUP))).toEqual([]);
    expect(existsSync(path.join(stateDir, "fxbpre", "state.json"))).toBe(false);
  };

  it.each([
    ["read-only", "ro,size=1m", "EROFS", () => undefined],
    // Full: 64k, filled to the last byte (an empty file is still made there: the probe writes bytes).
    ["full", "size=64k", "ENOSPC", (mnt: string) => spawnSync("dd", ["if=/dev/zero", `of=${path.join(mnt, "fill")}`, "bs=4k"])],
  ])("a %s state dir: doctor fails it; up --json prints its document (verdict failed) and exits 1", async (label, options, code, fill) => {
    const stateDir = tmpfs(label, options);
    fill(stateDir);
    stateDirs.push(stateDir);
    const doctor = await doctorRows(["--state-dir", stateDir]);
    expect(doctor.exitCode).toBe(3);
    expect(doctor.rows.get("state dir writable")).toMatchObject({ status: "fail", detail: expect.stringContaining(`: ${code} (`) });
    if (code === "ENOSPC") expect(doctor.rows.get("state dir free space")).toMatchObject({ status: "warn", detail: expect.stringMatching(/^under 64\.0MiB/) });

    const up = await runDrill(["--state-dir", stateDir, "--json", ...upArgs()], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(1);
    const doc = JSON.parse(up.stdout) as Record<string, unknown>;
    expect(doc).toEqual({ name: "fxbpre", verdict: "failed", reason: expect.stringContaining(`: ${code}`), run_id: null, state: null });
    expect(up.stderr).toContain(`drill: ${String(doc.reason)}`);
    nothingStarted(stateDir);
  }, 180_000);

  it("a file named `served` in the state dir: doctor fails it, up refuses (exit 3, its document) before starting anything", async () => {
    const stateDir = path.join(root, "state");
    mkdirSync(stateDir, { recursive: true });
    writeFileSync(path.join(stateDir, "served"), "");
    stateDirs.push(stateDir);
    const problem = `${path.join(stateDir, "served")} is not a directory, and drill keeps its records there: move it aside`;
    const doctor = await doctorRows(["--state-dir", stateDir]);
    expect(doctor.exitCode).toBe(3);
    expect(doctor.rows.get("state dir writable")).toMatchObject({ status: "fail", detail: problem });

    const up = await runDrill(["--state-dir", stateDir, "--json", ...upArgs()], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(3);
    expect(JSON.parse(up.stdout)).toMatchObject({ verdict: "refused", reason: `doctor refused: state dir writable: ${problem}`, run_id: null, state: null });
    nothingStarted(stateDir);
    expect(readdirSync(stateDir)).toEqual(["served"]);
  }, 180_000);

  it("no coreutils timeout on PATH: doctor fails it, up refuses (exit 3) before starting its Redis", async () => {
    const bin = path.join(root, "bin");
    mkdirSync(bin);
    for (const program of ["node", "redis-server", "sh"]) {
      const found = spawnSync("sh", ["-c", `command -v ${program}`], { encoding: "utf8" }).stdout.trim();
      symlinkSync(found, path.join(bin, program));
    }
    const stateDir = path.join(root, "state-path");
    stateDirs.push(stateDir);
    const env = { PATH: bin, FORCE_COLOR: "0", NO_COLOR: "1" };
    const run = (args: string[]) => execa(process.execPath, [drillBin, "--state-dir", stateDir, ...args], { reject: false, extendEnv: false, env, timeout: 120_000 });

    const doctor = await run(["doctor", "--json", "--parent", "self", "--file-dir", path.join(root, "files")]);
    expect(doctor.exitCode, String(doctor.stderr)).toBe(3);
    const row = (JSON.parse(String(doctor.stdout)) as { checks: Row[] }).checks.find((c) => c.name === "timeout on PATH");
    expect(row).toMatchObject({ status: "fail", detail: expect.stringContaining("coreutils timeout not found") });

    const up = await run(["--json", ...upArgs()]);
    expect(up.exitCode, String(up.stdout) + String(up.stderr)).toBe(3);
    expect(JSON.parse(String(up.stdout))).toMatchObject({ verdict: "refused", reason: expect.stringMatching(/^doctor refused: timeout on PATH: coreutils timeout not found/) });
    nothingStarted(stateDir);
  }, 180_000);
});
