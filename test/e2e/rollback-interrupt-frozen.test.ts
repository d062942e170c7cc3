import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { drillBin } from "../helpers/cli.js";

/**
 * A second Ctrl-C while rollback has the worker cgroup frozen (freeze → kill →
 * thaw, on kernels without cgroup.kill) exited at once and left cgroup.freeze
 * at 1: the tasks inside stayed stopped for good. This kernel has cgroup.kill,
 * so the freeze path runs on a fake tree (--sysfs/--procfs), as in
 * teardown-freeze.test.ts. Nothing plays the kernel here: cgroup.events never
 * says `frozen 1` (a task in D state) and the listed pid never leaves, so
 * every sweep holds the cgroup frozen for FREEZE_WAIT_MS, and the signals
 * arrive while it is.
 */

const M = 1024 * 1024;
/** Above pid_max: listed in the fake cgroup, never a real process to signal. */
const STUCK_PID = 4194305;

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

describe("rollback stopped by a second Ctrl-C while the cgroup is frozen (fake v2 tree without cgroup.kill)", () => {
  it("exits 130 saying to run rollback again, and leaves the cgroup thawed", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "frz", { kind: "self" });
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    const dir = cg.limits.dir;
    writeFileSync(path.join(dir, "cgroup.freeze"), "0\n");
    writeFileSync(path.join(dir, "cgroup.events"), "populated 1\nfrozen 0\n");
    writeFileSync(path.join(dir, "cgroup.procs"), `${STUCK_PID}\n`);
    mkdirSync(path.join(h.procfs, String(STUCK_PID)), { recursive: true });
    writeFileSync(path.join(h.procfs, String(STUCK_PID), "cgroup"), `0::${cg.limits.cgroupPath}\n`);
    writeFileSync(path.join(h.procfs, String(STUCK_PID), "comm"), "hog\n");
    expect(readdirSync(dir)).not.toContain("cgroup.kill");

    const child = execa("node", [drillBin, "--sysfs", h.sysfs, "--procfs", h.procfs, "--state-dir", h.stateDir, "rollback"], {
      reject: false,
      timeout: 60_000,
      env: { FORCE_COLOR: "0", NO_COLOR: "1" },
    });
    const freeze = () => readFileSync(path.join(dir, "cgroup.freeze"), "utf8").trim();
    // After SIGTERM's grace, the first sweep freezes the cgroup.
    const deadline = Date.now() + 20_000;
    while (freeze() !== "1" && child.exitCode === null && Date.now() < deadline) await sleep(5);
    expect(freeze(), "rollback never froze the cgroup").toBe("1");
    child.kill("SIGINT");
    await sleep(20);
    child.kill("SIGINT");
    const r = await child;

    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(130);
    expect(freeze(), "the cgroup was left frozen").toBe("0");
    expect(String(r.stderr)).toContain(`run \`drill --state-dir ${h.stateDir} rollback\` again to finish it`);
    expect(String(r.stderr)).toContain(`thawed ${dir}`);
    rmSync(path.join(h.procfs, String(STUCK_PID)), { recursive: true, force: true });
  }, 60_000);
});
