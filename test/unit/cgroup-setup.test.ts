import { afterEach, describe, expect, it } from "vitest";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DrillError, RefusedError } from "../../src/errors.js";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { applySetup, enableMemoryError, inspectForSetup, orderV1LimitWrites, planSetup, setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile, markerLockFile, readMarker } from "../../src/cgroup/stateFiles.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { makeFakeHost, v1MemoryFiles, type FakeHost } from "../helpers/cgroupFixtures.js";
import { pastedArgv } from "../helpers/pasted.js";

let host: FakeHost | undefined;
afterEach(() => host?.cleanup());

const M = 1024 * 1024;

describe("v1 write ordering: memsw ≥ limit at every write", () => {
  it.each([
    ["fresh cgroup (unlimited) → 256M", { limit: "max", memsw: "max" }, { limit: 256 * M, memsw: 256 * M }, ["limit", "memsw"]],
    ["lowering 512M → 256M", { limit: 512 * M, memsw: 512 * M }, { limit: 256 * M, memsw: 256 * M }, ["limit", "memsw"]],
    ["raising 256M → 512M", { limit: 256 * M, memsw: 256 * M }, { limit: 512 * M, memsw: 512 * M }, ["memsw", "limit"]],
    ["same values", { limit: 256 * M, memsw: 256 * M }, { limit: 256 * M, memsw: 256 * M }, ["limit", "memsw"]],
    ["raising memory, swap shrinking", { limit: 256 * M, memsw: 384 * M }, { limit: 320 * M, memsw: 320 * M }, ["limit", "memsw"]],
    ["raising past old memsw", { limit: 256 * M, memsw: 300 * M }, { limit: 400 * M, memsw: 500 * M }, ["memsw", "limit"]],
  ] as const)("%s", (_label, current, target, order) => {
    const got = orderV1LimitWrites(current, target);
    expect(got).toEqual(order);
    // Replay: every intermediate state keeps memsw ≥ limit.
    let state = { limit: current.limit === "max" ? Infinity : current.limit, memsw: current.memsw === "max" ? Infinity : current.memsw };
    for (const which of got) {
      state = { ...state, [which]: target[which] };
      expect(state.memsw).toBeGreaterThanOrEqual(state.limit);
    }
  });
});

function hybridTarget(h: FakeHost, name = "t1") {
  return resolveWorkerCgroup(h.roots, requireLayout(h.roots), name, { kind: "self" });
}

