import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cgroupDirsLeft, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { NOBODY, nobodyCannotRun } from "../helpers/nobody.js";

// QA: `drill cgroup teardown` run as a user stopped at the first task it might
// not signal (root's): exit 4 naming that one owner, every task after it left
// unsignalled. Here root sets up a real cgroup (--parent self) and puts two
// root `sleep`s and one of nobody's in it; the teardown drops to nobody with
// setpriv: it stops nobody's, names both of root's, and leaves the cgroup.
const NAME = `nrteardown${process.pid}`;

let reason: string | null = realCgroupSkipReason();
let tmp = "";
let stateDir = "";
const sleeps: ChildProcess[] = [];

beforeAll(async () => {
  reason ??= await nobodyCannotRun();
  if (reason) {
    console.warn(`skipping: ${reason}`);
    return;
  }
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-nonroot-teardown-"));
  chmodSync(tmp, 0o755);
  stateDir = path.join(tmp, "state");
  const setup = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", NAME, "--memory-max", "64M"]);
  if (setup.exitCode !== 0) throw new Error(`cgroup setup: ${setup.stdout}${setup.stderr}`);
  // Root's records, readable by nobody (never writable: a record nobody could write is not trusted).
  await execa("chmod", ["-R", "a+rX", stateDir]);
  for (const asNobody of [false, true, false]) {
    const child = asNobody ? spawn("setpriv", [...NOBODY, "sleep", "600"], { stdio: "ignore" }) : spawn("sleep", ["600"], { stdio: "ignore" });
    await new Promise((resolve) => child.once("spawn", resolve));
    sleeps.push(child);
  }
  // setpriv execs sleep in place: the pid is the sleep's, as nobody.
  for (const dir of realWorkerCgroup(NAME).dirs) for (const child of sleeps) writeFileSync(path.join(dir.dir, "cgroup.procs"), `${child.pid}\n`);
});

afterAll(async () => {
  // Each sleep gone before the teardown (it removes an empty cgroup): its exit seen, not a wait.
  await Promise.all(
    sleeps.filter((child) => child.exitCode === null && child.signalCode === null).map((child) => {
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      return gone;
    }),
  );
  if (reason === null && stateDir) {
    await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", NAME]);
    expect(cgroupDirsLeft(realWorkerCgroup(NAME))).toEqual([]);
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** `drill cgroup teardown` of the cgroup, run as nobody (setpriv), with `globals` first. */
const teardownAsNobody = (...globals: string[]) =>
  execa("setpriv", [...NOBODY, process.execPath, drillBin, ...globals, "--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", NAME], {
    cwd: os.tmpdir(),
    reject: false,
    timeout: 30_000,
    stdin: "ignore",
    env: { FORCE_COLOR: "0", NO_COLOR: "1", HOME: os.tmpdir(), PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
  });

describe("cgroup teardown as nobody of a cgroup with root's tasks", () => {
  it("stops every task it may, names each of root's (pid, owner, run as root), exit 4, the cgroup left and said so", async (ctx) => {
    if (reason) return ctx.skip();
    const [root1, mine, root2] = sleeps.map((c) => c.pid!);
    const r = await teardownAsNobody();
    const stderr = String(r.stderr);
    expect(r.exitCode, String(r.stdout) + stderr).toBe(4);
    expect(stderr).not.toMatch(/^\s+at /m);
    const dirs = realWorkerCgroup(NAME).dirs.map((d) => d.dir);
    const refused = "EPERM (not permitted: the process is uid 0's (root): only its owner or root can stop it; run as root)";
    expect(stderr.trim()).toMatch(/^drill: 2 tasks left inside that this user may not signal: /);
    for (const pid of [root1, root2]) expect(stderr).toContain(`pid ${pid} (sleep) in ${dirs.join(" and ")}: ${refused}`);
    expect(stderr).toContain(`${dirs.join(" and ")} left in place (a cgroup cannot be removed with tasks inside): run this again as root to finish it`);
    expect(stderr).not.toContain(`pid ${mine} `);
    // nobody's sleep was stopped; root's two were not signalled, and the cgroup is still there.
    const exited = sleeps[1]!;
    await new Promise((resolve) => (exited.exitCode !== null || exited.signalCode !== null ? resolve(null) : exited.once("exit", resolve)));
    expect(exited.signalCode).toBe("SIGTERM");
    for (const child of [sleeps[0]!, sleeps[2]!]) expect(child.exitCode === null && child.signalCode === null, `root's ${child.pid} signalled`).toBe(true);
    for (const dir of dirs) expect(existsSync(dir)).toBe(true);
  }, 60_000);

  // QA: its --json document had no field for the tasks it may not signal (the text names each, with whose).
  it("--json: the document names root's tasks in `refused` (why: whose) and `still_inside`, none in `killed`", async (ctx) => {
    if (reason) return ctx.skip();
    const [root1, , root2] = sleeps.map((c) => c.pid!);
    const r = await teardownAsNobody("--json");
    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(4);
    const doc = JSON.parse(String(r.stdout)) as { kind: string; killed: unknown[]; refused?: Array<{ pid: number; why: string; outcome: string }>; still_inside?: Array<{ pid: number; signalled: boolean }> };
    expect(doc.kind).toBe("failed");
    expect(doc.killed).toEqual([]);
    const refused = "EPERM (not permitted: the process is uid 0's (root): only its owner or root can stop it; run as root)";
    expect(doc.refused?.map((t) => [t.pid, t.why, t.outcome]).sort()).toEqual([[root1, refused, "still_inside"], [root2, refused, "still_inside"]].sort());
    expect(doc.still_inside?.map((t) => [t.pid, t.signalled]).sort()).toEqual([[root1, false], [root2, false]].sort());
  }, 60_000);
});
