import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { hogsDir } from "../../src/cgroup/stateFiles.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { forceCleanup, realDrillSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping inject into a frozen cgroup: ${skip}`);

/**
 * QA: inject into a frozen worker cgroup (cgroup.freeze 1, by hand or a
 * freeze left behind) started a hog that froze at its join and never ran:
 * `fill touched n/a` every second until Ctrl-C, nothing said of the freeze.
 */
describe.skipIf(skip !== null)("inject into a frozen cgroup (real cgroup under --parent self)", () => {
  const name = `ifrz${process.pid}`;
  let stateDir: string;
  let cg: WorkerCgroup;
  let freezeFile: string | undefined;
  beforeAll(() => {
    stateDir = tempStateDir();
    cg = realWorkerCgroup(name);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const v2 = cg.dirs.find((d) => d.version === 2);
    freezeFile = v2 ? path.join(v2.dir, "cgroup.freeze") : undefined;
  });
  afterAll(async () => {
    if (freezeFile && existsSync(freezeFile)) writeFileSync(freezeFile, "0");
    await forceCleanup(cg, stateDir);
    rmSync(stateDir, { recursive: true, force: true });
  });

  it("is refused (exit 3) naming the freeze and how to thaw it; no hog started, no record left", async (ctx) => {
    if (!freezeFile || !existsSync(freezeFile)) {
      console.warn(`skipping this case: no cgroup.freeze beside the cgroup (${freezeFile ?? "no cgroup2 directory"}): the kernel's cgroup2 has no freezer`);
      return ctx.skip();
    }
    writeFileSync(freezeFile!, "1");
    const r = await runDrill(["--state-dir", stateDir, "inject", "--parent", "self", "--name", name, "--size", "8M", "--hold", "1s"], { timeout: 20_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`is frozen (${path.join(path.dirname(freezeFile!), "cgroup.events")}: frozen 1)`);
    expect(r.stderr).toContain(`echo 0 > ${freezeFile}`);
    expect(r.stderr.split("\n").filter((l) => l !== "")).toHaveLength(1);
    expect(existsSync(hogsDir(stateDir)) ? readdirSync(hogsDir(stateDir)) : []).toEqual([]);
    for (const d of cg.dirs) expect(readFileSync(path.join(d.dir, "cgroup.procs"), "utf8")).toBe("");
  });

  it("up's own hog (DRILL_RUN_ID) is not refused: it waits for the thaw (up says the freeze as a stall), then packs", async (ctx) => {
    if (!freezeFile || !existsSync(freezeFile)) {
      console.warn(`skipping this case: no cgroup.freeze beside the cgroup (${freezeFile ?? "no cgroup2 directory"}): the kernel's cgroup2 has no freezer`);
      return ctx.skip();
    }
    writeFileSync(freezeFile!, "1");
    const run = runDrill(["--state-dir", stateDir, "--json", "inject", "--parent", "self", "--name", name, "--size", "8M", "--hold", "1s"], { timeout: 30_000, env: { DRILL_RUN_ID: `qa-frozen-${process.pid}` } });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    writeFileSync(freezeFile!, "0");
    const r = await run;
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ outcome: "packed", joined: true });
  });
});