describe("planSetup / applySetup on fake trees", () => {
  it("hybrid: mkdir v1 dir and twin, limit then memsw (swap 0: memsw = limit), swappiness 0; marker written", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    const result = setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    expect(result.plan.steps.map((s) => (s.kind === "write" ? path.basename(s.file) : s.kind))).toEqual([
      "mkdir",
      "mkdir",
      "memory.limit_in_bytes",
      "memory.memsw.limit_in_bytes",
      "memory.swappiness",
    ]);
    expect(result.writes.map((w) => [path.basename(w.file), w.wrote, w.readBack])).toEqual([
      ["memory.limit_in_bytes", String(256 * M), String(256 * M)],
      ["memory.memsw.limit_in_bytes", String(256 * M), String(256 * M)],
      ["memory.swappiness", "0", "0"],
    ]);
    expect(result.created).toEqual([cg.memory!.dir, cg.unified!.dir]);
    const marker = readMarker(host.stateDir, cg);
    expect(marker).toMatchObject({ state: "created", name: "t1", layout: "hybrid" });
    expect(marker!.dirs.every((d) => typeof d.inode === "number")).toBe(true);
    expect(result.plan.notes.join("\n")).toMatch(/best effort/);
  });

  it("re-running on drill's own cgroup raises in the right order (memsw first)", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    const again = setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 512 * M, swapMax: 0 });
    expect(again.plan.ownership).toBe("ours");
    expect(again.plan.steps.map((s) => (s.kind === "write" ? path.basename(s.file) : s.kind))).toEqual([
      "memory.memsw.limit_in_bytes",
      "memory.limit_in_bytes",
      "memory.swappiness",
    ]);
    expect(readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8")).toBe(String(512 * M));
  });

  it("swap 64M on v1: memsw = limit + 64M, swappiness untouched", () => {
    host = makeFakeHost("v1");
    const cg = hybridTarget(host);
    const result = setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 64 * M });
    expect(result.writes.map((w) => [path.basename(w.file), w.wrote])).toEqual([
      ["memory.limit_in_bytes", String(256 * M)],
      ["memory.memsw.limit_in_bytes", String(320 * M)],
    ]);
  });

  // QA: setup with --swap-max 32M over an earlier swap-off setup kept swappiness 0 (anon pages never swap).
  it("swap allowed again on v1 after a swap-off setup: swappiness back to the parent's, no swap-off note", () => {
    host = makeFakeHost("v1");
    const cg = hybridTarget(host);
    writeFileSync(path.join(path.dirname(cg.limits.dir), "memory.swappiness"), "60\n");
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    expect(readFileSync(path.join(cg.limits.dir, "memory.swappiness"), "utf8").trim()).toBe("0");
    const plan = planSetup(cg, inspectForSetup(host.roots, cg, host.stateDir), { memoryMax: 256 * M, swapMax: 64 * M });
    expect(plan.steps.filter((st) => st.kind === "write").map((st) => st.kind === "write" && [path.basename(st.file), st.value])).toContainEqual(["memory.swappiness", "60"]);
    expect(plan.notes.join("\n")).not.toMatch(/swap-off/);
  });

  // QA: `--memory-max 2gib` over a 512M cgroup was told to give --memory-max again; only the 2G default gets that advice.
  it.each([
    [{ memoryMaxGiven: true }, "went up from 512MiB to 2.0GiB, as --memory-max asked"],
    [{ owner: { drill: "smoke", runId: "smoke-1" } }, "went up from 512MiB to 2.0GiB, as cgroup.memory_max asked"],
    [{}, "went up from 512MiB to 2.0GiB (--memory-max, 2G when not given): give --memory-max again to keep the limit the drill was set up with"],
  ])("a raised limit, %j: %s", (given, words) => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 512 * M, swapMax: 0 });
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), ""); // empty: up may adopt it
    const again = setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 2048 * M, swapMax: 0, ...given });
    const raised = again.warnings.filter((w) => w.includes("the limit went up"));
    expect(raised).toEqual([`${path.join(cg.limits.dir, "memory.limit_in_bytes")}: the limit ${words}`]);
  });

  it("v1 without memsw (swapaccount=0): limit only, and says swap-off is best effort", () => {
    host = makeFakeHost("v1", { memsw: false });
    const cg = hybridTarget(host);
    const plan = planSetup(cg, inspectForSetup(host.roots, cg, host.stateDir), { memoryMax: 256 * M, swapMax: 0 });
    expect(plan.steps.filter((s) => s.kind === "write").map((s) => s.kind === "write" && path.basename(s.file))).toEqual(["memory.limit_in_bytes", "memory.swappiness"]);
    expect(plan.warnings.join("\n")).toMatch(/memsw.*best effort/);
  });

  it("refuses an existing cgroup with a foreign task, and writes nothing", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    host.cgroup("memory", cg.memory!.cgroupPath, v1MemoryFiles({ "cgroup.procs": "31337\n", "memory.limit_in_bytes": "1048576\n" }));
    expect(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, { memoryMax: 256 * M, swapMax: 0 })).toThrow(RefusedError);
    try {
      setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    } catch (err) {
      expect((err as RefusedError).exitCode).toBe(3);
      expect((err as RefusedError).message).toMatch(/31337.*did not create it/);
    }
    expect(readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8")).toBe("1048576\n");
    expect(readMarker(host.stateDir, cg)).toBeNull();
  });

  it("a cgroup drill set up with another --state-dir: the refusal names where it looked for the marker", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "");
    const otherStateDir = path.join(host.root, "other-state");
    // What `drill --state-dir <other> up --name t1` judges before it starts anything.
    const err = (() => {
      try {
        planSetup(cg, inspectForSetup(host!.roots, cg, otherStateDir), { memoryMax: 256 * M, swapMax: 0, owner: { drill: "smoke", runId: "smoke-1" } });
      } catch (e) {
        return e as RefusedError;
      }
      throw new Error("not refused");
    })();
    expect(err).toBeInstanceOf(RefusedError);
    expect(err.message).toContain(`${cg.memory!.dir} already exists and drill did not create it (no marker in ${path.join(otherStateDir, "cgroups")})`);
    expect(err.message).toMatch(/another --state-dir/);
  });

  it("warns when an ancestor is tighter than asked", () => {
    host = makeFakeHost("hybrid");
    host.cgroup("memory", "/process_api/abc", { "memory.limit_in_bytes": String(128 * M) });
    const cg = hybridTarget(host);
    const plan = planSetup(cg, inspectForSetup(host.roots, cg, host.stateDir), { memoryMax: 256 * M, swapMax: 0 });
    expect(plan.warnings.join("\n")).toMatch(/ancestor .*process_api\/abc limits memory to 128MiB, tighter than --memory-max 256MiB/);
  });

  // QA: an ancestor's limit that did not read was taken for no limit, and the warning skipped.
  it("warns when an ancestor's limit could not be read", () => {
    host = makeFakeHost("hybrid");
    host.cgroup("memory", "/process_api/abc", { "memory.limit_in_bytes": "abc\n" });
    const cg = hybridTarget(host);
    const plan = planSetup(cg, inspectForSetup(host.roots, cg, host.stateDir), { memoryMax: 256 * M, swapMax: 0 });
    expect(plan.warnings).toContain(
      `ancestor limit ${path.join(host.cgroupRoot, "memory/process_api/abc/memory.limit_in_bytes")} could not be read (not a limit: "abc"): it may be tighter than --memory-max 256MiB, and the effective limit is unknown`,
    );
  });

  it("v2: enables +memory in the parent's subtree_control, then memory.max and memory.swap.max", () => {
    host = makeFakeHost("v2", { selfPath: "/drills" });
    const cg = hybridTarget(host);
    const result = setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    expect(result.plan.steps.map((s) => (s.kind === "write" ? path.basename(s.file) : s.kind))).toEqual(["enable-memory", "mkdir", "memory.max", "memory.swap.max"]);
    expect(readFileSync(path.join(host.cgroupRoot, "drills/cgroup.subtree_control"), "utf8")).toBe("+memory");
  });

  it("v2: EBUSY from the no-internal-process rule names the file and explains; nothing left behind", () => {
    host = makeFakeHost("v2", { selfPath: "/user.slice/me" });
    const cg = hybridTarget(host);
    const plan = planSetup(cg, inspectForSetup(host.roots, cg, host.stateDir), { memoryMax: 256 * M, swapMax: 0 });
    const ebusy = (file: string) => {
      if (file.endsWith("cgroup.subtree_control")) throw Object.assign(new Error("EBUSY: resource busy"), { code: "EBUSY" });
    };
    const subtree = path.join(host.cgroupRoot, "user.slice/me/cgroup.subtree_control");
    expect(() => applySetup(plan, host!.stateDir, ebusy)).toThrow(DrillError);
    try {
      applySetup(plan, host.stateDir, ebusy);
    } catch (err) {
      expect((err as Error).message).toContain(subtree);
      expect((err as Error).message).toMatch(/no-internal-process rule/);
    }
    expect(() => readFileSync(markerFile(host!.stateDir, cg))).toThrow();
  });

  it("v2: memory missing from the parent's cgroup.controllers is explained", () => {
    host = makeFakeHost("v2", { selfPath: "/drills" });
    host.cgroup("", "/drills", { "cgroup.controllers": "pids\n" });
    const cg = hybridTarget(host);
    expect(() => planSetup(cg, inspectForSetup(host!.roots, cg, host!.stateDir), { memoryMax: 256 * M, swapMax: 0 })).toThrow(/memory controller is not available.*cgroup.controllers/);
  });

  it("EACCES on a kernel write is one line naming the file", () => {
    const err = enableMemoryError("/sys/fs/cgroup/x/cgroup.subtree_control", "/sys/fs/cgroup/x", Object.assign(new Error("denied"), { code: "EACCES" }));
    expect(err.message).toBe("cannot write /sys/fs/cgroup/x/cgroup.subtree_control: EACCES (permission denied: run as root, or on a host whose cgroup tree is writable)");
  });
});

