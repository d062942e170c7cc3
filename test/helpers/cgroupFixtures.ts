import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { detectLayout, readProcessCgroups, requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { readPids } from "../../src/cgroup/memoryFiles.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile } from "../../src/cgroup/stateFiles.js";
import { teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import { locatePageToucher } from "../../src/native/pagetoucher.js";
import { readHostPsi } from "../../src/host/psi.js";

export type FakeLayout = "v2" | "hybrid" | "v1";

/** A fake host in a temp dir: <root>/sys/fs/cgroup/... and <root>/proc/..., with the kernel's file formats. */
export interface FakeHost {
  root: string;
  sysfs: string;
  procfs: string;
  stateDir: string;
  roots: HostRoots;
  cgroupRoot: string;
  /** Writes `files` (name → content) into a cgroup dir relative to a hierarchy mount ("" for v2, "memory", "unified"). */
  cgroup(mount: string, cgroupPath: string, files?: Record<string, string>): string;
  cleanup(): void;
}

const V1_UNLIMITED = "9223372036854771712\n";

/** A v1 memory cgroup's files as a fresh kernel cgroup shows them. */
export function v1MemoryFiles(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    "cgroup.procs": "",
    "memory.limit_in_bytes": V1_UNLIMITED,
    "memory.memsw.limit_in_bytes": V1_UNLIMITED,
    "memory.usage_in_bytes": "4571136\n",
    "memory.memsw.usage_in_bytes": "4571136\n",
    "memory.max_usage_in_bytes": "9297920\n",
    "memory.failcnt": "0\n",
    "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    "memory.swappiness": "60\n",
    "memory.use_hierarchy": "1\n",
    "memory.stat": "cache 1024\nrss 4096\ntotal_cache 1024\ntotal_rss 4096\n",
    ...overrides,
  };
}

/** A v2 cgroup's memory files. */
export function v2MemoryFiles(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    "cgroup.procs": "",
    "cgroup.controllers": "memory pids\n",
    "cgroup.subtree_control": "",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "memory.current": "4571136\n",
    "memory.peak": "9297920\n",
    "memory.swap.current": "0\n",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    "memory.stat": "anon 4096\nfile 1024\nworkingset_refault_file 0\n",
    "memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    ...overrides,
  };
}

/**
 * Builds a fake host of the given layout. The caller process sits at
 * `selfPath` in each hierarchy (/proc/self/cgroup is written to match).
 */
