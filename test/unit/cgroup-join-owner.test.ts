import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { forcedJoinWarning, refuseForeignJoin, requireSetUpCgroup, type Joiner } from "../../src/cgroup/ready.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { writeState, type DrillState } from "../../src/drill/state.js";
import { RefusedError } from "../../src/errors.js";
import { makeFakeHost, v1MemoryFiles, v2MemoryFiles, type FakeHost, type FakeLayout } from "../helpers/cgroupFixtures.js";

/**
 * QA (S5): a worker or hog run by hand joined the worker cgroup of a drill
 * that was up (whose rollback then killed it unsaid), and inject ran in a
 * cgroup made by plain mkdir. Whom a cgroup belongs to, as worker and inject
 * judge it before they join: fake trees, so each layout's shape is certain.
 */

const hosts: FakeHost[] = [];
afterEach(() => hosts.splice(0).forEach((h) => h.cleanup()));

const M = 1024 * 1024;
const hand: Joiner = { command: "worker", force: false, runId: undefined };

function fakeHost(layout: FakeLayout): FakeHost {
  const h = makeFakeHost(layout);
  hosts.push(h);
  return h;
}

function computed(h: FakeHost, name: string): WorkerCgroup {
  return resolveWorkerCgroup(h.roots, requireLayout(h.roots), name, { kind: "self" });
}

/** What worker and inject do before the join: the cgroup as set up, then whose it is. */
function judge(h: FakeHost, cg: WorkerCgroup, joiner: Joiner = hand) {
  return refuseForeignJoin(h.roots, cg, requireSetUpCgroup(h.roots, cg, h.stateDir, "self"), h.stateDir, joiner);
}

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(RefusedError);
    return (err as Error).message;
  }
  throw new Error("not refused");
}

/** The worker cgroup of drill smoke's run smoke-1, as up sets it up, its state.json in `phase`. */
function drillCgroup(h: FakeHost, phase: DrillState["phase"]): WorkerCgroup {
  const cg = computed(h, "qa-join");
  setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 256 * M, swapMax: 0, owner: { drill: "smoke", runId: "smoke-1" } });
  writeState(h.stateDir, {
    version: 1,
    name: "smoke",
    runId: "smoke-1",
    drillFile: "drills/smoke.yaml",
    createdAt: new Date().toISOString(),
    phase,
    queue: "jobs",
    redis: { url: "", embedded: null },
    cgroup: { name: "qa-join", parent: "self", dirs: cg.dirs.map((d) => d.dir) },
    processes: [],
    fileDir: null,
    owner: { pid: 1, startTime: null },
  });
  return cg;
}

/** A cgroup made by plain mkdir, every dir drill would use (hybrid: the v1 memory dir and its unified twin), with a limit. */
function plainCgroup(h: FakeHost, name: string): WorkerCgroup {
  const cg = computed(h, name);
  for (const dir of cg.dirs) {
    mkdirSync(dir.dir, { recursive: true });
    const files = dir.version === 1 ? v1MemoryFiles({ "memory.limit_in_bytes": `${64 * M}\n` }) : v2MemoryFiles({ "memory.max": `${64 * M}\n` });
    for (const [file, text] of Object.entries(files)) writeFileSync(path.join(dir.dir, file), text);
  }
  return cg;
}

