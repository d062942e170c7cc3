import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { describeTeardown, drillOfRunId, findRunningDrills, rollbackHint, unknownDrillProblem, type RunningDrill } from "../../src/drill/rollback.js";
import { embeddedRedisDrill } from "../../src/drill/embeddedRedis.js";
import { writeState, type DrillState } from "../../src/drill/state.js";
import { drillRunFromEnviron } from "../../src/drill/strays.js";
import { fakeProcStat, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

/**
 * What a rollback with nothing in its own state dir finds on the host: drill
 * runs by DRILL_RUN_ID (and an embedded redis-server by its dir), each with
 * where its state is and how to roll it back. On a fake procfs.
 */

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

function fakeProcess(h: FakeHost, pid: number, comm: string, env: Record<string, string>, cwd = "/"): void {
  const dir = path.join(h.procfs, String(pid));
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "stat"), fakeProcStat(pid, comm, 1000 + pid));
  writeFileSync(path.join(dir, "environ"), Object.entries({ PATH: "/usr/bin", ...env }).map(([k, v]) => `${k}=${v}\0`).join(""));
  symlinkSync(cwd, path.join(dir, "cwd"));
}

function state(stateDir: string, name: string, runId: string, extra: Partial<DrillState> = {}): DrillState {
  const s: DrillState = {
    version: 1, name, runId, drillFile: "d.yaml", createdAt: "2026-01-01T00:00:00Z", phase: "running", queue: "jobs",
    redis: { url: "", embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: 1, startTime: null }, ...extra,
  };
  writeState(stateDir, s);
  return s;
}

describe("environ and run ids", () => {
  it("reads DRILL_RUN_ID and DRILL_STATE_DIR as whole entries", () => {
    expect(drillRunFromEnviron("A=1\0DRILL_RUN_ID=x-20260101000000-abcdef\0DRILL_STATE_DIR=/s\0")).toEqual({ runId: "x-20260101000000-abcdef", stateDir: "/s" });
    expect(drillRunFromEnviron("DRILL_RUN_ID=r\0")).toEqual({ runId: "r", stateDir: null });
    expect(drillRunFromEnviron("NOT_DRILL_RUN_ID=r\0DRILL_STATE_DIR=/s\0")).toBeNull();
  });

  it("takes the drill name out of a run id up made, and keeps a foreign id whole", () => {
    expect(drillOfRunId("my-drill-20261130184131-7fcb25")).toBe("my-drill");
    expect(drillOfRunId("handmade")).toBe("handmade");
  });
});

describe("findRunningDrills", () => {
  it("groups a run's processes, names its state dir and drill, adds the live up that owns it, and says how to roll it back", () => {
    host = makeFakeHost("v2");
    const h = host;
    const elsewhere = path.join(h.root, "elsewhere");
    const runId = "packing-20260101000000-aaaaaa";
    const redisDir = path.join(elsewhere, "packing", "redis");
    mkdirSync(redisDir, { recursive: true });
    state(elsewhere, "packing", runId, { redis: { url: "redis://127.0.0.1:7", embedded: { dir: redisDir, port: 7 } }, owner: { pid: 300, startTime: 1300 } });
    fakeProcess(h, 301, "node", { DRILL_RUN_ID: runId, DRILL_STATE_DIR: elsewhere });
    fakeProcess(h, 302, "pagetoucher", { DRILL_RUN_ID: runId, DRILL_STATE_DIR: elsewhere });
    fakeProcess(h, 303, "redis-server", {}, redisDir); // its environment is its title now
    fakeProcess(h, 300, "node", {}); // drill up, no run id of its own
    fakeProcess(h, 400, "bash", { DRILL_STATE_DIR: elsewhere }); // an operator's shell: not a drill process

    const running = findRunningDrills(h.roots);
    expect(running).toHaveLength(1);
    const [run] = running as [RunningDrill];
    expect(run).toMatchObject({ runId, drill: "packing", stateDir: elsewhere, complete: false, stateMissing: false });
    expect(run.processes.map((p) => `${p.pid} ${p.comm}`)).toEqual(["300 node", "301 node", "302 pagetoucher", "303 redis-server"]);
    expect(rollbackHint(run)).toBe(`drill --state-dir ${elsewhere} rollback --name packing`);
    // QA AE: a dir with a space and `*`, quoted as the shell reads it back.
    expect(rollbackHint({ ...run, stateDir: "/tmp/sd_x*y z'q" })).toBe(`drill --state-dir '/tmp/sd_x*y z'\\''q' rollback --name packing`);
    // A run id read from a process's environment names any drill: quoted too.
    expect(rollbackHint({ ...run, drill: "a b" })).toBe(`drill --state-dir ${elsewhere} rollback --name 'a b'`);
    expect(findRunningDrills(h.roots, "packing")).toHaveLength(1);
    expect(findRunningDrills(h.roots, "smoke")).toEqual([]);
  });

  it("a run whose processes do not say their state dir (an older up), one marked complete, one without state: each gets what to do instead", () => {
    host = makeFakeHost("v2");
    const h = host;
    const dir = path.join(h.root, "s");
    fakeProcess(h, 501, "node", { DRILL_RUN_ID: "old-20260101000000-bbbbbb" });
    state(dir, "done", "done-20260101000000-cccccc", { phase: "complete" });
    fakeProcess(h, 502, "node", { DRILL_RUN_ID: "done-20260101000000-cccccc", DRILL_STATE_DIR: dir });
    fakeProcess(h, 503, "node", { DRILL_RUN_ID: "gone-20260101000000-dddddd", DRILL_STATE_DIR: dir });

    const byDrill = Object.fromEntries(findRunningDrills(h.roots).map((r) => [r.drill, r]));
    expect(Object.keys(byDrill).sort()).toEqual(["done", "gone", "old"]);
    expect(byDrill.old!.stateDir).toBeNull();
    expect(rollbackHint(byDrill.old!)).toMatch(/not in its environment .*\/proc\/501\/cmdline.*drill --state-dir <that dir> rollback --name old/);
    expect(byDrill.done!.complete).toBe(true);
    expect(rollbackHint(byDrill.done!)).toMatch(/says complete.*kill -KILL 502/);
    expect(byDrill.gone!.stateMissing).toBe(true);
    expect(rollbackHint(byDrill.gone!)).toMatch(/no state of run gone-20260101000000-dddddd in .*kill -KILL 503/);
  });

  it("no process of any drill: nothing", () => {
    host = makeFakeHost("v2");
    fakeProcess(host, 601, "node", { HOME: "/root" });
    expect(findRunningDrills(host.roots)).toEqual([]);
  });
});