describe("a drill run never adopts a cgroup another drill, or anything live, uses", () => {
  const opts = (drill: string, runId: string, memoryMax = 256 * M) => ({ memoryMax, swapMax: 0, owner: { drill, runId } });
  /** What the kernel shows in a cgroup drill made: an empty (or given) cgroup.procs in each dir. */
  const setTasks = (cg: ReturnType<typeof hybridTarget>, procs = "") => {
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), procs);
  };
  const limit = (cg: ReturnType<typeof hybridTarget>) => readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8");
  const refusal = (fn: () => unknown): RefusedError => {
    try {
      fn();
    } catch (err) {
      expect(err).toBeInstanceOf(RefusedError);
      return err as RefusedError;
    }
    throw new Error("not refused");
  };

  it("records the drill and run that set the cgroup up", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-1"));
    expect(readMarker(host.stateDir, cg)!.owner).toEqual({ drill: "first", runId: "first-1" });
  });

  it("another drill's cgroup is refused, exit 3 naming that drill, even while it is empty; nothing rewritten", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-1"));
    setTasks(cg);
    const markerBefore = readFileSync(markerFile(host.stateDir, cg), "utf8");
    const err = refusal(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, opts("second", "second-1", 512 * M)));
    expect(err.exitCode).toBe(3);
    expect(err.message).toMatch(/worker cgroup of drill first \(run first-1\); refusing to share it with drill second.*rollback --name first.*--name/);
    expect(limit(cg)).toBe(String(256 * M));
    expect(readFileSync(markerFile(host.stateDir, cg), "utf8")).toBe(markerBefore);
  });

  it("a marked cgroup with tasks in it is refused to a drill run, naming them", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 }); // drill cgroup setup: no owner
    setTasks(cg, "31337\n");
    const err = refusal(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, opts("first", "first-1", 512 * M)));
    // The v1 memory dir and its unified twin are one cgroup's two dirs: plural (QA).
    expect(err.message).toContain(`${cg.memory!.dir} and ${cg.unified!.dir} (set up by drill cgroup setup) still have tasks 31337 `);
    expect(err.message).toMatch(/refusing to adopt/);
    expect(limit(cg)).toBe(String(256 * M));
    // The operator's own `drill cgroup setup` still rewrites the limits of the cgroup drill made.
    expect(setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 512 * M, swapMax: 0 }).plan.ownership).toBe("ours");
    expect(limit(cg)).toBe(String(512 * M));
  });

  it("unreadable tasks are not taken for none", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    // No cgroup.procs in the fake dirs: readPids fails.
    expect(refusal(() => planSetup(cg, inspectForSetup(host!.roots, cg, host!.stateDir), opts("first", "first-1"))).message).toMatch(/cannot read cgroup.procs/);
  });

  it("the same drill's next run adopts an empty leftover (up twice stays safe) and takes it over in the marker", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-1"));
    setTasks(cg);
    const again = setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-2", 512 * M));
    expect(again.plan.ownership).toBe("ours");
    expect(limit(cg)).toBe(String(512 * M));
    expect(readMarker(host.stateDir, cg)!.owner).toEqual({ drill: "first", runId: "first-2" });
    // ...and a `drill cgroup setup` on it keeps the owner.
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    expect(readMarker(host.stateDir, cg)!.owner).toEqual({ drill: "first", runId: "first-2" });
    expect(refusal(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, opts("second", "second-1"))).message).toMatch(/drill first \(run first-2\)/);
  });
});

