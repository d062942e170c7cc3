import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa, type ResultPromise } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import { makeFakeHost, stuckFakeCgroup, type FakeHost } from "../helpers/cgroupFixtures.js";
import { drillBin } from "../helpers/cli.js";

/**
 * `drill cgroup teardown` had no signal handling: a Ctrl-C or SIGTERM while
 * its freeze → kill → thaw (kernels without cgroup.kill) waited for the
 * freeze killed drill and left cgroup.freeze at 1, every task inside stopped
 * for good. Now it stops as rollback does: the first Ctrl-C is only
 * acknowledged, a second one or SIGTERM thaws what it froze and exits
 * 130/143, naming where it stopped and the command that finishes it. This
 * kernel has cgroup.kill, so the freeze path runs on a fake tree
 * (--sysfs/--procfs), as in rollback-interrupt-frozen.test.ts: cgroup.events
 * never says `frozen 1` and the listed pid never leaves, so every sweep holds
 * the cgroup frozen for FREEZE_WAIT_MS, and the signals arrive while it is.
 */


let host: FakeHost | undefined;
let child: ResultPromise | undefined;
afterEach(() => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  child = undefined;
  host?.cleanup();
  host = undefined;
});

/** The fake cgroup, with no cgroup.kill (the freeze path). */
function stuckCgroup(h: FakeHost, name: string): string {
  const dir = stuckFakeCgroup(h, name);
  expect(readdirSync(dir)).not.toContain("cgroup.kill");
  return dir;
}

function startTeardown(h: FakeHost, name: string): { run: ResultPromise; stderr: () => string } {
  const run = execa("node", [drillBin, "--sysfs", h.sysfs, "--procfs", h.procfs, "--state-dir", h.stateDir, "cgroup", "teardown", "--name", name, "--parent", "self"], {
    reject: false,
    timeout: 60_000,
    env: { FORCE_COLOR: "0", NO_COLOR: "1" },
  });
  let err = "";
  run.stderr!.on("data", (chunk: Buffer) => (err += chunk.toString()));
  return { run, stderr: () => err };
}

/** Polls until `cond` or the teardown exited (or 20 s). */
async function until(run: ResultPromise, cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!cond() && run.exitCode === null && Date.now() < deadline) await sleep(5);
}

describe("drill cgroup teardown stopped while the cgroup is frozen (fake v2 tree without cgroup.kill)", () => {
  it("SIGTERM: exits 143, leaves the cgroup thawed, says where it stopped and to run teardown again", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const dir = stuckCgroup(h, "tdfrz");
    const freeze = () => readFileSync(path.join(dir, "cgroup.freeze"), "utf8").trim();
    const { run } = startTeardown(h, "tdfrz");
    child = run;
    // After SIGTERM's grace (the tasks' own, TERM_GRACE_MS), the first sweep freezes the cgroup.
    await until(run, () => freeze() === "1");
    expect(freeze(), "teardown never froze the cgroup").toBe("1");
    run.kill("SIGTERM");
    const r = await run;

    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(143);
    expect(freeze(), "the cgroup was left frozen").toBe("0");
    const stderr = String(r.stderr);
    expect(stderr).toContain(`thawed ${dir}`);
    expect(stderr).toContain("interrupted by SIGTERM during the teardown of cgroup tdfrz, while killing the tasks left in it;");
    expect(stderr).toContain(`run \`drill --state-dir ${h.stateDir} cgroup teardown --name tdfrz --parent self\` again to finish it`);
  }, 60_000);

  it("Ctrl-C: the first is only acknowledged, the second exits 130 with the cgroup thawed", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const dir = stuckCgroup(h, "tdfrz2");
    const freeze = () => readFileSync(path.join(dir, "cgroup.freeze"), "utf8").trim();
    const { run, stderr } = startTeardown(h, "tdfrz2");
    child = run;
    await until(run, () => freeze() === "1");
    expect(freeze(), "teardown never froze the cgroup").toBe("1");
    run.kill("SIGINT");
    await until(run, () => stderr().includes("finishing the teardown"));
    expect(run.exitCode, stderr()).toBeNull();
    // The next sweep's freeze, fresh: the second Ctrl-C lands while the cgroup is frozen.
    await until(run, () => freeze() === "0");
    await until(run, () => freeze() === "1");
    expect(freeze(), "teardown stopped freezing after the first Ctrl-C").toBe("1");
    run.kill("SIGINT");
    const r = await run;

    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(130);
    expect(freeze(), "the cgroup was left frozen").toBe("0");
    expect(String(r.stderr)).toContain(`thawed ${dir}`);
    expect(String(r.stderr)).toContain(`run \`drill --state-dir ${h.stateDir} cgroup teardown --name tdfrz2 --parent self\` again to finish it`);
  }, 60_000);
});
