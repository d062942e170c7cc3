import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, watch, writeFileSync, type FSWatcher } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type CgroupDir, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { killUntilEmpty, newTeardownProgress, notEmptyError, teardownWorkerCgroup, thawBeforeExit, thawWhatTeardownFroze, type KilledTask, type RefusedTask, type TeardownMethod, type TeardownStage } from "../../src/cgroup/teardown.js";
import { teardownDocument, teardownDoneLines, teardownTasks } from "../../src/commands/cgroup.run.js";
import { RollbackIncompleteError } from "../../src/errors.js";
import { fakeProcStat, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

/**
 * killUntilEmpty on fake trees. The fake cgroup files are plain files, so the
 * test plays the kernel: a watcher on cgroup.freeze answers in cgroup.events
 * (asynchronously, as the kernel does), a dead child leaves cgroup.procs.
 */

let host: FakeHost | undefined;
const children: ChildProcess[] = [];
const watchers: FSWatcher[] = [];
afterEach(() => {
  for (const w of watchers.splice(0)) w.close();
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  host?.cleanup();
  host = undefined;
});

const read = (file: string): string => readFileSync(file, "utf8");

function dirAt(mount: string, cgroupPath: string, version: 1 | 2): CgroupDir {
  return { version, mount, cgroupPath, dir: path.join(mount, cgroupPath) };
}

/** A cgroup dir with `files`, its cgroup.procs listing `pids`. */
function fakeCgroup(h: FakeHost, mount: string, cgroupPath: string, version: 1 | 2, files: Record<string, string>, pids: number[]): CgroupDir {
  h.cgroup(mount, cgroupPath, { ...files, "cgroup.procs": pids.map((p) => `${p}\n`).join("") });
  return dirAt(path.join(h.cgroupRoot, mount), cgroupPath, version);
}

/** /proc/<pid>/cgroup in the fake procfs, so teardown's "still in this cgroup?" check passes. */
function placeInProcfs(h: FakeHost, pid: number, lines: string): void {
  mkdirSync(path.join(h.procfs, String(pid)), { recursive: true });
  writeFileSync(path.join(h.procfs, String(pid), "cgroup"), lines);
  writeFileSync(path.join(h.procfs, String(pid), "comm"), "sleep\n");
}

/** The v2 freezer's answer: cgroup.events follows cgroup.freeze a moment later. */
function emulateFreezer(dir: CgroupDir): void {
  const freeze = path.join(dir.dir, "cgroup.freeze");
  const events = path.join(dir.dir, "cgroup.events");
  watchers.push(
    watch(freeze, () => {
      const want = read(freeze).trim() === "1" ? 1 : 0;
      if (!read(events).includes(`frozen ${want}`)) writeFileSync(events, `populated 1\nfrozen ${want}\n`);
    }),
  );
}

/** A real `sleep` listed in `procsFiles`; it leaves them when it dies. */
function spawnSleeper(procsFiles: string[]): ChildProcess {
  const child = spawn("sleep", ["1000"], { stdio: "ignore" });
  children.push(child);
  child.once("exit", () => {
    for (const file of procsFiles) writeFileSync(file, read(file).split("\n").filter((l) => l !== String(child.pid)).join("\n"));
  });
  return child;
}

const exited = (child: ChildProcess): Promise<NodeJS.Signals | null> =>
  child.exitCode !== null || child.signalCode !== null ? Promise.resolve(child.signalCode) : new Promise((resolve) => child.once("exit", (_code, signal) => resolve(signal)));

describe("teardown without cgroup.kill: freeze → kill → thaw (DESIGN: cgroups)", () => {
  it("v2 with cgroup.freeze: SIGKILLs only once the cgroup reports frozen, thaws after, and the task dies", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const cgPath = "/process_api/abc/drill-t1";
    const dir = fakeCgroup(h, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, []);
    const procs = path.join(dir.dir, "cgroup.procs");
    const child = spawnSleeper([procs]);
    writeFileSync(procs, `${child.pid}\n`);
    placeInProcfs(h, child.pid!, `0::${cgPath}\n`);
    emulateFreezer(dir);

    const atKill: Array<{ pid: number; freeze: string; events: string }> = [];
    const killed: KilledTask[] = [];
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(h.roots, [dir], Date.now() + 20_000, killed, method, (pid) => {
      atKill.push({ pid, freeze: read(path.join(dir.dir, "cgroup.freeze")).trim(), events: read(path.join(dir.dir, "cgroup.events")) });
      process.kill(pid, "SIGKILL");
    });

    expect(left).toEqual([]);
    expect(await exited(child)).toBe("SIGKILL");
    expect(atKill.length).toBeGreaterThan(0);
    for (const k of atKill) {
      expect(k.pid).toBe(child.pid);
      expect(k.freeze).toBe("1"); // frozen while signalled
      expect(k.events).toMatch(/^frozen 1$/m); // and only after the kernel said so
    }
    expect(read(path.join(dir.dir, "cgroup.freeze")).trim()).toBe("0"); // thawed
    expect([...method]).toEqual(["freeze-kill-thaw"]);
    expect(killed.map((t) => t.pid)).toEqual([child.pid]);
  });

  it("thaws even when a SIGKILL fails, and reports the failure", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t2";
    const dir = fakeCgroup(host, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 1\n" }, [31337]);
    placeInProcfs(host, 31337, `0::${cgPath}\n`);
    let freezeAtKill: string | null = null;
    const refused = Object.assign(new Error("kill EPERM"), { code: "EPERM" });

    await expect(
      killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], new Set(), () => {
        freezeAtKill = read(path.join(dir.dir, "cgroup.freeze")).trim();
        throw refused;
      }),
    ).rejects.toThrow(
      `a task left inside that this user may not signal: pid 31337 (sleep) in ${dir.dir}: EPERM (not permitted: the process is another user's: only its owner or root can stop it; run as root); ` +
        `every other task is stopped; ${dir.dir} left in place (a cgroup cannot be removed with tasks inside): run this again as root to finish it`,
    );
    expect(freezeAtKill).toBe("1");
    expect(read(path.join(dir.dir, "cgroup.freeze")).trim()).toBe("0");
  });

  // QA: teardown as a user stopped at the first task it might not signal (root's), the tasks after it never signalled.
  it("signals every task it may, then names each it may not; they are not killed twice over nor listed as killed", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t5";
    const dir = fakeCgroup(host, "", cgPath, 2, {}, [31340, 31341, 31342]);
    for (const pid of [31340, 31341, 31342]) placeInProcfs(host, pid, `0::${cgPath}\n`);
    const procs = path.join(dir.dir, "cgroup.procs");
    const sent: number[] = [];
    const killed: KilledTask[] = [];
    const error = await killUntilEmpty(host.roots, [dir], Date.now() + 20_000, killed, new Set(), (pid) => {
      sent.push(pid);
      if (pid !== 31341) throw Object.assign(new Error("kill EPERM"), { code: "EPERM" });
      writeFileSync(procs, "31340\n31342\n"); // 31341 dies
    }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RollbackIncompleteError);
    const refused = "EPERM (not permitted: the process is another user's: only its owner or root can stop it; run as root)";
    expect((error as Error).message).toBe(
      `2 tasks left inside that this user may not signal: pid 31340 (sleep) in ${dir.dir}: ${refused}; pid 31342 (sleep) in ${dir.dir}: ${refused}; ` +
        `every other task is stopped; ${dir.dir} left in place (a cgroup cannot be removed with tasks inside): run this again as root to finish it`,
    );
    expect(sent).toEqual([31340, 31341, 31342]);
    expect(killed.map((t) => t.pid)).toEqual([31341]);
    expect(existsSync(dir.dir)).toBe(true);
  });

  it("a freeze that never completes (a task in D state) still ends in SIGKILL and a thaw", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t3";
    // cgroup.events stays `frozen 0`: nothing plays the kernel here.
    const dir = fakeCgroup(host, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, [31338]);
    placeInProcfs(host, 31338, `0::${cgPath}\n`);
    const procs = path.join(dir.dir, "cgroup.procs");
    const freezeAtKill: string[] = [];
    const method = new Set<TeardownMethod>();

    const left = await killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], method, () => {
      freezeAtKill.push(read(path.join(dir.dir, "cgroup.freeze")).trim());
      writeFileSync(procs, "");
    });
    expect(left).toEqual([]);
    expect(freezeAtKill).toEqual(["1"]);
    expect(read(path.join(dir.dir, "cgroup.freeze")).trim()).toBe("0");
    expect([...method]).toEqual(["freeze-kill-thaw"]);
  });

  it("hybrid: freezes the unified twin while the task (in both dirs) is killed", async () => {
    host = makeFakeHost("hybrid");
    const h = host;
    const memPath = "/process_api/abc/drill-t4";
    const twinPath = "/drill-t4-0123456789";
    const memory = fakeCgroup(h, "memory", memPath, 1, {}, []);
    const twin = fakeCgroup(h, "unified", twinPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, []);
    const child = spawnSleeper([path.join(memory.dir, "cgroup.procs"), path.join(twin.dir, "cgroup.procs")]);
    writeFileSync(path.join(memory.dir, "cgroup.procs"), `${child.pid}\n`);
    writeFileSync(path.join(twin.dir, "cgroup.procs"), `${child.pid}\n`);
    placeInProcfs(h, child.pid!, `4:memory:${memPath}\n0::${twinPath}\n`);
    emulateFreezer(twin);

    const freezeAtKill: string[] = [];
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(h.roots, [memory, twin], Date.now() + 20_000, [], method, (pid) => {
      freezeAtKill.push(read(path.join(twin.dir, "cgroup.freeze")).trim());
      process.kill(pid, "SIGKILL");
    });
    expect(left).toEqual([]);
    expect(await exited(child)).toBe("SIGKILL");
    expect(freezeAtKill.length).toBeGreaterThan(0);
    expect(new Set(freezeAtKill)).toEqual(new Set(["1"]));
    expect(read(path.join(twin.dir, "cgroup.freeze")).trim()).toBe("0");
    expect([...method]).toEqual(["freeze-kill-thaw"]);
  });

  it("an exit while it waits for `frozen 1` (rollback's second Ctrl-C) can thaw what it froze; nothing is left to thaw after", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t7";
    // cgroup.events stays `frozen 0`: the wait lasts FREEZE_WAIT_MS, with the cgroup frozen.
    const dir = fakeCgroup(host, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, [31341]);
    placeInProcfs(host, 31341, `0::${cgPath}\n`);
    const freeze = () => read(path.join(dir.dir, "cgroup.freeze")).trim();
    const sweep = killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], new Set(), () => writeFileSync(path.join(dir.dir, "cgroup.procs"), ""));
    const deadline = Date.now() + 5_000;
    while (freeze() !== "1" && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    expect(freeze()).toBe("1");
    expect(thawWhatTeardownFroze()).toEqual({ thawed: [dir.dir], stuck: [] });
    expect(freeze()).toBe("0");
    expect(await sweep).toEqual([]);
    expect(freeze()).toBe("0");
    expect(thawWhatTeardownFroze()).toEqual({ thawed: [], stuck: [] });
  });

  it("thawBeforeExit (a command's second Ctrl-C or SIGTERM mid-teardown) thaws what it froze and says so, naming what finishes the job", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t8";
    const dir = fakeCgroup(host, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, [31342]);
    placeInProcfs(host, 31342, `0::${cgPath}\n`);
    const freeze = () => read(path.join(dir.dir, "cgroup.freeze")).trim();
    const sweep = killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], new Set(), () => writeFileSync(path.join(dir.dir, "cgroup.procs"), ""));
    const deadline = Date.now() + 5_000;
    while (freeze() !== "1" && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    expect(freeze()).toBe("1");
    expect(thawBeforeExit("the teardown")).toEqual({
      notes: [`thawed ${dir.dir} (frozen to kill its tasks) before stopping: what is still inside runs until the teardown is run again`],
      stillFrozen: [],
    });
    expect(freeze()).toBe("0");
    expect(await sweep).toEqual([]);
    expect(thawBeforeExit("the teardown")).toEqual({ notes: [], stillFrozen: [] });
  });

  it("with cgroup.kill it writes that and never freezes", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-t5";
    const dir = fakeCgroup(host, "", cgPath, 2, { "cgroup.kill": "", "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, [31339]);
    placeInProcfs(host, 31339, `0::${cgPath}\n`);
    const procs = path.join(dir.dir, "cgroup.procs");
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], method, () => writeFileSync(procs, ""));
    expect(left).toEqual([]);
    expect(read(path.join(dir.dir, "cgroup.kill"))).toBe("1");
    expect(read(path.join(dir.dir, "cgroup.freeze"))).toBe("0\n"); // never written
    expect(method.has("cgroup.kill")).toBe(true);
    expect(method.has("freeze-kill-thaw")).toBe(false);
  });

  it("with neither (legacy v1): SIGKILL by pid, nothing frozen", async () => {
    host = makeFakeHost("v1");
    const memPath = "/process_api/abc/drill-t6";
    const dir = fakeCgroup(host, "memory", memPath, 1, {}, [31340]);
    placeInProcfs(host, 31340, `4:memory:${memPath}\n`);
    const procs = path.join(dir.dir, "cgroup.procs");
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(host.roots, [dir], Date.now() + 20_000, [], method, () => writeFileSync(procs, ""));
    expect(left).toEqual([]);
    expect([...method]).toEqual(["sigkill-by-pid"]);
    expect(existsSync(path.join(dir.dir, "cgroup.freeze"))).toBe(false);
  });
});

