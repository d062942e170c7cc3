import { readdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import { makeFakeHost, STUCK_PID, stuckFakeCgroup, type FakeHost } from "../helpers/cgroupFixtures.js";
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
 *
 * The command it named to finish the rollback lacked --sysfs/--procfs (and
 * --redis): copied, it rolled back the real host's cgroups, not the tree the
 * run was given. Now it carries every flag that selects what to act on.
 */


let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

describe("rollback stopped by a second Ctrl-C while the cgroup is frozen (fake v2 tree without cgroup.kill)", () => {
  // No drill and no --queue: this rollback never connects to the Redis named, only names it.
  const redis = "redis://127.0.0.1:1/3";
  it.each([
    ["", []],
    [" (--json, --redis)", ["--json", "--redis", redis]],
  ] as const)("exits 130 saying to run rollback again on the same tree, and leaves the cgroup thawed%s", async (_label, extra) => {
    host = makeFakeHost("v2");
    const h = host;
    const dir = stuckFakeCgroup(h, "frz");
    expect(readdirSync(dir)).not.toContain("cgroup.kill");

    const child = execa("node", [drillBin, "--sysfs", h.sysfs, "--procfs", h.procfs, "--state-dir", h.stateDir, ...extra, "rollback"], {
      reject: false,
      timeout: 60_000,
      env: { FORCE_COLOR: "0", NO_COLOR: "1" },
    });
    const freeze = () => readFileSync(path.join(dir, "cgroup.freeze"), "utf8").trim();
    // After SIGTERM's grace, the first sweep freezes the cgroup.
    const deadline = Date.now() + 20_000;
    while (freeze() !== "1" && child.exitCode === null && Date.now() < deadline) await sleep(5);
    expect(freeze(), "rollback never froze the cgroup").toBe("1");
    let err = "";
    child.stderr!.on("data", (chunk: Buffer) => (err += chunk.toString()));
    child.kill("SIGINT");
    // Two signals a few ms apart can arrive as one: the second only once the first is acknowledged.
    const acked = Date.now() + 20_000;
    while (!err.includes("Ctrl-C again to stop anyway") && child.exitCode === null && Date.now() < acked) await sleep(5);
    expect(err, "the first Ctrl-C was not acknowledged").toContain("Ctrl-C again to stop anyway");
    child.kill("SIGINT");
    const r = await child;

    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(130);
    expect(freeze(), "the cgroup was left frozen").toBe("0");
    const command = `drill --state-dir ${h.stateDir} --sysfs ${h.sysfs} --procfs ${h.procfs}${extra.length > 0 ? ` --redis ${redis}` : ""} rollback`;
    expect(String(r.stderr)).toContain(`run \`${command}\` again to finish it`);
    if (extra.length > 0) expect((JSON.parse(String(r.stdout)) as { interrupted: { command: string } }).interrupted.command).toBe(command);
    expect(String(r.stderr)).toContain(`thawed ${dir}`);
    rmSync(path.join(h.procfs, String(STUCK_PID)), { recursive: true, force: true });
  }, 60_000);
});