/**
 * Two setups of one cgroup at the same instant (two drills, one --name): each
 * judges the cgroup, then acts. The steps are called in the order a race would
 * run them, so the interleaving is exact, not timed.
 */
describe("two setups of one cgroup at once: the second never overwrites the first's marker", () => {
  const opts = (drill: string, runId: string, memoryMax = 256 * M) => ({ memoryMax, swapMax: 0, owner: { drill, runId } });
  const plan = (h: FakeHost, cg: ReturnType<typeof hybridTarget>, options: ReturnType<typeof opts> | { memoryMax: number; swapMax: number }) =>
    planSetup(cg, inspectForSetup(h.roots, cg, h.stateDir), options);
  const refusal = (fn: () => unknown): RefusedError => {
    try {
      fn();
    } catch (err) {
      expect(err).toBeInstanceOf(RefusedError);
      return err as RefusedError;
    }
    throw new Error("not refused");
  };

  it("both judge a fresh name; the first creates it; the second is refused, naming the first, and leaves its marker and dirs", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    const first = plan(host, cg, opts("first", "first-1"));
    const second = plan(host, cg, opts("second", "second-1", 512 * M));
    expect([first.ownership, second.ownership]).toEqual(["fresh", "fresh"]);
    let firstClaimed = false;
    applySetup(first, host.stateDir, undefined, () => (firstClaimed = !existsSync(cg.memory!.dir)));
    expect(firstClaimed).toBe(true); // claimed before anything was made
    const markerBefore = readFileSync(markerFile(host.stateDir, cg), "utf8");

    let secondClaimed = false;
    const err = refusal(() => applySetup(second, host!.stateDir, undefined, () => (secondClaimed = true)));
    expect(err.exitCode).toBe(3);
    expect(err.message).toMatch(/just taken by drill first \(run first-1\).*rollback --name first/);
    // up records the cgroup in its state only from `claimed`: the refused drill's rollback has nothing to tear down.
    expect(secondClaimed).toBe(false);
    expect(readFileSync(markerFile(host.stateDir, cg), "utf8")).toBe(markerBefore);
    expect(readMarker(host.stateDir, cg)!.owner).toEqual({ drill: "first", runId: "first-1" });
    expect(existsSync(cg.memory!.dir) && existsSync(cg.unified!.dir)).toBe(true);
    expect(readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8")).toBe(String(256 * M));
  });

  // On a --sysfs/--procfs tree, the rollback it names is on that tree, as every hint of setup's is (not the real /sys).
  it("the second's refusal names the first's rollback with setup's --state-dir, --sysfs and --procfs", () => {
    host = makeFakeHost("v2", { selfPath: "/drills" });
    const cg = hybridTarget(host);
    const first = plan(host, cg, opts("first", "first-1"));
    const second = plan(host, cg, opts("second", "second-1"));
    applySetup(first, host.stateDir);
    const way = /Run (.*) first, or pick another --name$/.exec(refusal(() => applySetup(second, host!.stateDir)).message);
    expect(pastedArgv(way![1]!)).toEqual(["drill", "--state-dir", host.stateDir, "--sysfs", host.sysfs, "--procfs", host.procfs, "rollback", "--name", "first"]);
  });

  it("the second acting while the first is between its marker and its mkdir is refused, and the first completes", () => {
    host = makeFakeHost("v2", { selfPath: "/drills" });
    const cg = hybridTarget(host);
    const first = plan(host, cg, opts("first", "first-1"));
    const second = plan(host, cg, opts("second", "second-1"));
    let inside: unknown = "not reached";
    // The first's +memory write comes after its intent marker and before its mkdir.
    const firstWrites = (file: string, value: string) => {
      if (file.endsWith("cgroup.subtree_control")) {
        try {
          applySetup(second, host!.stateDir);
          inside = null;
        } catch (err) {
          inside = err;
        }
      }
      writeFileSync(file, value);
    };
    const result = applySetup(first, host.stateDir, firstWrites);
    expect(inside).toBeInstanceOf(RefusedError);
    expect((inside as RefusedError).message).toMatch(/another setup of .* is running right now/);
    expect(result.created).toEqual([cg.unified!.dir]);
    expect(readMarker(host.stateDir, cg)).toMatchObject({ state: "created", owner: { drill: "first", runId: "first-1" } });
  });

  it("both judge an empty cgroup of drill cgroup setup (no owner) as theirs; only the first adopts it", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 128 * M, swapMax: 0 });
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "");
    const first = plan(host, cg, opts("first", "first-1", 256 * M));
    const second = plan(host, cg, opts("second", "second-1", 512 * M));
    expect([first.ownership, second.ownership]).toEqual(["ours", "ours"]);
    applySetup(first, host.stateDir);
    expect(refusal(() => applySetup(second, host!.stateDir)).message).toMatch(/just taken by drill first \(run first-1\)/);
    expect(readMarker(host.stateDir, cg)!.owner).toEqual({ drill: "first", runId: "first-1" });
    expect(readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8")).toBe(String(256 * M));
  });

  it("a marker torn down after the plan judged it is not written back", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-1"));
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "");
    const again = plan(host, cg, opts("first", "first-2", 512 * M));
    rmSync(markerFile(host.stateDir, cg));
    expect(refusal(() => applySetup(again, host!.stateDir)).message).toMatch(/marker .* was removed after this setup judged/);
    expect(readMarker(host.stateDir, cg)).toBeNull();
  });

  it("a lock left by a setup that died is taken over; one held by a live process refuses; none is left behind", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    const lock = markerLockFile(host.stateDir, cg);
    mkdirSync(path.dirname(lock), { recursive: true });
    const self = readProcessStat(new HostRoots(), process.pid);
    if (!self.ok) throw new Error("cannot read own /proc stat");
    writeFileSync(lock, JSON.stringify({ pid: process.pid, startTime: self.value.startTime }));
    expect(refusal(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, opts("first", "first-1"))).message).toMatch(new RegExp(`pid ${process.pid}\\) is running right now`));
    expect(readMarker(host.stateDir, cg)).toBeNull();

    writeFileSync(lock, JSON.stringify({ pid: process.pid, startTime: self.value.startTime + 1 })); // pid reused since: stale
    expect(setupWorkerCgroup(host.roots, cg, host.stateDir, opts("first", "first-1")).plan.ownership).toBe("fresh");
    expect(readdirSync(path.dirname(lock)).sort()).toEqual([path.basename(markerFile(host.stateDir, cg))]);
  });
});

describe("the owner in the marker", () => {
  it("a marker whose owner is malformed is refused, naming the file, not taken for no owner", () => {
    host = makeFakeHost("hybrid");
    const cg = hybridTarget(host);
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0 });
    const file = markerFile(host.stateDir, cg);
    writeFileSync(file, JSON.stringify({ ...readMarker(host.stateDir, cg), owner: { drill: "first" } }));
    expect(() => readMarker(host!.stateDir, cg)).toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is not a drill cgroup marker`));
  });
});
