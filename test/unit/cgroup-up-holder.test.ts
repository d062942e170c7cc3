import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { isUpWith, setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile } from "../../src/cgroup/stateFiles.js";
import { teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import { statePath, writeState, type DrillState } from "../../src/drill/state.js";
import { RefusedError } from "../../src/errors.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

/**
 * The operator's own `drill cgroup teardown` / `drill cgroup setup` on the
 * worker cgroup of a drill that is up (its marker names the drill, its
 * state.json says it is not complete): refused, naming the drill and its
 * rollback, as up refuses a cgroup another drill holds. Fake hybrid trees.
 */

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

const M = 1024 * 1024;

/** A cgroup `drill up` of drill smoke (run smoke-1) set up, emptied as the kernel shows an empty cgroup (removable). */
function setUp(h: FakeHost): WorkerCgroup {
  const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "qa-up", { kind: "self" });
  setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0, owner: { drill: "smoke", runId: "smoke-1" } });
  for (const dir of cg.dirs) for (const file of readdirSync(dir.dir)) rmSync(path.join(dir.dir, file));
  return cg;
}

/** Drill smoke's state.json as up writes it: `phase`, its run, and the cgroup dirs it recorded. */
function drillState(h: FakeHost, phase: DrillState["phase"], runId: string, dirs: string[]): void {
  writeState(h.stateDir, {
    version: 1,
    name: "smoke",
    runId,
    drillFile: "drills/smoke.yaml",
    createdAt: new Date().toISOString(),
    phase,
    queue: "jobs",
    redis: { url: "", embedded: null },
    cgroup: { name: "qa-up", parent: "self", dirs },
    processes: [],
    fileDir: null,
    owner: { pid: 1, startTime: null },
  });
}

const dirsOf = (cg: WorkerCgroup) => cg.dirs.map((d) => d.dir);

async function refused(p: Promise<unknown>): Promise<RefusedError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(RefusedError);
    return err as RefusedError;
  }
  throw new Error("not refused");
}

describe("drill cgroup teardown of the worker cgroup of a drill that is up", () => {
  it.each(["starting", "running", "stopped", "rolling_back"] as const)("%s: refused (exit 3) naming the drill, its rollback and --force; dirs, tasks and marker left", async (phase) => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, phase, "smoke-1", dirsOf(cg));
    writeFileSync(path.join(cg.memory!.dir, "cgroup.procs"), "31337\n");
    const markerBefore = readFileSync(markerFile(host.stateDir, cg), "utf8");
    const err = await refused(teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 }));
    expect(err.exitCode).toBe(3);
    // The v1 memory dir and its unified twin are one cgroup's two dirs: plural (QA: "<dir> and <twin> is the worker cgroup").
    expect(err.message).toContain(`${cg.memory!.dir} and ${cg.unified!.dir} are the worker cgroup of drill smoke (run smoke-1), which is up (${phase})`);
    expect(err.message).toContain(`Run drill --state-dir ${host.stateDir} --sysfs ${host.sysfs} --procfs ${host.procfs} rollback --name smoke`);
    expect(err.message).toMatch(/--force/);
    expect(cg.dirs.every((d) => existsSync(d.dir))).toBe(true);
    expect(readFileSync(path.join(cg.memory!.dir, "cgroup.procs"), "utf8")).toBe("31337\n");
    expect(readFileSync(markerFile(host.stateDir, cg), "utf8")).toBe(markerBefore);
  });

  it("a run that recorded the dirs but has not yet rewritten the marker (still the earlier run's) holds it too", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, "starting", "smoke-2", dirsOf(cg));
    expect((await refused(teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 }))).message).toMatch(/drill smoke \(run smoke-2\), which is up \(starting\)/);
  });

  it("a state.json that cannot be read might be the drill that is up: refused, naming the file", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    mkdirSync(path.dirname(statePath(host.stateDir, "smoke")), { recursive: true });
    writeFileSync(statePath(host.stateDir, "smoke"), "{not json");
    const err = await refused(teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 }));
    expect(err.message).toContain(`whose state ${statePath(host.stateDir, "smoke")} cannot be read`);
    expect(cg.dirs.every((d) => existsSync(d.dir))).toBe(true);
  });

  it("--force tears it down and says whose it was", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, "running", "smoke-1", dirsOf(cg));
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, force: true });
    expect(torn).toMatchObject({ kind: "removed", forced: { drill: "smoke", runId: "smoke-1", phase: "running" } });
    expect(cg.dirs.some((d) => existsSync(d.dir))).toBe(false);
  });

  it.each([
    ["complete", "complete" as const, "smoke-1", true],
    ["rolled back and up again on another --name", "running" as const, "smoke-2", false],
  ])("a drill %s does not block it", async (_label, phase, runId, sameDirs) => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, phase, runId, sameDirs ? dirsOf(cg) : ["/sys/fs/cgroup/memory/elsewhere"]);
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 });
    expect(torn).toMatchObject({ kind: "removed", forced: null });
    expect(cg.dirs.some((d) => existsSync(d.dir))).toBe(false);
  });

  it("the drill's own rollback (owner given) tears it down while its state says rolling_back", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, "rolling_back", "smoke-1", dirsOf(cg));
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, owner: { drill: "smoke", runId: "smoke-1" } });
    expect(torn).toMatchObject({ kind: "removed", forced: null });
  });
});