export function makeFakeHost(layout: FakeLayout, options: { selfPath?: string; memsw?: boolean } = {}): FakeHost {
  const selfPath = options.selfPath ?? "/process_api/abc";
  options = { memsw: true, ...options };
  const root = mkdtempSync(path.join(os.tmpdir(), `drill-fake-${layout}-`));
  const sysfs = path.join(root, "sys");
  const procfs = path.join(root, "proc");
  const stateDir = path.join(root, "state");
  const cgroupRoot = path.join(sysfs, "fs", "cgroup");
  mkdirSync(cgroupRoot, { recursive: true });
  mkdirSync(path.join(procfs, "self"), { recursive: true });

  const cgroup = (mount: string, cgroupPath: string, files: Record<string, string> = {}): string => {
    const dir = path.join(cgroupRoot, mount, cgroupPath);
    mkdirSync(dir, { recursive: true });
    for (const [name, content] of Object.entries(files)) writeFileSync(path.join(dir, name), content);
    return dir;
  };

  if (layout === "v2") {
    cgroup("", "/", { "cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.subtree_control": "memory pids\n", "cgroup.procs": "1\n" });
    cgroup("", selfPath, v2MemoryFiles({ "cgroup.procs": "4242\n" }));
    writeFileSync(path.join(procfs, "self", "cgroup"), `0::${selfPath}\n`);
  } else {
    const files = (procs: string): Record<string, string> => {
      const all = v1MemoryFiles({ "cgroup.procs": procs });
      if (!options.memsw) {
        delete all["memory.memsw.limit_in_bytes"];
        delete all["memory.memsw.usage_in_bytes"];
      }
      return all;
    };
    cgroup("memory", "/", { ...files("1\n"), tasks: "1\n", release_agent: "", notify_on_release: "0\n" });
    cgroup("memory", selfPath, files("4242\n"));
    if (layout === "hybrid") {
      cgroup("unified", "/", { "cgroup.controllers": "", "cgroup.subtree_control": "", "cgroup.procs": "1\n4242\n", "memory.pressure": v2MemoryFiles()["memory.pressure"]! });
    }
    const unifiedLine = layout === "hybrid" ? "0::/\n" : "";
    writeFileSync(path.join(procfs, "self", "cgroup"), `9:name=systemd:/\n6:freezer:/\n4:memory:${selfPath}\n1:cpu:/\n${unifiedLine}`);
  }
  writeFileSync(path.join(procfs, "swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
  return {
    root,
    sysfs,
    procfs,
    stateDir,
    roots: new HostRoots(procfs, sysfs),
    cgroupRoot,
    cgroup,
    cleanup: () => rmSync(root, { recursive: true, force: true }),
  };
}

/** Above pid_max: listed in a fake cgroup, never a real process to signal. */
export const STUCK_PID = 4194305;

/**
 * A drill cgroup `name` (with its marker) on a fake v2 tree without
 * cgroup.kill, a task inside that never leaves, and a freeze that never
 * completes (cgroup.events never says `frozen 1`, as with a task in D state):
 * every sweep of teardown's freeze → kill → thaw holds it frozen for
 * FREEZE_WAIT_MS, so signals sent to drill arrive while it is. → its dir.
 */
export function stuckFakeCgroup(h: FakeHost, name: string): string {
  const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), name, { kind: "self" });
  setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * 1024 * 1024, swapMax: 0 });
  const dir = cg.limits.dir;
  writeFileSync(path.join(dir, "cgroup.freeze"), "0\n");
  writeFileSync(path.join(dir, "cgroup.events"), "populated 1\nfrozen 0\n");
  writeFileSync(path.join(dir, "cgroup.procs"), `${STUCK_PID}\n`);
  mkdirSync(path.join(h.procfs, String(STUCK_PID)), { recursive: true });
  writeFileSync(path.join(h.procfs, String(STUCK_PID), "cgroup"), `0::${cg.limits.cgroupPath}\n`);
  writeFileSync(path.join(h.procfs, String(STUCK_PID), "comm"), "hog\n");
  return dir;
}

/**
 * A drill cgroup `name` (--parent self) set up on a fake tree, its marker then
 * made writable by other users (0666): a record drill did not write, as an
 * older drill left them under `umask 000`. → the marker's path.
 */
export function forgedMarkerCgroup(h: FakeHost, name: string): string {
  const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), name, { kind: "self" });
  setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
  const marker = markerFile(h.stateDir, cg);
  chmodSync(marker, 0o666);
  return marker;
}

/** A fake /proc/<pid>/stat line with the given comm and start time. */
export function fakeProcStat(pid: number, comm: string, startTime: number, state = "S"): string {
  // Fields 4..21 are filler; field 22 is starttime.
  const filler = Array.from({ length: 18 }, (_, i) => String(i + 1)).join(" ");
  return `${pid} (${comm}) ${state} ${filler} ${startTime} 12345 678\n`;
}

// ---------------------------------------------------------------------------
// Real cgroups: only under the test's own cgroup (--parent self), always torn down.

/** Why real-cgroup tests cannot run here, or null when they can. */
export function realCgroupSkipReason(): string | null {
  if (process.getuid?.() !== 0) return "real cgroup tests need root (not root)";
  const roots = new HostRoots();
  const layout = detectLayout(roots);
  if (!layout.ok) return `no usable memory cgroup hierarchy: ${layout.reason}`;
  const self = readProcessCgroups(roots);
  if (!self.ok) return `cannot read ${self.file}: ${self.reason}`;
  const probeParent = layout.value.kind === "v2" ? path.join(layout.value.unifiedMount!, self.value.unified ?? "/") : path.join(layout.value.memoryMount!, self.value.memory ?? "/");
  const probe = path.join(probeParent, `drill-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
  } catch (err) {
    return `memory controller not writable under the test's own cgroup (${probeParent}): ${(err as Error).message}`;
  }
  if (layout.value.kind === "v2") {
    const subtree = readFileSync(path.join(probeParent, "cgroup.subtree_control"), "utf8");
    if (!subtree.includes("memory") && self.value.unified !== "/") {
      return `v2: the test's own cgroup ${probeParent} is populated and has no memory in cgroup.subtree_control (no-internal-process rule)`;
    }
  }
  return null;
}