describe("teardown walks child cgroups (DESIGN: kill what is inside, verify empty, then rmdir)", () => {
  it("v1: a task in a grandchild cgroup is SIGKILLed (v1 has no cgroup.kill reaching it)", async () => {
    host = makeFakeHost("v1");
    const h = host;
    const memPath = "/process_api/abc/drill-d1";
    const top = fakeCgroup(h, "memory", memPath, 1, {}, []);
    const deeper = fakeCgroup(h, "memory", `${memPath}/sub/deeper`, 1, {}, []);
    const child = spawnSleeper([path.join(deeper.dir, "cgroup.procs")]);
    writeFileSync(path.join(deeper.dir, "cgroup.procs"), `${child.pid}\n`);
    placeInProcfs(h, child.pid!, `4:memory:${memPath}/sub/deeper\n`);

    const killed: KilledTask[] = [];
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(h.roots, [top], Date.now() + 20_000, killed, method);
    expect(left).toEqual([]);
    expect(killed).toEqual([{ pid: child.pid, comm: "sleep", dir: deeper.dir }]);
    expect([...method]).toEqual(["sigkill-by-pid"]);
    expect(await exited(child)).toBe("SIGKILL");
  });

  it("v2 without cgroup.kill: freezes the top cgroup only (its freeze holds the subtree) and kills the child's task while frozen", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const cgPath = "/process_api/abc/drill-d2";
    const top = fakeCgroup(h, "", cgPath, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, []);
    const sub = fakeCgroup(h, "", `${cgPath}/sub`, 2, { "cgroup.freeze": "0\n", "cgroup.events": "populated 1\nfrozen 0\n" }, []);
    const child = spawnSleeper([path.join(sub.dir, "cgroup.procs")]);
    writeFileSync(path.join(sub.dir, "cgroup.procs"), `${child.pid}\n`);
    placeInProcfs(h, child.pid!, `0::${cgPath}/sub\n`);
    emulateFreezer(top);

    const topFreezeAtKill: string[] = [];
    const method = new Set<TeardownMethod>();
    const left = await killUntilEmpty(h.roots, [top], Date.now() + 20_000, [], method, (pid) => {
      topFreezeAtKill.push(read(path.join(top.dir, "cgroup.freeze")).trim());
      process.kill(pid, "SIGKILL");
    });
    expect(left).toEqual([]);
    expect(topFreezeAtKill.length).toBeGreaterThan(0);
    expect(new Set(topFreezeAtKill)).toEqual(new Set(["1"]));
    expect(read(path.join(top.dir, "cgroup.freeze")).trim()).toBe("0"); // thawed
    expect(read(path.join(sub.dir, "cgroup.freeze"))).toBe("0\n"); // never written
    expect([...method]).toEqual(["freeze-kill-thaw"]);
    expect(await exited(child)).toBe("SIGKILL");
  });
});

