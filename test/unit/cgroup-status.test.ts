import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { readCgroupStatus } from "../../src/cgroup/status.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

// QA: a task moved into a child of the twin showed as "tasks none", then teardown killed it.
describe("cgroup status: tasks", () => {
  it("lists a task in a child cgroup of the drill's cgroup, with the child's dir", () => {
    host = makeFakeHost("hybrid");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "t1", { kind: "self" });
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const twin = cg.dirs.find((d) => d.version === 2)!.dir;
    for (const d of cg.dirs) writeFileSync(path.join(d.dir, "cgroup.procs"), "");
    const kid = path.join(twin, "kid");
    mkdirSync(kid);
    writeFileSync(path.join(kid, "cgroup.procs"), "4242\n");
    const status = readCgroupStatus(host.roots, cg, host.stateDir);
    expect(status.tasks).toEqual([{ pid: 4242, comm: null, dirs: [kid] }]);
  });
});
