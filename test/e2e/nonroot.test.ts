import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { drillBin, repoRoot } from "../helpers/cli.js";

// RELIABILITY 18: a non-root run of a command that must write a kernel or
// state file fails with one line naming the file and what to do, never a
// stack trace. Run as root, the test drops to `nobody` with setpriv.
const NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"];

async function asNobody(args: string[]): Promise<{ exitCode: number; stderr: string; stdout: string }> {
  const r = await execa("setpriv", [...NOBODY, process.execPath, drillBin, ...args], {
    cwd: os.tmpdir(),
    reject: false,
    timeout: 30_000,
    stdin: "ignore",
    // An unreachable Redis: a failing command must never reach the host's 127.0.0.1:6379.
    env: { FORCE_COLOR: "0", NO_COLOR: "1", HOME: os.tmpdir(), DRILL_REDIS_URL: "redis://127.0.0.1:1" },
  });
  return { exitCode: r.exitCode ?? -1, stderr: String(r.stderr ?? ""), stdout: String(r.stdout ?? "") };
}

async function skipReason(): Promise<string | null> {
  if (process.getuid?.() !== 0) return "not root: cannot drop to nobody (a non-root run of the suite is itself the case)";
  const probe = await execa("setpriv", [...NOBODY, process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(path.join(repoRoot, "dist", "bundle", "main.js"))})`], { reject: false });
  if (probe.exitCode !== 0) return `nobody cannot run the built binary under ${repoRoot} (setpriv or read access missing: ${String(probe.stderr).split("\n")[0]})`;
  return null;
}

let reason: string | null = null;
let tmp = "";
beforeAll(async () => {
  reason = await skipReason();
  if (reason) console.warn(`skipping the non-root cases: ${reason}`);
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-nonroot-"));
  chmodSync(tmp, 0o755);
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** One line on stderr, no stack frames, no "unexpected error". */
function expectOneLine(stderr: string): string {
  const lines = stderr.split("\n").filter((l) => l.trim() !== "");
  expect(lines.filter((l) => /^\s+at /.test(l))).toEqual([]);
  expect(stderr).not.toMatch(/unexpected error/);
  expect(lines).toHaveLength(1);
  return lines[0]!;
}

describe("non-root runs (RELIABILITY 18)", () => {
  it("cgroup setup names the cgroup directory it could not create and says to run as root", async (ctx) => {
    if (reason) return ctx.skip();
    const stateDir = path.join(tmp, "writable");
    mkdirSync(stateDir);
    chmodSync(stateDir, 0o777);
    const r = await asNobody(["--state-dir", stateDir, "cgroup", "setup", "--name", "nr1", "--memory-max", "64M", "--parent", "self"]);
    expect(r.exitCode).toBe(1);
    expect(expectOneLine(r.stderr)).toMatch(/^drill: cannot create \/sys\/fs\/cgroup\/\S*nr1: EACCES \(permission denied: run as root/);
  });

  it("up names the state directory it could not create, before touching anything", async (ctx) => {
    if (reason) return ctx.skip();
    const rootOnly = path.join(tmp, "root-only");
    mkdirSync(rootOnly);
    chmodSync(rootOnly, 0o700);
    const r = await asNobody(["--state-dir", rootOnly, "up"]);
    expect(r.exitCode).toBe(1);
    expect(expectOneLine(r.stderr)).toBe(`drill: cannot create the state directory ${path.join(rootOnly, "smoke")}: EACCES (permission denied: run as root, or give --state-dir a directory you can write)`);
  });

  it("doctor refuses (exit 3) and says root is needed", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["doctor"]);
    expect(r.exitCode).toBe(3);
    expect(expectOneLine(r.stderr)).toMatch(/^drill: doctor refused: root: .*run as root/);
  });

  it("rollback of a root hog it may read but not signal: exit 4 naming the pid and EPERM, the hog alive, its record kept (QA: kill EPERM stack trace)", async (ctx) => {
    if (reason) return ctx.skip();
    const stateDir = path.join(tmp, "readable");
    mkdirSync(path.join(stateDir, "hogs"), { recursive: true });
    chmodSync(stateDir, 0o755);
    const hog = spawn("sleep", ["300"], { stdio: "ignore" });
    try {
      await new Promise((r) => hog.once("spawn", r));
      const stat = readProcessStat(new HostRoots(), hog.pid!);
      if (!stat.ok) throw new Error(`no stat of the hog ${hog.pid}`);
      const record = path.join(stateDir, "hogs", "nrhog-0123456789-01234567.json");
      const fields = { kind: "drill-hog", cgroupKey: "nrhog-0123456789", name: "nrhog", mode: "anon", pid: hog.pid, startTime: stat.value.startTime, file: null, logFile: null, sizeBytes: 1, holdMs: 1, detached: true, startedAt: new Date().toISOString() };
      writeFileSync(record, JSON.stringify(fields), { mode: 0o644 });
      const r = await asNobody(["--state-dir", stateDir, "rollback"]);
      expect(r.exitCode, r.stdout + r.stderr).toBe(4);
      expect(r.stdout).toContain(`FAIL stop hog: hog pid ${hog.pid}: cannot signal it: EPERM (not permitted: the process is uid 0's (root): only its owner or root can stop it; run as root); its record ${record} kept`);
      expect(expectOneLine(r.stderr)).toMatch(/^drill: rollback incomplete; left: cgroup nrhog: hog pid \d+: cannot signal it: EPERM/);
      expect(hog.exitCode === null && hog.signalCode === null).toBe(true);
      expect(existsSync(record)).toBe(true);
    } finally {
      hog.kill("SIGKILL");
    }
  });

  it("rollback of a root record it may list but not read says whose it is and to run as root, not a bare EACCES (QA)", async (ctx) => {
    if (reason) return ctx.skip();
    const stateDir = path.join(tmp, "listable");
    mkdirSync(path.join(stateDir, "cgroups"), { recursive: true });
    chmodSync(stateDir, 0o755);
    chmodSync(path.join(stateDir, "cgroups"), 0o755);
    const record = path.join(stateDir, "cgroups", "nrrec-0123456789.json");
    writeFileSync(record, "{}", { mode: 0o600 });
    const r = await asNobody(["--state-dir", stateDir, "rollback"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`FAIL read record: cannot read ${record}: EACCES (permission denied: ${record} is root's, mode 0600: run as root); what it records`);
  });

  it("rollback with nothing to do does not claim no drill runs on the host: it could not look at root's processes (QA AB 5)", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["--state-dir", path.join(tmp, "empty"), "rollback"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`^nothing to roll back: no drill in ${path.join(tmp, "empty")}, and no process of a drill up among the processes this user can look at; could not look at [1-9]\\d* process(es)? of other users .*: run as root to see drills of other users$`),
    );
    const json = await asNobody(["--json", "--state-dir", path.join(tmp, "empty"), "rollback"]);
    expect((JSON.parse(json.stdout) as { unseen_processes: number }).unseen_processes).toBeGreaterThan(0);
  });
});