describe("embeddedRedisDrill: an embedded redis-server's --dir → its drill", () => {
  it.each([
    ["/var/lib/drill/smoke/runs/smoke-20261130180000-abcdef/redis", { stateDir: "/var/lib/drill", drill: "smoke" }],
    ["/var/lib/drill/smoke/redis", { stateDir: "/var/lib/drill", drill: "smoke" }],
    ["/tmp/other/data", null],
  ] as const)("%s", (dir, want) => {
    expect(embeddedRedisDrill(dir)).toEqual(want);
  });
});

describe("unknownDrillProblem: rollback --name of no drill, beside drills that are there", () => {
  const at = (name: string, extra: Partial<DrillState>): DrillState => ({
    version: 1, name, runId: `${name}-1`, drillFile: "d.yaml", createdAt: "2026-01-01T00:00:00Z", phase: "running", queue: "jobs",
    redis: { url: "", embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: 1, startTime: null }, ...extra,
  });
  const cg = (name: string) => ({ name, parent: "self", dirs: [] });

  it("names each drill with its phase and cgroup, an unreadable state as such, and every drill whose worker cgroup has that name", () => {
    const entries = [
      { name: "a", state: at("a", { cgroup: cg("infer") }) },
      { name: "b", state: at("b", { phase: "complete", cgroup: cg("infer") }) },
      { name: "c", unreadable: "/s/c/state.json is not a drill state file", error: new Error("/s/c/state.json is not a drill state file") },
    ];
    expect(unknownDrillProblem("infer", "/s", entries, "drill --state-dir /s")).toBe(
      '--name: no drill "infer" in /s (drills there: a (running, worker cgroup infer), b (complete, worker cgroup infer), c (state.json unreadable)); ' +
        "infer is the worker cgroup of drill a: drill --state-dir /s rollback --name a; infer is the worker cgroup of drill b: drill --state-dir /s rollback --name b",
    );
  });

  it("no drill uses a cgroup of that name: how to pick one", () => {
    expect(unknownDrillProblem("x", "/var/lib/drill", [{ name: "smoke", state: at("smoke", { phase: "starting" }) }], "drill")).toBe(
      '--name: no drill "x" in /var/lib/drill (drills there: smoke (starting)); roll back one of them (drill rollback --name <drill>), or give the --state-dir that drill up had',
    );
  });
});


// QA: a twin someone had removed by hand was reported "removed" by rollback.
describe("rollback's cgroup step line", () => {
  it("says which dirs it removed and which were already gone", () => {
    const line = describeTeardown({ kind: "removed", removed: ["/sys/fs/cgroup/memory/a"], alreadyGone: ["/sys/fs/cgroup/unified/drill-a-1"], killed: [], unlinked: [], method: ["empty"], forced: null, queuesServed: [], queuesServedUnread: null, left: [] });
    expect(line).toBe("nothing inside to stop; removed /sys/fs/cgroup/memory/a; already gone /sys/fs/cgroup/unified/drill-a-1");
  });

  // QA AB 6: a file named `served` in the state dir; the cgroup is removed all the same, and the line says what went unread.
  it("says the served records it could not read, after what it removed", () => {
    const unread = "cannot read /s/served: ENOTDIR (a file stands where drill keeps a directory: move it aside, or give --state-dir another directory)";
    const line = describeTeardown({ kind: "removed", removed: ["/sys/fs/cgroup/memory/a"], alreadyGone: [], killed: [], unlinked: [], method: ["empty"], forced: null, queuesServed: [], queuesServedUnread: unread, left: [] });
    expect(line).toBe(`nothing inside to stop; removed /sys/fs/cgroup/memory/a; the queues its workers served go unnamed: ${unread}`);
  });
});