describe("drill cgroup setup of the worker cgroup of a drill that is up", () => {
  const limit = (cg: WorkerCgroup) => readFileSync(path.join(cg.memory!.dir, "memory.limit_in_bytes"), "utf8");

  it("is refused (exit 3) naming the drill and its rollback; the limit is not rewritten; once complete it is", () => {
    host = makeFakeHost("hybrid");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "qa-up", { kind: "self" });
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 256 * M, swapMax: 0, owner: { drill: "smoke", runId: "smoke-1" } });
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "");
    drillState(host, "running", "smoke-1", dirsOf(cg));
    let err: unknown = null;
    try {
      setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 512 * M, swapMax: 0 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RefusedError);
    expect((err as RefusedError).message).toMatch(/ are the worker cgroup of drill smoke \(run smoke-1\), which is up \(running\); refusing to rewrite its limits/);
    expect((err as RefusedError).message).toContain(`rollback --name smoke first, or pick another --name`);
    expect(limit(cg)).toBe(String(256 * M));

    drillState(host, "complete", "smoke-1", dirsOf(cg));
    expect(setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 512 * M, swapMax: 0 }).plan.ownership).toBe("ours");
    expect(limit(cg)).toBe(String(512 * M));
  });

  it("also when its dirs are gone: setup would make them afresh and drop the drill from the marker", () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host);
    drillState(host, "running", "smoke-1", dirsOf(cg));
    for (const dir of cg.dirs) rmSync(dir.dir, { recursive: true });
    expect(() => setupWorkerCgroup(host!.roots, cg, host!.stateDir, { memoryMax: 512 * M, swapMax: 0 })).toThrow(/worker cgroup of drill smoke/);
    expect(cg.dirs.some((d) => existsSync(d.dir))).toBe(false);
  });
});

describe("isUpWith", () => {
  const owner = { drill: "smoke", runId: "smoke-1" };
  const state = (phase: DrillState["phase"], runId: string, dirs: string[] | null) => ({ phase, runId, cgroup: dirs ? { name: "x", parent: "self", dirs } : null });
  it.each([
    ["no state", null, false],
    ["complete", state("complete", "smoke-1", ["/a"]), false],
    ["running, this run", state("running", "smoke-1", null), true],
    ["stopped, this run (gate and worker run until rollback)", state("stopped", "smoke-1", ["/a"]), true],
    ["starting, a new run that recorded these dirs", state("starting", "smoke-2", ["/a"]), true],
    ["running, a new run on other dirs", state("running", "smoke-2", ["/b"]), false],
  ])("%s", (_label, s, up) => {
    expect(isUpWith(s, owner, ["/a"])).toBe(up);
  });
});
