import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, watch, writeFileSync, type FSWatcher } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { CgroupDir } from "../../src/cgroup/paths.js";
import { killUntilEmpty, type KilledTask, type TeardownMethod } from "../../src/cgroup/teardown.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

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
    ).rejects.toBe(refused);
    expect(freezeAtKill).toBe("1");
    expect(read(path.join(dir.dir, "cgroup.freeze")).trim()).toBe("0");
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
