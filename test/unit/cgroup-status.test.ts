import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { Chalk } from "chalk";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { readCgroupStatus } from "../../src/cgroup/status.js";
import { cgroupStatusAction } from "../../src/commands/cgroup.run.js";
import type { Output } from "../../src/output.js";
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

// QA: a cgroup.procs that could not be read (missing, garbage) showed as `tasks none` and
// `"tasks": []`, beside its `missing` entry (listed twice): an unreadable value is null, never empty.
describe("cgroup status: cgroup.procs unreadable", () => {
  it.each([
    ["missing", null, "missing"],
    ["garbage", "12\nabc\n", 'not a pid: "abc"'],
  ])("%s: tasks null (text `tasks n/a`), the file in missing once", async (_n, content, reason) => {
    host = makeFakeHost("v2");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "t2", { kind: "self" });
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const procs = path.join(cg.limits.dir, "cgroup.procs");
    if (content === null) rmSync(procs, { force: true });
    else writeFileSync(procs, content);
    const status = readCgroupStatus(host.roots, cg, host.stateDir);
    expect(status.tasks).toBeNull();
    expect(status.missing.filter((m) => m.file === procs)).toEqual([{ file: procs, reason }]);

    const out: string[] = [];
    const output = { out: (l: string) => out.push(l), err: () => undefined, json: () => undefined, document: () => undefined, color: new Chalk({ level: 0 }), isTTY: false, utf8: true } as unknown as Output;
    await cgroupStatusAction({ redisUrl: undefined, procfs: host.procfs, sysfs: host.sysfs, stateDir: host.stateDir, json: false, color: false }, { name: "t2", parent: "self" }, output);
    expect(out.find((l) => l.trimStart().startsWith("tasks"))).toBe("  tasks    n/a");
  });
});
