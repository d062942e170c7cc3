import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { hogsDir } from "../../src/cgroup/stateFiles.js";
import { realCgroupForFile, realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping inject with the OOM killer disabled: ${skip}`);

/**
 * QA: a v1 memory cgroup with oom_kill_disable 1 (a new cgroup inherits it
 * from its parent there, as under `docker run --oom-kill-disable`): the anon
 * hog stopped at the limit for ever, inject printing `fill touched 77.0MiB/200MiB
 * ... stall 0.0%` every second until Ctrl-C, no OOM kill, nothing said.
 */
describe.skipIf(skip !== null)("inject --mode anon with the cgroup's OOM killer disabled (v1, real cgroup under --parent self)", () => {
  const name = `iood${process.pid}`;
  const made = realCgroupForFile(name);

  it("is refused (exit 3) naming memory.oom_control and how to enable it; no hog started", async (ctx) => {
    if (made.cg.limits.version !== 1) {
      console.warn(`skipping: the memory controller is cgroup v${made.cg.limits.version} here; memory.oom_control is v1's`);
      return ctx.skip();
    }
    const control = path.join(made.cg.limits.dir, "memory.oom_control");
    writeFileSync(control, "1");
    let r;
    try {
      r = await runDrill(["--state-dir", made.stateDir, "inject", "--parent", "self", "--name", name, "--size", "128M", "--hold", "1s"], { timeout: 20_000 });
    } finally {
      writeFileSync(control, "0");
    }
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`${control}: oom_kill_disable 1`);
    expect(r.stderr).toContain(`echo 0 > ${control}`);
    expect(existsSync(hogsDir(made.stateDir)) ? readdirSync(hogsDir(made.stateDir)) : []).toEqual([]);
    expect(readFileSync(path.join(made.cg.limits.dir, "cgroup.procs"), "utf8")).toBe("");
  });
});
