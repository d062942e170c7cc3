// QA: a watch started beside a drill found the drill's embedded Redis from its
// state, and after the drill's rollback stopped that Redis it said only
// "unreachable ... until it answers", waiting for good.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cgroupWatch, redisWatch, rolledBack } from "../../src/commands/watch.run.js";
import { writeState, type DrillState } from "../../src/drill/state.js";
import { fail, ok } from "../../src/host/kernelFile.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "drill-watch-rb-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function drill(name: string, phase: DrillState["phase"], embedded: boolean, rollbackAt?: string): void {
  mkdirSync(path.join(dir, name), { recursive: true });
  writeState(dir, {
    version: 1,
    name,
    runId: `${name}-20251130120000-abcdef`,
    drillFile: "drills/smoke.yaml",
    createdAt: "2025-11-30T12:00:00.000Z",
    phase,
    queue: "jobs",
    redis: { url: "redis://127.0.0.1:7001", embedded: embedded ? { dir: path.join(dir, name, "redis"), port: 7001 } : null },
    cgroup: null,
    processes: [],
    fileDir: null,
    owner: { pid: 999_999, startTime: null },
    ...(rollbackAt ? { rollback: { at: rollbackAt, left: [] } } : {}),
  });
}

describe("watch: the drill whose Redis it reads was rolled back", () => {
  drill("done", "complete", true, "2025-11-30T12:05:00.000Z");
  drill("going", "rolling_back", true);
  drill("up", "running", true);
  drill("given", "complete", false, "2025-11-30T12:05:00.000Z");

  it("says so for an embedded Redis, rolled back or rolling back; not for a drill still up, a given Redis, or no drill", () => {
    expect(rolledBack(dir, ["done"])).toBe("drill done was rolled back at 2025-11-30T12:05:00.000Z, and its embedded Redis stops with it: nothing here will answer again; stop this watch (Ctrl-C or q)");
    expect(rolledBack(dir, ["going"])).toContain("drill going is being rolled back, and its embedded Redis stops with it");
    expect(rolledBack(dir, ["up"])).toBeNull();
    expect(rolledBack(dir, ["given"])).toBeNull();
    expect(rolledBack(dir, [])).toBeNull();
    expect(rolledBack(dir, ["nosuch"])).toBeNull();
  });

  it("the unreachable line carries it in place of waiting for an answer", () => {
    const said: string[] = [];
    const watch = redisWatch("redis://127.0.0.1:7001", (l) => said.push(l), () => rolledBack(dir, ["done"]));
    watch(fail("redis://127.0.0.1:7001", "connect ECONNREFUSED"), 1000);
    expect(said).toEqual([
      "watch: Redis redis://127.0.0.1:7001 unreachable: connect ECONNREFUSED; drill done was rolled back at 2025-11-30T12:05:00.000Z, and its embedded Redis stops with it: nothing here will answer again; stop this watch (Ctrl-C or q)",
    ]);
  });
});

// QA W 9 re-check: rediss:// to a plain server read "unreachable: connect ETIMEDOUT" and nothing of TLS.
describe("watch: rediss:// that never answers", () => {
  it("says what rediss:// is", () => {
    const said: string[] = [];
    redisWatch("rediss://127.0.0.1:7001", (l) => said.push(l))(fail("rediss://127.0.0.1:7001", "connect ETIMEDOUT"), 1000);
    expect(said).toEqual([
      "watch: Redis rediss://127.0.0.1:7001 unreachable: connect ETIMEDOUT (rediss:// is TLS: a Redis without TLS never answers its handshake; redis:// for a plain one); queue fields stay null (listed in missing) until it answers",
    ]);
  });
});

describe("watch: the worker cgroup goes and comes", () => {
  it("says once when it goes and once when it is there (again); absent from the start is no change", () => {
    const said: string[] = [];
    const watch = cgroupWatch((l) => said.push(l));
    const gone = fail("/sys/fs/cgroup/memory/x", "worker cgroup does not exist");
    const there = ok({ dir: "/sys/fs/cgroup/memory/x" });
    for (const reading of [there, there, gone, gone, there, there]) watch(reading);
    expect(said).toEqual([
      "watch: worker cgroup /sys/fs/cgroup/memory/x gone (worker cgroup does not exist): its cg_* fields stay null (listed in missing) until it is there again",
      "watch: worker cgroup /sys/fs/cgroup/memory/x there now: its cg_* fields are read",
    ]);
    const fromStart: string[] = [];
    const late = cgroupWatch((l) => fromStart.push(l));
    late(gone);
    late(gone);
    expect(fromStart).toEqual([]);
    late(there);
    expect(fromStart).toEqual(["watch: worker cgroup /sys/fs/cgroup/memory/x there now: its cg_* fields are read"]);
  });
});
