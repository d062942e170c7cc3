import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile, readMarker, type CgroupMarker } from "../../src/cgroup/stateFiles.js";
import { foreignOwner, teardownWorkerCgroup } from "../../src/cgroup/teardown.js";
import { RefusedError } from "../../src/errors.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

/**
 * Rollback's second safeguard: drill X's rollback tears down the cgroup it
 * recorded only while the marker does not name another drill (an operator's
 * teardown and another drill's up can put a new cgroup at the same path).
 */

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

const M = 1024 * 1024;
const owner = (drill: string, runId: string) => ({ drill, runId });

/** A hybrid cgroup drill set up (marker with `by` as owner), its dirs emptied as the kernel shows an empty cgroup (no task, removable). */
function setUp(h: FakeHost, by: { drill: string; runId: string } | null): WorkerCgroup {
  const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "t1", { kind: "self" });
  setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0, ...(by ? { owner: by } : {}) });
  for (const dir of cg.dirs) for (const file of readdirSync(dir.dir)) rmSync(path.join(dir.dir, file));
  return cg;
}

describe("teardown with the rolling-back drill as owner", () => {
  it("refuses a cgroup another drill owns: RefusedError naming it, dirs, tasks and marker left", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, owner("second", "second-1"));
    writeFileSync(path.join(cg.memory!.dir, "cgroup.procs"), "31337\n");
    const markerBefore = readFileSync(markerFile(host.stateDir, cg), "utf8");
    const torn = teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, owner: owner("first", "first-1") });
    await expect(torn).rejects.toBeInstanceOf(RefusedError);
    await expect(torn).rejects.toThrow(/worker cgroup of drill second \(run second-1\) now, not of drill first .*leaving it and its tasks alone/);
    expect(cg.dirs.every((d) => existsSync(d.dir))).toBe(true);
    expect(readFileSync(path.join(cg.memory!.dir, "cgroup.procs"), "utf8")).toBe("31337\n");
    expect(readFileSync(markerFile(host.stateDir, cg), "utf8")).toBe(markerBefore);
  });

  it("removes the drill's own cgroup, also when the marker still names its earlier run (adopted, marker not yet rewritten)", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, owner("first", "first-1"));
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, owner: owner("first", "first-2") });
    expect(torn.kind).toBe("removed");
    expect(cg.dirs.some((d) => existsSync(d.dir))).toBe(false);
    expect(readMarker(host.stateDir, cg)).toBeNull();
  });

  it("removes a cgroup whose marker has no owner (drill cgroup setup, older versions), as before", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, null);
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500, owner: owner("first", "first-1") });
    expect(torn.kind).toBe("removed");
  });

  it("drill cgroup teardown (no owner given) removes whichever drill's cgroup, as before", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, owner("second", "second-1"));
    const torn = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir, timeoutMs: 500 });
    expect(torn.kind).toBe("removed");
    expect(cg.dirs.some((d) => existsSync(d.dir))).toBe(false);
  });

  it("a cgroup drill did not create (no marker): each task named once, though a hybrid host lists it in both dirs", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, null);
    rmSync(markerFile(host.stateDir, cg));
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "31337\n31338\n");
    const refused = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(RefusedError);
    const message = (refused as Error).message;
    expect(message).toContain("not created by drill");
    expect(message.match(/31337 \(/g)).toHaveLength(1);
    expect(message.match(/31338 \(/g)).toHaveLength(1);
  });

  // QA S 8: torn down from another --state-dir, a live drill's cgroup was only "not created by drill".
  it("a drill's tasks in it: names that run and its --state-dir, where its rollback removes it", async () => {
    host = makeFakeHost("hybrid");
    const cg = setUp(host, null);
    rmSync(markerFile(host.stateDir, cg));
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), "31339\n");
    mkdirSync(host.roots.proc("31339"), { recursive: true });
    writeFileSync(host.roots.proc("31339", "environ"), "PATH=/usr/bin\0DRILL_RUN_ID=qaSa-1\0DRILL_STATE_DIR=/tmp/qaS-state\0");
    const refused = await teardownWorkerCgroup(host.roots, cg, { stateDir: host.stateDir }).catch((err: unknown) => err);
    expect((refused as Error).message).toMatch(/not created by drill .*; it holds tasks of drill run qaSa-1 \(--state-dir \/tmp\/qaS-state\): roll that drill back from its --state-dir$/);
  });

  it("foreignOwner compares the drill, not the run", () => {
    const marker = (o?: { drill: string; runId: string }) => ({ owner: o }) as CgroupMarker;
    expect(foreignOwner(marker(owner("second", "s-1")), owner("first", "f-1"))).toEqual(owner("second", "s-1"));
    expect(foreignOwner(marker(owner("first", "f-1")), owner("first", "f-2"))).toBeNull();
    expect(foreignOwner(marker(), owner("first", "f-1"))).toBeNull();
    expect(foreignOwner(marker(owner("second", "s-1")), undefined)).toBeNull();
  });
});