/**
 * Waits until the host's memory PSI avg10 is under `below`, as an operator
 * waits on doctor's "host PSI already >= 1.00" warning: a test that asserts a
 * gate admits cannot run while the previous file's thrash still decays out of
 * avg10 (CI: a drill-loop right after worker.test's hog saw 9 host_pressure
 * rejects and no admit). Returns how long it waited; throws naming the PSI
 * when the host stays busy.
 */
export async function waitForQuietHostPsi(below = 1, timeoutMs = 90_000): Promise<number> {
  const started = Date.now();
  for (;;) {
    const psi = readHostPsi(realRoots());
    if (!psi.ok) throw new Error(`cannot wait for a quiet host: ${psi.reason}`);
    if (psi.value.some.avg10 < below) return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error(`host memory PSI some avg10=${psi.value.some.avg10} still >= ${below} after ${timeoutMs} ms: something else pressures this host`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

export function realRoots(): HostRoots {
  return new HostRoots();
}

/** The worker cgroup `name` under the test's own cgroup on the real host. */
export function realWorkerCgroup(name: string): WorkerCgroup {
  const roots = realRoots();
  const layout = detectLayout(roots);
  if (!layout.ok) throw new Error(layout.reason);
  return resolveWorkerCgroup(roots, layout.value, name, { kind: "self" });
}

export function tempStateDir(): string {
  return mkdtempSync(path.join(os.tmpdir(), "drill-state-"));
}

/** Why `chattr +i` (an immutable dir, refusing writes as a full disk does) cannot be tested here, or null: ext4, xfs have it; tmpfs, overlayfs not. */
export function immutableSkipReason(): string | null {
  const dir = tempStateDir();
  try {
    const set = spawnSync("chattr", ["+i", dir]);
    if (set.status !== 0) return `chattr +i not supported on ${os.tmpdir()}: ${set.stderr?.toString().trim() || set.error?.message}`;
    spawnSync("chattr", ["-i", dir]);
    return null;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Always leaves the host clean: drill's teardown first, then (for cgroups a
 * test made by hand) SIGKILL whatever is listed and rmdir, deepest first.
 */
export async function forceCleanup(cgroup: WorkerCgroup, stateDir: string): Promise<void> {
  try {
    // force: also the cgroup of a test's drill that is still up
    await teardownWorkerCgroup(realRoots(), cgroup, { stateDir, timeoutMs: 10_000, force: true });
  } catch {
    // foreign or stuck: fall through to the blunt path below
  }
  for (const dir of cgroup.dirs) {
    if (!existsSync(dir.dir)) continue;
    for (let i = 0; i < 100; i++) {
      const pids = readPids(path.join(dir.dir, "cgroup.procs"));
      if (!pids.ok || pids.value.length === 0) break;
      for (const pid of pids.value) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      spawnSync("sleep", ["0.05"]);
    }
    for (let i = 0; i < 50; i++) {
      try {
        rmdirSync(dir.dir);
        break;
      } catch {
        spawnSync("sleep", ["0.05"]);
      }
    }
  }
}

/** No leftover dir of `cgroup` in any hierarchy. */
export function cgroupDirsLeft(cgroup: WorkerCgroup): string[] {
  return cgroup.dirs.map((d) => d.dir).filter((dir) => existsSync(dir));
}

/** Real cgroups, a redis-server and the page toucher: what the worker and sidecar tests need. */
export function realDrillSkipReason(): string | null {
  const cgroup = realCgroupSkipReason();
  if (cgroup) return cgroup;
  if (spawnSync("redis-server", ["--version"]).error) return "redis-server is not installed";
  try {
    locatePageToucher();
  } catch (err) {
    return (err as Error).message;
  }
  return null;
}

/**
 * A drill cgroup `name` set up for real (--parent self, a temp state dir)
 * before a file's tests, torn down with its state dir after them: read `cg`
 * and `stateDir` inside the tests.
 */
export function realCgroupForFile(name: string, memoryMax = 64 * 1024 * 1024): { cg: WorkerCgroup; stateDir: string } {
  const made = { cg: undefined as unknown as WorkerCgroup, stateDir: "" };
  beforeAll(() => {
    made.stateDir = tempStateDir();
    made.cg = realWorkerCgroup(name);
    setupWorkerCgroup(realRoots(), made.cg, made.stateDir, { memoryMax, swapMax: 0 });
  });
  afterAll(async () => {
    await forceCleanup(made.cg, made.stateDir);
    rmSync(made.stateDir, { recursive: true, force: true });
  });
  return made;
}