describe.each(["hybrid", "v2"] as const)("%s: the worker cgroup of a drill that is up", (layout) => {
  it("a worker or hog run by hand is refused, naming the drill, its rollback and --force", () => {
    const h = fakeHost(layout);
    const cg = drillCgroup(h, "running");
    const message = refusal(() => judge(h, cg));
    const where = cg.dirs.map((d) => d.dir).join(" and ");
    expect(message).toBe(
      `${where} ${cg.dirs.length > 1 ? "are" : "is"} the worker cgroup of drill smoke (run smoke-1), which is up (running); refusing to run a worker started by hand in it ` +
        `(its rollback would kill it with the drill's own). Run drill --state-dir ${h.stateDir} --sysfs ${h.sysfs} --procfs ${h.procfs} rollback --name smoke first, or pick another --name; --force joins it anyway`,
    );
    expect(refusal(() => judge(h, cg, { command: "inject", force: false, runId: "smoke-0" }))).toContain("refusing to run a hog started by hand in it");
  });

  it("that drill's own child (up gives it DRILL_RUN_ID) joins; --force joins and is told whose it is", () => {
    const h = fakeHost(layout);
    const cg = drillCgroup(h, "running");
    expect(judge(h, cg, { command: "worker", force: false, runId: "smoke-1" })).toBeNull();
    const forced = judge(h, cg, { command: "inject", force: true, runId: undefined });
    expect(forced).toMatchObject({ drill: "smoke", runId: "smoke-1", phase: "running" });
    expect(forcedJoinWarning(forced!, cg, "inject")).toBe(
      "warning: --force: inject joins cgroup qa-join, the worker cgroup of drill smoke (run smoke-1), which is up (running): its rollback kills this hog with the drill's own",
    );
  });

  it("once that drill is rolled back (complete), its leftover cgroup is anyone's to join", () => {
    const h = fakeHost(layout);
    const cg = drillCgroup(h, "complete");
    expect(judge(h, cg)).toBeNull();
  });

  it("a cgroup `drill cgroup setup` made (no drill) is joined, as the step-by-step path does", () => {
    const h = fakeHost(layout);
    const cg = computed(h, "steps");
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 64 * M, swapMax: 0 });
    expect(judge(h, cg)).toBeNull();
  });
});

describe.each(["hybrid", "v2"] as const)("%s: a cgroup drill did not create", (layout) => {
  it("plain mkdir of every dir, with a limit: refused (also with --force), as setup refuses to adopt it", () => {
    const h = fakeHost(layout);
    const cg = plainCgroup(h, "theirs");
    const message = refusal(() => judge(h, cg, { command: "inject", force: true, runId: undefined }));
    expect(message).toBe(
      `cgroup theirs was not created by drill: ${cg.limits.dir} already exists and drill did not create it (no marker in ${path.join(h.stateDir, "cgroups")}); ` +
        "refusing to run inject in it. If drill made it with another --state-dir, give that one; else pick another --name",
    );
  });

  it("a drill's tasks in it (its state in another --state-dir): names that run and state dir", () => {
    const h = fakeHost(layout);
    const cg = plainCgroup(h, "elsewhere");
    const pid = 31337;
    for (const dir of cg.dirs) writeFileSync(path.join(dir.dir, "cgroup.procs"), `${pid}\n`);
    mkdirSync(path.join(h.procfs, String(pid)));
    writeFileSync(path.join(h.procfs, String(pid), "comm"), "node\n");
    writeFileSync(path.join(h.procfs, String(pid), "environ"), "PATH=/usr/bin\0DRILL_RUN_ID=qaSa-1\0DRILL_STATE_DIR=/tmp/qaS-state\0");
    expect(refusal(() => judge(h, cg))).toMatch(
      new RegExp(`^cgroup elsewhere was not created by drill: .* with tasks ${pid} \\(node\\) and drill did not create it .*; refusing to run worker in it\\. It holds tasks of drill run qaSa-1 \\(--state-dir /tmp/qaS-state\\): pick another --name$`),
    );
  });

  it("drill's cgroup removed and made again by someone else (another inode): refused", () => {
    const h = fakeHost(layout);
    const cg = computed(h, "again");
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 64 * M, swapMax: 0 });
    const dir = cg.limits.dir;
    // Made while the old one still exists, so it cannot get the old inode back.
    const other = `${dir}.new`;
    mkdirSync(other);
    for (const file of readdirSync(dir)) writeFileSync(path.join(other, file), /^memory\.(max|limit_in_bytes)$/.test(file) ? `${64 * M}\n` : "");
    rmSync(dir, { recursive: true });
    renameSync(other, dir);
    expect(refusal(() => judge(h, cg))).toMatch(/^cgroup again was not created by drill: .* was removed and recreated by someone else since drill made it \(inode \d+, drill recorded \d+\); refusing to run worker in it\. Pick another --name$/);
  });
});