describe("teardownWorkerCgroup with child cgroups (fake v2 tree)", () => {
  const M = 1024 * 1024;
  /** A v2 cgroup drill set up (marker), its files removed so the fake dir is removable like an empty kernel cgroup. */
  function setUp(h: FakeHost): WorkerCgroup {
    const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "d3", { kind: "self" });
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    for (const dir of cg.dirs) for (const file of readdirSync(dir.dir)) rmSync(path.join(dir.dir, file));
    return cg;
  }

  it("removes empty child cgroups bottom-up, then the cgroup", async () => {
    host = makeFakeHost("v2");
    const cg = setUp(host);
    mkdirSync(path.join(cg.limits.dir, "a", "b"), { recursive: true });
    mkdirSync(path.join(cg.limits.dir, "c"));
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 });
    expect(torn.kind).toBe("removed");
    expect(existsSync(cg.limits.dir)).toBe(false);
  });

  it("tells onStage where it is (for a command stopped in the middle to say): SIGTERM's grace, the kill, the rmdir", async () => {
    host = makeFakeHost("v2");
    const cg = setUp(host);
    const stages: Array<[TeardownStage, string]> = [];
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, onStage: (stage, name) => stages.push([stage, name]) });
    expect(torn.kind).toBe("removed");
    expect(stages).toEqual([["sigterm", "d3"], ["kill", "d3"], ["remove", "d3"]]);
  });

  it("a task that stays in a child cgroup is named with its pid and the child's dir", async () => {
    host = makeFakeHost("v2");
    const cg = setUp(host);
    const sub = path.join(cg.limits.dir, "sub");
    mkdirSync(sub);
    // Listed but never leaving: no /proc entry, so never signalled (as a pid reused since).
    writeFileSync(path.join(sub, "cgroup.procs"), "4194305\n");
    const torn = teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 300 });
    await expect(torn).rejects.toBeInstanceOf(RollbackIncompleteError);
    await expect(torn).rejects.toThrow(`pid 4194305 (?) in ${sub}`);
    expect(existsSync(sub)).toBe(true);
  });

  // QA: "could not remove … still busy" listed its tasks unmarked, where the other messages say stuck (state) or not signalled (whose).
  it("a task that joined after the kill and would not leave: the busy message marks it stuck, with its state", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const cg = setUp(h);
    const STUCK = 4194307;
    placeInProcfs(h, STUCK, `0::${cg.limits.cgroupPath}\n`);
    writeFileSync(path.join(h.procfs, String(STUCK), "stat"), fakeProcStat(STUCK, "hog", 100, "D"));
    const torn = teardownWorkerCgroup(h.roots, cg, {
      stateDir: h.stateDir,
      timeoutMs: 200,
      // Joins once the kill found it empty: the rmdir finds it busy.
      onStage: (stage) => {
        if (stage === "remove") writeFileSync(path.join(cg.limits.dir, "cgroup.procs"), `${STUCK}\n`);
      },
    });
    await expect(torn).rejects.toThrow(
      `(still busy after 0 s); no child cgroup left; tasks pid ${STUCK} (sleep) in ${cg.limits.dir}: ` +
        `stuck in state D (uninterruptible: in the kernel, where no signal acts until it leaves): signalled, not gone; run teardown again`,
    );
  });

  it("a child cgroup that cannot be removed is named, and the cgroup above it is left for the next teardown", async () => {
    host = makeFakeHost("v2");
    const cg = setUp(host);
    const sub = path.join(cg.limits.dir, "sub");
    mkdirSync(sub);
    // No task, but rmdir fails (ENOTEMPTY here, EBUSY from a kernel still releasing it).
    writeFileSync(path.join(sub, "cgroup.procs"), "");
    const torn = teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 200 });
    await expect(torn).rejects.toBeInstanceOf(RollbackIncompleteError);
    await expect(torn).rejects.toThrow(`could not remove ${sub}, ${cg.limits.dir}`);
    await expect(torn).rejects.toThrow(`child cgroups ${sub}`);
    expect(existsSync(cg.limits.dir)).toBe(true);
  });
});

