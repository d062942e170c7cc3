import { describe, expect, it } from "vitest";
import { adoptRecordedSince } from "../../src/drill/rollback.js";
import type { DrillState, ProcessRecord } from "../../src/drill/state.js";

const proc = (key: string, role: ProcessRecord["role"], pid: number): ProcessRecord => ({ role, key, pid, startTime: pid * 10, files: [], intendedAt: "2026-12-01T16:00:00.000Z" });
const state = (runId: string, processes: ProcessRecord[], over: Partial<DrillState> = {}): DrillState =>
  ({ runId, processes, cgroup: null, fileDir: null, redis: { url: "", embedded: null }, ...over }) as unknown as DrillState;

// Code review: a hog up spawned between the rollback's first write and its
// stop of up was in up's last write of state.json only; the rollback went on
// with its own copy and dropped the record (and the hog's file with it).
describe("adoptRecordedSince: what up recorded before the rollback stopped it", () => {
  it("adds this run's records the rollback's copy lacks, and only those", () => {
    const mine = state("r1", [proc("gate", "gate", 10), proc("worker", "worker", 11)]);
    adoptRecordedSince(mine, state("r1", [proc("gate", "gate", 99), proc("worker", "worker", 11), proc("hog-2", "hog", 12)]));
    expect(mine.processes.map((p) => [p.key, p.pid])).toEqual([["gate", 10], ["worker", 11], ["hog-2", 12]]);
  });

  // QA: up stopped mid-start had claimed its cgroup, made its file dir and started its Redis after the rollback read the state.
  it("the cgroup, file dir and Redis up recorded after the rollback read the state; never over what it has", () => {
    const cgroup = { name: "cg", parent: "self", dirs: ["/sys/fs/cgroup/memory/x/cg"] };
    const redis = { url: "redis://127.0.0.1:40000", embedded: { dir: "/s/d/runs/r1/redis", port: 40000 } };
    const mine = state("r1", []);
    adoptRecordedSince(mine, state("r1", [], { cgroup, fileDir: "/var/tmp/drill-r1", redis }));
    expect(mine).toMatchObject({ cgroup, fileDir: "/var/tmp/drill-r1", redis });
    const given = state("r1", [], { redis: { url: "redis://127.0.0.1:6390", embedded: null }, fileDir: "/var/tmp/a" });
    adoptRecordedSince(given, state("r1", [], { redis, fileDir: "/var/tmp/b" }));
    expect(given).toMatchObject({ redis: { url: "redis://127.0.0.1:6390" }, fileDir: "/var/tmp/a" });
  });

  it("another run's state, or none, changes nothing", () => {
    const mine = state("r1", [proc("gate", "gate", 10)]);
    adoptRecordedSince(mine, state("r2", [proc("hog-1", "hog", 12)]));
    adoptRecordedSince(mine, null);
    expect(mine.processes.map((p) => p.key)).toEqual(["gate"]);
  });
});
