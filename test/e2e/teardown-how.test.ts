import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { spawnInCgroup } from "../../src/cgroup/join.js";
import { realCgroupForFile, realCgroupSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { until } from "../helpers/stateFill.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping teardown's how line on a real cgroup: ${skip}`);

/**
 * README: `how: sigterm, then cgroup.kill`, `sigkill-by-pid` only where there
 * is no cgroup.kill. QA: on a hybrid host every teardown that needed a kill
 * said "sigterm, then cgroup.kill, then sigkill-by-pid": the tasks cgroup.kill
 * had just killed, still listed in the v1 dir, were SIGKILLed by pid as well.
 */
describe.skipIf(skip !== null)("cgroup teardown's how line (real cgroup under --parent self)", () => {
  const name = `thow${process.pid}`;
  const made = realCgroupForFile(name);

  it("a task that ignores SIGTERM, in every dir: sigterm, then cgroup.kill, nothing by pid", async (ctx) => {
    if (!made.cg.dirs.some((d) => d.version === 2 && existsSync(path.join(d.dir, "cgroup.kill")))) {
      console.warn("skipping: no cgroup.kill in the cgroup's cgroup2 directory (kernel before 5.14)");
      return ctx.skip();
    }
    // An ignored SIGTERM stays ignored across exec.
    const task = spawnInCgroup(made.cg, "/bin/sh", ["-c", "trap '' TERM; exec sleep 60"], { stdio: "ignore" });
    // Past the exec (the trap is set before it): a fixed wait was too short on a busy host.
    await until(() => readFileSync(`/proc/${task.pid}/comm`, "utf8").trim() === "sleep", () => `pid ${task.pid} never exec'd sleep`, 10_000);
    const td = await runDrill(["--state-dir", made.stateDir, "--json", "cgroup", "teardown", "--parent", "self", "--name", name]);
    task.kill("SIGKILL");
    expect(td.exitCode, td.stdout + td.stderr).toBe(0);
    const doc = JSON.parse(td.stdout) as { method: string[]; killed: Array<{ pid: number }> };
    expect(doc.method).toEqual(["sigterm", "cgroup.kill"]);
    expect(doc.killed.map((k) => k.pid)).toEqual([task.pid]);
  });
});