describe("what a teardown that did not finish says of each task", () => {
  const M = 1024 * 1024;
  const EPERM = () => Object.assign(new Error("kill EPERM"), { code: "EPERM" });
  const refusedWhy = "EPERM (not permitted: the process is another user's: only its owner or root can stop it; run as root)";
  // Above pid_max (32768, at most 4194304): no real process is ever signalled.
  const STUCK = 4194306;

  // QA: after a failed teardown every task's line said "signalled …; not seen to exit", the one that had exited too.
  it("its done-so-far lines: a task that exited is said exited, one still listed is said inside", async () => {
    host = makeFakeHost("v2");
    const h = host;
    const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "m1", { kind: "self" });
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    const dir = cg.limits.dir;
    for (const file of readdirSync(dir)) rmSync(path.join(dir, file));
    const procs = path.join(dir, "cgroup.procs");
    const child = spawnSleeper([procs]);
    writeFileSync(procs, `${child.pid}\n${STUCK}\n`);
    placeInProcfs(h, child.pid!, `0::${cg.limits.cgroupPath}\n`);
    placeInProcfs(h, STUCK, `0::${cg.limits.cgroupPath}\n`);
    const progress = newTeardownProgress();
    await expect(teardownWorkerCgroup(h.roots, cg, { stateDir: h.stateDir, timeoutMs: 600, termGraceMs: 100, progress })).rejects.toBeInstanceOf(RollbackIncompleteError);
    expect(await exited(child)).toBe("SIGTERM");
    expect(teardownDoneLines(progress, false)).toEqual([
      `signalled ${child.pid} (sleep) in ${dir} (sigterm); exited (no longer in the cgroup)`,
      `signalled ${STUCK} (sleep) in ${dir} (sigterm); still inside`,
    ]);
  });

  it("its done-so-far lines name each task it may not signal, with whose it is", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-m2";
    const dir = fakeCgroup(host, "", cgPath, 2, {}, [31343, 31344]);
    for (const pid of [31343, 31344]) placeInProcfs(host, pid, `0::${cgPath}\n`);
    const procs = path.join(dir.dir, "cgroup.procs");
    const progress = newTeardownProgress();
    await killUntilEmpty(host.roots, [dir], Date.now() + 20_000, progress.killed, progress.method, (pid) => {
      if (pid === 31343) throw EPERM();
      writeFileSync(procs, "31343\n"); // 31344 dies
    }, progress.refused).catch(() => undefined);
    expect(teardownDoneLines(progress, false)).toEqual([
      `signalled 31344 (sleep) in ${dir.dir} (sigkill-by-pid); exited (no longer in the cgroup)`,
      `not signalled 31343 (sleep) in ${dir.dir}: ${refusedWhy}; still inside`,
    ]);
  });

  // QA: a task it may not signal, left beside stuck ones at the deadline, was listed as plainly "still inside", with "kill it".
  it("past the deadline: each task left is marked, stuck (its state: D) or not signalled (whose, run as root)", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-m3";
    const dir = fakeCgroup(host, "", cgPath, 2, {}, [31345, 31346, 31347]);
    for (const pid of [31345, 31346, 31347]) placeInProcfs(host, pid, `0::${cgPath}\n`);
    writeFileSync(path.join(host.procfs, "31345", "stat"), fakeProcStat(31345, "hog", 100, "D"));
    writeFileSync(path.join(host.procfs, "31347", "stat"), fakeProcStat(31347, "sleep", 100, "S"));
    const refused = new Map<number, RefusedTask>();
    const left = await killUntilEmpty(host.roots, [dir], Date.now() + 300, [], new Set(), (pid) => {
      if (pid === 31346) throw EPERM(); // the others: signalled, never leaving
    }, refused);
    expect(left.map((t) => t.pid)).toEqual([31345, 31346, 31347]);
    expect(notEmptyError(host.roots, left, refused, 10_000).message).toBe(
      `cgroup not empty after 10 s; still inside: ` +
        `pid 31345 (sleep) in ${dir.dir}: stuck in state D (uninterruptible: in the kernel, where no signal acts until it leaves): signalled, not gone; ` +
        `pid 31346 (sleep) in ${dir.dir}: not signalled: ${refusedWhy}; ` +
        `pid 31347 (sleep) in ${dir.dir}: stuck in state S (sleeping): signalled, not gone. ` +
        `Not moved to the parent (that would lift its limit); as root, run teardown again once the stuck tasks have exited`,
    );
  });

  // QA: `drill --json cgroup teardown` of an unfinished teardown listed a stuck task in `killed`, and had no field for those it may not signal.
  it("its --json document says each task as its lines do: killed only what left, refused with whose, still_inside marked", async () => {
    host = makeFakeHost("v2");
    const cgPath = "/process_api/abc/drill-m5";
    const dir = fakeCgroup(host, "", cgPath, 2, {}, [31343, 31344, 31345]);
    for (const pid of [31343, 31344, 31345]) placeInProcfs(host, pid, `0::${cgPath}\n`);
    writeFileSync(path.join(host.procfs, "31345", "stat"), fakeProcStat(31345, "hog", 100, "D"));
    const procs = path.join(dir.dir, "cgroup.procs");
    const progress = newTeardownProgress();
    const left = await killUntilEmpty(host.roots, [dir], Date.now() + 300, progress.killed, progress.method, (pid) => {
      if (pid === 31343) throw EPERM();
      if (pid === 31344) writeFileSync(procs, "31343\n31345\n"); // 31344 dies, 31345 never leaves
    }, progress.refused);
    expect(left.map((t) => t.pid)).toEqual([31343, 31345]);
    const doc = teardownDocument(host.roots, "failed", progress, ["cgroup m5: not empty"], null);
    const at = dir.dir;
    expect(doc.killed).toEqual([{ pid: 31344, comm: "sleep", dir: at }]);
    expect(doc.signalled).toEqual([
      { pid: 31344, comm: "sleep", dir: at, outcome: "exited" },
      { pid: 31345, comm: "sleep", dir: at, outcome: "still_inside" },
    ]);
    expect(doc.refused).toEqual([{ pid: 31343, comm: "sleep", dir: at, why: refusedWhy, outcome: "still_inside" }]);
    expect(doc.still_inside).toEqual([
      { pid: 31345, comm: "sleep", dir: at, signalled: true, state: "D", why: "stuck in state D (uninterruptible: in the kernel, where no signal acts until it leaves): signalled, not gone" },
      { pid: 31343, comm: "sleep", dir: at, signalled: false, state: null, why: refusedWhy },
    ]);
    // Removed after all (the refused task left by itself): every task is out, none still inside.
    expect(teardownTasks(host.roots, progress, () => "gone")).toMatchObject({ killed: [{ pid: 31344 }, { pid: 31345 }], stillInside: [], refused: [{ pid: 31343, outcome: "exited" }] });
  });

  it("past the deadline, stuck alone: no 'as root'; a task listed twice (hybrid: memory cgroup and twin) named once", async () => {
    host = makeFakeHost("hybrid");
    const memory = fakeCgroup(host, "memory", "/process_api/abc/drill-m4", 1, {}, []);
    const twin = fakeCgroup(host, "unified", "/drill-m4-0123456789", 2, {}, []);
    const left: KilledTask[] = [
      { pid: STUCK, comm: "hog", dir: memory.dir },
      { pid: STUCK, comm: "hog", dir: twin.dir },
    ];
    expect(notEmptyError(host.roots, left, new Map(), 2_000).message).toBe(
      `cgroup not empty after 2 s; still inside: pid ${STUCK} (hog) in ${memory.dir} and ${twin.dir}: stuck (no /proc entry to signal: exiting, or of another pid namespace). ` +
        `Not moved to the parent (that would lift its limit); run teardown again once the stuck task has exited`,
    );
  });
});