// QA: as nobody, watch said "no cgroup infer to sample: /proc/self/cgroup:
// cannot read state file …: EACCES: permission denied, open '…'" (the wrong
// file first, node's raw error after), gate blamed /proc/self/cgroup too,
// and cgroup status/setup/teardown and inject printed the raw EACCES. What
// nobody cannot read is root's state dir: its record dirs are 0700.
describe("a state dir root made (its cgroups/ and hogs/ 0700), used by nobody", () => {
  let rootState = "";
  let records = "";
  beforeAll(() => {
    rootState = path.join(tmp, "root-state");
    records = path.join(rootState, "cgroups");
    mkdirSync(rootState);
    chmodSync(rootState, 0o755);
    for (const dir of [records, path.join(rootState, "hogs")]) {
      mkdirSync(dir);
      chmodSync(dir, 0o700);
    }
  });
  const denied = (dir = records) => `EACCES \\(permission denied: ${dir} is root's, mode 0700: run as root`;
  const marker = (name: string) => `${records}/${name}-[0-9a-f]{10}\\.json`;

  it.for([
    ["no --parent", []],
    ["--parent self", ["--parent", "self"]],
  ] as const)("watch --once (%s) names the record it cannot read and what to do; cg_* null, each in missing with that file", async ([, parent], ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["--json", "--state-dir", rootState, "watch", "--once", "--name", "nrw", ...parent]);
    expect(r.exitCode, r.stderr).toBe(0);
    const hint = r.stderr.split("\n").filter((l) => l.startsWith("watch: cannot tell where"));
    expect(hint).toHaveLength(1);
    expect(hint[0]).toMatch(
      new RegExp(`^watch: cannot tell where cgroup nrw is: ${marker("nrw")}: ${denied()}, or give --state-dir a directory of your own and --name/--parent of a cgroup you can read\\); its cg_\\* fields stay null$`),
    );
    expect(r.stderr).not.toContain("/proc/self/cgroup");
    const sample = JSON.parse(r.stdout) as Record<string, unknown> & { missing: Array<{ field: string; file: string; reason: string }> };
    const cgFields = ["cg_psi_mem_some_avg10", "cg_psi_mem_some_rate", "cg_swap_current", "cg_mem_current", "cg_mem_max", "cg_mem_peak", "cg_oom_kill"];
    for (const field of cgFields) expect(sample[field], field).toBeNull();
    const cgMissing = sample.missing.filter((m) => m.field.startsWith("cg_"));
    expect(cgMissing.map((m) => m.field).sort()).toEqual([...cgFields].sort());
    for (const m of cgMissing) {
      expect(m.file).toMatch(new RegExp(`^${marker("nrw")}$`));
      expect(m.reason).toMatch(new RegExp(`^${denied()}`));
    }
  });

  it("gate names the record it cannot read, not /proc/self/cgroup", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["--state-dir", rootState, "gate", "--dry-run", "--duration", "1s", "--name", "nrg"]);
    const hint = r.stderr.split("\n").filter((l) => l.startsWith("gate: "));
    expect(hint, r.stderr).toHaveLength(1);
    expect(hint[0]).toMatch(new RegExp(`^gate: cannot tell where cgroup nrg is: ${marker("nrg")}: ${denied()}, or give .*\\); it decides on host signals alone$`));
  });

  it.for([
    ["cgroup status", ["cgroup", "status"]],
    ["--json cgroup status", ["--json", "cgroup", "status"]],
    ["cgroup setup", ["cgroup", "setup", "--memory-max", "64M"]],
    ["cgroup teardown", ["cgroup", "teardown"]],
    ["--json cgroup teardown", ["--json", "cgroup", "teardown"]],
    ["inject", ["inject", "--size", "1M", "--hold", "1s"]],
  ] as const)("%s: exit 1, one line naming the record and that root's it is; --json stdout JSON or nothing", async ([, args], ctx) => {
    if (reason) return ctx.skip();
    const [json, rest] = args[0] === "--json" ? [["--json"], args.slice(1)] : [[], args];
    const r = await asNobody([...json, "--state-dir", rootState, ...rest, "--name", "nrc", "--parent", "self"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(1);
    const line = new RegExp(`^drill: cannot read ${marker("nrc")}: ${denied()}\\)$`);
    expect(expectOneLine(r.stderr)).toMatch(line);
    if (json.length === 0 || r.stdout.trim() === "") return;
    const doc = JSON.parse(r.stdout) as { left: string[] };
    expect(doc.left).toEqual([expect.stringMatching(new RegExp(`^cgroup nrc: cannot read ${marker("nrc")}: ${denied()}\\)$`))]);
  });

  it("rollback cannot list the records: exit 4 naming each dir once, whose it is and to run as root, no 'cgroup ?'; --json still JSON (QA)", async (ctx) => {
    if (reason) return ctx.skip();
    const hogs = path.join(rootState, "hogs");
    const left = (dir: string, held: string) => `cannot read ${dir}: ${denied(dir)}\\); ${held} recorded there, if any, are left as they are`;
    const cgroupsLeft = left(records, "the cgroups drill cgroup setup");
    const hogsLeft = left(hogs, "the hogs drill inject --detach");
    const r = await asNobody(["--json", "--state-dir", rootState, "rollback"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    const doc = JSON.parse(r.stdout) as { nothing_to_roll_back: boolean; left: string[] };
    expect(doc.nothing_to_roll_back).toBe(false);
    expect(doc.left).toEqual([expect.stringMatching(new RegExp(`^${cgroupsLeft}$`)), expect.stringMatching(new RegExp(`^${hogsLeft}$`))]);
    const text = await asNobody(["--state-dir", rootState, "rollback"]);
    expect(text.exitCode, text.stdout + text.stderr).toBe(4);
    expect(text.stdout).not.toContain("cgroup ?");
    expect(text.stdout).toMatch(
      new RegExp(`^rollback the records in ${rootState} of drill cgroup setup and inject --detach \\(in no drill\\):\n  FAIL read records: ${cgroupsLeft}\n  FAIL read records: ${hogsLeft}$`),
    );
  });
});
