import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa, type ResultPromise } from "execa";
import { afterEach, describe, expect, it } from "vitest";
import { makeFakeHost, STUCK_PID, stuckFakeCgroup, v2MemoryFiles, type FakeHost } from "../helpers/cgroupFixtures.js";
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
 *
 * The command it named to finish the teardown lacked --sysfs/--procfs: copied,
 * it tore down the real /sys's cgroup of that name, not the tree the run was
 * given. And with --json it printed nothing on stdout: a script got neither
 * what was done nor that it was interrupted. Now the command carries every
 * flag that selects the cgroup, and --json prints the teardown's document,
 * `kind` "interrupted", with `left` and `interrupted` as rollback's.
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

function startTeardown(h: FakeHost, name: string, json = false): { run: ResultPromise; stderr: () => string } {
  const globals = ["--sysfs", h.sysfs, "--procfs", h.procfs, "--state-dir", h.stateDir, ...(json ? ["--json"] : [])];
  const run = execa("node", [drillBin, ...globals, "cgroup", "teardown", "--name", name, "--parent", "self"], {
    reject: false,
    timeout: 60_000,
    env: { FORCE_COLOR: "0", NO_COLOR: "1" },
  });
  let err = "";
  run.stderr!.on("data", (chunk: Buffer) => (err += chunk.toString()));
  return { run, stderr: () => err };
}

/** The command that finishes the teardown: it selects the same fake tree, state dir and cgroup. */
const rerun = (h: FakeHost, name: string) => `drill --state-dir ${h.stateDir} --sysfs ${h.sysfs} --procfs ${h.procfs} cgroup teardown --name ${name} --parent self`;

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
    expect(stderr).toContain(`run \`${rerun(h, "tdfrz")}\` again to finish it`);
    // No --json, no document; but what it did before the stop is said, as when it finishes (QA: nothing on stdout).
    expect(String(r.stdout)).toBe(`signalled ${STUCK_PID} (hog) in ${dir}; still inside`);
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
    expect(String(r.stderr)).toContain(`run \`${rerun(h, "tdfrz2")}\` again to finish it`);
  }, 60_000);

  it.each([
    ["SIGTERM", 143],
    ["SIGINT", 130],
  ] as const)("--json, stopped by %s: exit %d with the teardown's document, marked interrupted where it stopped, naming the command that finishes it", async (signal, code) => {
    host = makeFakeHost("v2");
    const h = host;
    const name = signal === "SIGTERM" ? "tdfrzj" : "tdfrzj2";
    const dir = stuckCgroup(h, name);
    const freeze = () => readFileSync(path.join(dir, "cgroup.freeze"), "utf8").trim();
    const { run, stderr } = startTeardown(h, name, true);
    child = run;
    await until(run, () => freeze() === "1");
    expect(freeze(), "teardown never froze the cgroup").toBe("1");
    run.kill(signal);
    if (signal === "SIGINT") {
      await until(run, () => stderr().includes("finishing the teardown"));
      run.kill("SIGINT");
    }
    const r = await run;

    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(code);
    expect(freeze(), "the cgroup was left frozen").toBe("0");
    const lines = String(r.stdout).trim().split("\n");
    expect(lines, String(r.stdout)).toHaveLength(1);
    const doc = JSON.parse(lines[0]!) as Record<string, unknown>;
    const command = rerun(h, name);
    expect(doc).toEqual({
      kind: "interrupted",
      removed: [],
      already_gone: [],
      // Sent SIGTERM, then SIGKILL, though it never left (the fake pid is no process): signalled, still inside, not killed.
      killed: [],
      signalled: [{ pid: STUCK_PID, comm: "hog", dir, outcome: "still_inside" }],
      refused: [],
      still_inside: [{ pid: STUCK_PID, comm: "hog", dir, signalled: true, state: null, why: "stuck (no /proc entry to signal: exiting, or of another pid namespace)" }],
      unlinked: [],
      method: [],
      forced: null,
      queues_served: [],
      left: [`cgroup ${name}: teardown interrupted by ${signal} while killing the tasks left in it; run ${command} again to finish it`],
      interrupted: { signal, cgroup: name, stage: "kill", stage_cgroup: name, command },
    });
    expect(String(r.stderr)).toContain(`thawed ${dir}`);
  }, 60_000);
});

// QA: a teardown that did not finish (refused, or tasks that would not leave) printed nothing on stdout with --json.
describe("drill --json cgroup teardown that does not finish", () => {
  it("refused (a cgroup drill did not create): its document, kind refused, the reason in left, exit 3", async () => {
    host = makeFakeHost("v2");
    host.cgroup("", "/process_api/abc/notours", v2MemoryFiles({ "cgroup.procs": "" }));
    const { run } = startTeardown(host, "notours", true);
    const r = await run;
    const [stdout, stderr] = [String(r.stdout), String(r.stderr)];
    expect(r.exitCode, stderr).toBe(3);
    const doc = JSON.parse(stdout) as { kind: string; removed: string[]; killed: unknown[]; left: string[]; interrupted: unknown };
    expect(doc).toMatchObject({ kind: "refused", removed: [], killed: [], interrupted: null });
    expect(doc.left).toEqual([expect.stringMatching(/^cgroup notours: .*not created by drill/)]);
    expect(stderr).toContain("not created by drill");
  });
});
