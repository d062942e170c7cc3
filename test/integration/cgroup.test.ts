import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, rmSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { execa } from "execa";
import { UsageError } from "../../src/errors.js";
import { spawnInCgroup } from "../../src/cgroup/join.js";
import { readPids } from "../../src/cgroup/memoryFiles.js";
import { setupWorkerCgroup, type SetupResult } from "../../src/cgroup/setup.js";
import type { CgroupStatus } from "../../src/cgroup/status.js";
import { cgroupKey, hogsDir, writeHogRecord } from "../../src/cgroup/stateFiles.js";
import { resolveCgroupTarget } from "../../src/cgroup/target.js";
import { readProcessStat } from "../../src/host/process.js";
import { teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import type { SnakeCased } from "../../src/output.js";
import { cgroupDirsLeft, forceCleanup, realCgroupSkipReason, realRoots, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { writeState } from "../../src/drill/state.js";

const skipReason = realCgroupSkipReason();
if (skipReason) console.warn(`skipping real-cgroup tests: ${skipReason}`);
const noCgroupTools = spawnSync("which", ["cgcreate"]).status !== 0;
if (noCgroupTools) console.warn("skipping the cgcreate/cgdelete interop test: cgcreate not on PATH (apt-get install cgroup-tools)");

const M = 1024 * 1024;
const root = path.resolve(import.meta.dirname, "../..");
let stateDir = "";
const made: WorkerCgroup[] = [];
const children: ChildProcess[] = [];
const groups: number[] = [];
let counter = 0;

function uniqueName(): string {
  return `it${process.pid}x${counter++}`;
}

function drill(args: string[]) {
  return execa("node", [path.join(root, "bin/drill.js"), ...args], {
    env: { FORCE_COLOR: "0", DRILL_STATE_DIR: stateDir },
    reject: false,
    timeout: 60_000,
  });
}

function alive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

beforeAll(() => {
  stateDir = tempStateDir();
});

afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

afterEach(async () => {
  for (const child of children.splice(0)) if (alive(child)) child.kill("SIGKILL");
  for (const group of groups.splice(0)) {
    try {
      process.kill(-group, "SIGKILL");
    } catch {
      // the group is gone already
    }
  }
  for (const cg of made.splice(0)) await forceCleanup(cg, stateDir);
});

function track(name: string): WorkerCgroup {
  const cg = realWorkerCgroup(name);
  made.push(cg);
  return cg;
}

describe.skipIf(skipReason)("real cgroups under the test's own cgroup (--parent self)", () => {
  // Checks the paths the refused names would make, not the whole listing of the
  // test's own cgroup: files running beside this one (the quiet lane) make
  // their own cgroups there, pid-named, which are no concern of this test.
  it("RELIABILITY 1: bad names exit 2 and create nothing", async () => {
    const bads = ["..", "../x", "a/b", ".x", "", "tasks", "cgroup.procs", "memory.max", "x".repeat(300), "in\nfer"];
    // Every dir a bad name would make if let through (realWorkerCgroup does not validate): its own dir in
    // each hierarchy (the hybrid twin too) and the dirs between it and what exists (`a` for `a/b`), that is
    // `x` in the grandparent for `../x`, `.x`, the 300-char name, `in\nfer`.
    const wouldMake = new Set<string>();
    for (const bad of bads) {
      for (const d of realWorkerCgroup(bad).dirs) {
        for (let dir = d.dir; !existsSync(dir); dir = path.dirname(dir)) wouldMake.add(dir);
      }
    }
    expect([...wouldMake].map((dir) => path.basename(dir))).toEqual(expect.arrayContaining(["a", "x", ".x", "x".repeat(300), "in\nfer"]));
    // Where they would land (each hierarchy's parent and grandparent), listed before.
    const probe = realWorkerCgroup("probe");
    const parents = [...new Set(probe.dirs.flatMap((d) => [path.dirname(d.dir), path.dirname(path.dirname(d.dir))]))];
    const before = parents.map((p) => new Set(readdirSync(p)));
    const candidates = new Set([...wouldMake].map((dir) => path.basename(dir)));
    for (const bad of bads) {
      const result = await drill(["cgroup", "setup", "--name", bad, "--parent", "self", "--memory-max", "64M"]);
      expect(result.exitCode, `name ${JSON.stringify(bad)}`).toBe(2);
      expect(result.stderr).toMatch(/--name/);
    }
    // NUL cannot travel in argv: checked through the same validation the command uses.
    expect(() => resolveCgroupTarget({ procfs: "/proc", sysfs: "/sys" }, { name: "in\u0000fer", parent: "self" })).toThrow(UsageError);
    expect([...wouldMake].filter((dir) => existsSync(dir))).toEqual([]);
    const newEntries = parents.flatMap((p, i) => readdirSync(p).filter((entry) => !before[i]!.has(entry)).map((entry) => path.join(p, entry)));
    expect(newEntries.filter((entry) => candidates.has(path.basename(entry)) || bads.some((bad) => bad !== "" && path.basename(entry).startsWith(`drill-${bad}-`)))).toEqual([]);
    expect(existsSync(path.join(stateDir, "cgroups")) ? readdirSync(path.join(stateDir, "cgroups")) : []).toEqual([]);
  });

  it("a --parent that does not exist is a typo: exit 2 naming it and the missing dir, nothing created", async () => {
    const parent = `/drill-no-such-parent-${process.pid}/x`;
    const result = await drill(["cgroup", "setup", "--name", "probe", "--parent", parent, "--memory-max", "64M"]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`--parent ${parent}: no such cgroup`);
    expect(existsSync(path.join(stateDir, "cgroups")) ? readdirSync(path.join(stateDir, "cgroups")) : []).toEqual([]);
  });

  it("setup writes and reads back the limits, status reports them, teardown leaves no dir in any hierarchy", async () => {
    const name = uniqueName();
    const cg = track(name);
    const setup = await drill(["--json", "cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "128M", "--swap-max", "0"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    const result = JSON.parse(setup.stdout) as SnakeCased<SetupResult>;
    for (const write of result.writes.filter((w) => !w.file.endsWith("swappiness") && !w.file.endsWith("swap.max"))) {
      expect(write.read_back).toBe(String(128 * M));
    }
    const status = await drill(["--json", "cgroup", "status", "--name", name, "--parent", "self"]);
    expect(status.exitCode, status.stderr).toBe(0);
    const s = JSON.parse(status.stdout) as SnakeCased<CgroupStatus>;
    expect(s.created_by_drill).toBe(true);
    expect(s.memory).toMatchObject({ limit: 128 * M, effective_limit: 128 * M, swap_limit: 0, events: { oom_kill: 0 } });
    expect(s.tasks).toEqual([]);

    const text = await drill(["cgroup", "status", "--name", name, "--parent", "self"]);
    expect(text.stdout).toMatch(/limit +128MiB +effective 128MiB/);

    const down = await drill(["cgroup", "teardown", "--name", name, "--parent", "self"]);
    expect(down.exitCode, down.stderr).toBe(0);
    expect(cgroupDirsLeft(cg)).toEqual([]);
    const again = await drill(["cgroup", "teardown", "--name", name, "--parent", "self"]);
    expect(again.exitCode).toBe(0);
    expect(again.stdout).toMatch(/nothing to tear down/);
  });

  // QA: setup run again without --memory-max put its 2G default over a 64M limit, said only as "updated".
  it("setup again with a looser limit says what the limit was and warns that it went up (with advice only when --memory-max was left out); the same limit again says nothing", async () => {
    const name = uniqueName();
    track(name);
    const first = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "64M"]);
    expect(first.exitCode, first.stderr).toBe(0);
    expect(first.stdout).not.toContain("; was ");
    const again = await drill(["cgroup", "setup", "--name", name, "--parent", "self"]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stdout).toContain(`(read back ${2 * 1024 * M}; was ${64 * M})`);
    expect(again.stderr).toMatch(/warning: \S+memory\.(max|limit_in_bytes): the limit went up from 64(\.0)?MiB to 2(\.0)?GiB \(--memory-max, 2G when not given\): give --memory-max again/);
    const back = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "2G"]);
    expect(back.exitCode, back.stderr).toBe(0);
    expect(back.stderr).not.toContain("the limit went up");
    expect(back.stdout).not.toMatch(/read back \d+; was/);
    // Given, a raised limit is what was asked: said so, with no advice to give the flag.
    const down = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "512M"]);
    expect(down.exitCode, down.stderr).toBe(0);
    const up = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "2gib"]);
    expect(up.exitCode, up.stderr).toBe(0);
    expect(up.stderr).toMatch(/warning: \S+memory\.(max|limit_in_bytes): the limit went up from 512(\.0)?MiB to 2(\.0)?GiB, as --memory-max asked$/m);
    expect(up.stderr).not.toContain("give --memory-max again");
  });

  // QA: 500G on a 23.5 GiB host was set without a word; a drill in it can never show pressure.
  it("a limit above the host's RAM is set, with a warning naming both (the cgroup never fills)", async () => {
    const name = uniqueName();
    track(name);
    const memTotal = Number(/^MemTotal:\s+(\d+) kB$/m.exec(readFileSync("/proc/meminfo", "utf8"))![1]) * 1024;
    const gib = Math.ceil((2 * memTotal) / (1024 * M));
    const setup = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", `${gib}G`]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    expect(setup.stderr).toMatch(new RegExp(`warning: --memory-max ${gib}\\.0GiB is more than this host's RAM \\([\\d.]+GiB\\): the cgroup never reaches its limit`));
    const fits = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "128M"]);
    expect(fits.exitCode, fits.stderr).toBe(0);
    expect(fits.stderr).not.toContain("more than this host's RAM");
  });

  it("v1: a limit lowered below what the cgroup holds is said as that (its usage, the limit it keeps), not a bare EBUSY", async (ctx) => {
    const name = uniqueName();
    const cg = track(name);
    if (cg.memory === null) {
      console.warn("skipping the lowered-limit EBUSY case: this host's memory cgroup is v2, which reclaims and then OOM-kills; it has no EBUSY to explain");
      ctx.skip();
    }
    expect((await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "128M", "--swap-max", "0"])).exitCode).toBe(0);
    const hog = await drill(["inject", "--name", name, "--parent", "self", "--mode", "anon", "--size", "64M", "--hold", "30s", "--detach"]);
    expect(hog.exitCode, hog.stderr).toBe(0);
    const lower = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "16M", "--swap-max", "0"]);
    expect(lower.exitCode).toBe(1);
    expect(lower.stderr).toMatch(
      /^drill: cannot lower \S+\/memory\.limit_in_bytes to 16(\.0)?MiB: EBUSY: the cgroup holds 6\d(\.\d)?MiB and the kernel could not reclaim it below the new limit .*; stop what runs in it .* memory\.limit_in_bytes is still 128(\.0)?MiB$/m,
    );
  });

  it("RELIABILITY 2: an existing cgroup with a foreign task is refused by setup and teardown, never adopted", async () => {
    const name = uniqueName();
    const cg = track(name);
    mkdirSync(cg.limits.dir);
    const foreign = spawn("sleep", ["60"], { stdio: "ignore" });
    children.push(foreign);
    await new Promise((r) => foreign.once("spawn", r));
    writeFileSync(path.join(cg.limits.dir, "cgroup.procs"), String(foreign.pid));

    const setup = await drill(["cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "64M"]);
    expect(setup.exitCode).toBe(3);
    expect(setup.stderr).toContain(String(foreign.pid));
    expect(setup.stderr).toMatch(/refusing to adopt/);
    const teardown = await drill(["cgroup", "teardown", "--name", name, "--parent", "self"]);
    expect(teardown.exitCode).toBe(3);
    expect(teardown.stderr).toMatch(/not created by drill/);

    expect(alive(foreign)).toBe(true);
    const pids = readPids(path.join(cg.limits.dir, "cgroup.procs"));
    expect(pids.ok && pids.value).toEqual([foreign.pid]);
    expect(readFileSync(path.join(cg.limits.dir, cg.limits.version === 2 ? "memory.max" : "memory.limit_in_bytes"), "utf8").trim()).not.toBe(String(64 * M));
  });

  it("RELIABILITY 7 + 5 + 6: a forking, SIGTERM-ignoring hog is emptied within 10 s; decoys and a reused pid survive", async () => {
    const name = uniqueName();
    const cg = track(name);
    setupWorkerCgroup(realRoots(), cg, stateDir, { memoryMax: 64 * M, swapMax: 0 });

    const hog = spawnInCgroup(cg, "/bin/sh", ["-c", 'trap "" TERM; (trap "" TERM; sleep 300) & (sh -c "sleep 300") & sleep 300', "packed-hog"], { stdio: "ignore" });
    children.push(hog);
    // Decoys outside the cgroup whose command line says `packed` (the runbook's pgrep -f would kill them).
    // Its own process group: the cleanup kills the group, or the shell's sleep outlives the test.
    const decoy = spawn("/bin/sh", ["-c", "sleep 300; : packed"], { stdio: "ignore", detached: true });
    children.push(decoy);
    groups.push(decoy.pid!);
    // A hog record whose pid now belongs to the decoy (start time differs): must not be signalled.
    await new Promise((r) => setTimeout(r, 300));
    const decoyId = readProcessStat(realRoots(), decoy.pid!);
    expect(decoyId.ok).toBe(true);
    writeHogRecord(path.join(hogsDir(stateDir), `${cgroupKey(cg)}-reused.json`), {
      kind: "drill-hog",
      cgroupKey: cgroupKey(cg),
      name,
      mode: "anon",
      pid: decoy.pid!,
      startTime: decoyId.ok ? decoyId.value.startTime + 1 : 1,
      file: null,
      logFile: null,
      sizeBytes: 64 * M,
      holdMs: 1000,
      detached: true,
      startedAt: new Date().toISOString(),
    });
    const inside = readPids(cg.procsFiles[0]!);
    expect(inside.ok && inside.value.length).toBeGreaterThanOrEqual(3);
    const parentProcs = path.join(path.dirname(cg.limits.dir), "cgroup.procs");
    const parentBefore = readPids(parentProcs);

    const started = Date.now();
    const result = await teardownWorkerCgroup(realRoots(), cg, { stateDir });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(result.kind).toBe("removed");
    if (result.kind === "removed") expect(result.killed.length).toBeGreaterThanOrEqual(3);
    expect(cgroupDirsLeft(cg)).toEqual([]);
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(hog)).toBe(false);
    expect(alive(decoy)).toBe(true);
    // Nothing was moved into the parent: its task list did not gain the hog's pids.
    const parentAfter = readPids(parentProcs);
    expect(parentBefore.ok, `${parentProcs} unreadable before teardown`).toBe(true);
    expect(parentAfter.ok, `${parentProcs} unreadable after teardown`).toBe(true);
    const parentPids = parentAfter.ok ? parentAfter.value : [];
    for (const pid of inside.ok ? inside.value : []) expect(parentPids, `pid ${pid} moved to the parent`).not.toContain(pid);
    expect(readdirSync(hogsDir(stateDir)).filter((f) => f.startsWith(cgroupKey(cg)))).toEqual([]);
  });

  it.skipIf(noCgroupTools)("reads a cgcreate'd cgroup; cgdelete + teardown of drill's own leaves nothing", async () => {
    const name = uniqueName();
    const cg = track(name);
    expect(spawnSync("cgcreate", ["-g", `memory:${cg.limits.cgroupPath}`]).status).toBe(0);
    expect(spawnSync("cgset", ["-r", `memory.${cg.limits.version === 1 ? "limit_in_bytes" : "max"}=${100 * M}`, cg.limits.cgroupPath]).status).toBe(0);
    const status = await drill(["--json", "cgroup", "status", "--name", name, "--parent", "self"]);
    expect(status.exitCode, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ created_by_drill: false, memory: { limit: 100 * M } });
    expect(spawnSync("cgdelete", ["-g", `memory:${cg.limits.cgroupPath}`]).status).toBe(0);

    const name2 = uniqueName();
    const cg2 = track(name2);
    expect((await drill(["cgroup", "setup", "--name", name2, "--parent", "self", "--memory-max", "64M"])).exitCode).toBe(0);
    expect(spawnSync("cgdelete", ["-g", `memory:${cg2.limits.cgroupPath}`]).status).toBe(0);
    const down = await drill(["cgroup", "teardown", "--name", name2, "--parent", "self"]);
    expect(down.exitCode, down.stderr).toBe(0);
    expect(cgroupDirsLeft(cg2)).toEqual([]);
  });
  // QA (S5): inject exited 0 in a cgroup made by plain mkdir (the v1 memory dir and its unified twin), its hog inside.
  it("inject and worker refuse a cgroup made by plain mkdir (every dir, a limit in it): exit 3 in one line, nothing joins", async () => {
    const name = uniqueName();
    const cg = track(name);
    for (const dir of cg.dirs) mkdirSync(dir.dir);
    writeFileSync(path.join(cg.limits.dir, cg.limits.version === 2 ? "memory.max" : "memory.limit_in_bytes"), String(64 * M));
    const inject = await drill(["inject", "--name", name, "--parent", "self", "--size", "16M", "--mode", "anon", "--hold", "1s"]);
    // A Redis nobody listens on: the worker is refused before it looks for one.
    const worker = await drill(["--redis", "redis://127.0.0.1:1", "worker", "--name", name, "--parent", "self", "--weights", "16M", "--idle-exit", "1s"]);
    for (const [r, command] of [[inject, "inject"], [worker, "worker"]] as const) {
      expect(r.exitCode, r.stderr).toBe(3);
      expect(r.stderr).toMatch(
        new RegExp(`^drill: cgroup ${name} was not created by drill: \\S+ already exists and drill did not create it \\(no marker in ${stateDir}/cgroups\\); refusing to run ${command} in it\\. If drill made it with another --state-dir, give that one; else pick another --name$`),
      );
    }
    for (const dir of cg.dirs) expect(readPids(path.join(dir.dir, "cgroup.procs"))).toEqual({ ok: true, value: [] });
  });

  // QA (S5): a worker run by hand joined the cgroup of a drill that was up, and that drill's rollback killed it unsaid.
  it("the worker cgroup of a drill that is up: refused by hand (exit 3, naming the drill); that run's own hog (DRILL_RUN_ID) and --force join it", async () => {
    const name = uniqueName();
    const cg = realWorkerCgroup(name);
    const upDir = tempStateDir();
    const runId = `s5drill-${process.pid}`;
    const inUp = (args: string[], env: Record<string, string> = {}) =>
      execa("node", [path.join(root, "bin/drill.js"), "--state-dir", upDir, ...args], { env: { FORCE_COLOR: "0", ...env }, reject: false, timeout: 60_000 });
    try {
      setupWorkerCgroup(realRoots(), cg, upDir, { memoryMax: 64 * M, swapMax: 0, owner: { drill: "s5drill", runId } });
      writeState(upDir, {
        version: 1,
        name: "s5drill",
        runId,
        drillFile: "drills/smoke.yaml",
        createdAt: new Date().toISOString(),
        phase: "running",
        queue: "jobs",
        redis: { url: "", embedded: null },
        cgroup: { name, parent: "self", dirs: cg.dirs.map((d) => d.dir) },
        processes: [],
        fileDir: null,
        owner: { pid: process.pid, startTime: null },
      });
      const hog = ["--json", "inject", "--name", name, "--parent", "self", "--size", "16M", "--mode", "anon", "--hold", "1s"];
      const byHand = await inUp(hog);
      const worker = await inUp(["--redis", "redis://127.0.0.1:1", "worker", "--name", name, "--parent", "self", "--weights", "16M", "--idle-exit", "1s"]);
      for (const [r, what] of [[byHand, "a hog"], [worker, "a worker"]] as const) {
        expect(r.exitCode, r.stderr).toBe(3);
        expect(r.stderr).toContain(`${cg.dirs.map((d) => d.dir).join(" and ")} ${cg.dirs.length > 1 ? "are" : "is"} the worker cgroup of drill s5drill (run ${runId}), which is up (running); refusing to run ${what} started by hand in it`);
        expect(r.stderr).toContain(`Run drill --state-dir ${upDir} rollback --name s5drill first, or pick another --name; --force joins it anyway`);
        expect(r.stderr.trim().split("\n")).toHaveLength(1);
      }
      for (const dir of cg.dirs) expect(readPids(path.join(dir.dir, "cgroup.procs"))).toEqual({ ok: true, value: [] });

      // What up spawns carries its run id: its hog joins as before.
      const own = await inUp(hog, { DRILL_RUN_ID: runId });
      expect(own.exitCode, own.stderr).toBe(0);
      expect(JSON.parse(own.stdout)).toMatchObject({ joined: true });
      expect(own.stderr).not.toContain("--force");
      const forced = await inUp([...hog, "--force"]);
      expect(forced.exitCode, forced.stderr).toBe(0);
      expect(JSON.parse(forced.stdout)).toMatchObject({ joined: true });
      expect(forced.stderr).toContain(`drill inject: warning: --force: inject joins cgroup ${name}, the worker cgroup of drill s5drill (run ${runId}), which is up (running): its rollback kills this hog with the drill's own`);
    } finally {
      await forceCleanup(cg, upDir);
      rmSync(upDir, { recursive: true, force: true });
    }
    expect(cgroupDirsLeft(cg)).toEqual([]);
  });
});
