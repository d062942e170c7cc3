import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { watchSample } from "../helpers/watchSample.js";
import { exportKeys } from "../../src/drill/drain.js";
import { writeState, type DrillState } from "../../src/drill/state.js";
import { queueKeys } from "../../src/queue/keys.js";
import { buildReport } from "../../src/report/build.js";
import { gatherReport } from "../../src/report/gather.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { pastedArgv } from "../helpers/pasted.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/**
 * The live read of `<q>:events` must hold what the window and the figures
 * need, as an export does: a report read 15 min after the run (QA: 0
 * decisions, the read began at now − 10m), and the admit of a job that
 * finished in the window but was admitted before it (QA: its slot was
 * measured from enqueue_ts, queue waiting counted as stall).
 */

const SEC = 1000;
const MIN = 60 * SEC;
const T0 = Date.parse("2025-11-30T12:00:00.000Z");

let server: RedisServer;
let redis: Redis;
let stateDir: string;

beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.url);
  stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-gather-"));
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

const xadd = (key: string, ts: number, reason: string, job: string, figures: string) =>
  redis.xadd(key, `${ts}-0`, "reason", reason, "job", job, "figures", figures, "ts", String(ts));
const doneJson = (id: string, enqueueTs: number, doneTs: number) =>
  JSON.stringify({ id, first_token_ms: 900, deadline_ms: 8000, late: false, tokens_out: 8, prompt_tokens: 1000, completion_tokens: 8, attempt: 0, enqueue_ts: enqueueTs, first_token_ts: enqueueTs + 900, done_ts: doneTs });

describe("report's live read of the decision stream", () => {
  it("without --since, 15 min after the run ended: the run's decisions, as 2 min after", async () => {
    await redis.del("wjobs:events", "wjobs:done");
    await xadd("wjobs:events", T0 + 1 * SEC, "admit", "1", "packed=1000 limit=32000");
    await xadd("wjobs:events", T0 + 2 * SEC, "reject_host_pressure", "2", "psi=12.40 route=retry");
    await xadd("wjobs:events", T0 + 3 * SEC, "reject_host_pressure", "3", "psi=12.40 route=retry");
    await redis.rpush("wjobs:done", doneJson("1", T0 + 500, T0 + 3500));
    const state: DrillState = {
      version: 1,
      name: "w",
      runId: "w-1",
      drillFile: "drills/smoke.yaml",
      createdAt: new Date(T0 - 5 * SEC).toISOString(),
      phase: "stopped",
      queue: "wjobs",
      redis: { url: server.url, embedded: null },
      cgroup: null,
      processes: [],
      fileDir: null,
      owner: { pid: process.pid, startTime: null },
      ended: { verdict: "ran", at: new Date(T0 + 4 * SEC).toISOString(), reason: null, pushed: 3, notPacked: 0 },
    };
    writeState(stateDir, state);
    for (const after of [2 * MIN, 15 * MIN]) {
      const { inputs, nowMs } = await gatherReport({ stateDir, name: "w", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + after });
      const r = buildReport(inputs, nowMs, 10 * MIN);
      expect(r.decisions).toMatchObject({ total: 3, rejects: 2 });
      expect(r.first_token?.finished).toBe(1);
    }
  });

  it("--name with another drill's --queue: a note says which lines are the drill's run and which the queue's", async () => {
    await xadd("otherq:events", T0 + 1 * SEC, "admit", "9", "packed=1000 limit=32000");
    const { inputs } = await gatherReport({ stateDir, name: "w", queue: "otherq", redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + 2 * MIN });
    expect(inputs.gatherNotes).toContain(
      "queue otherq is not drill w's own (wjobs): the run's lines (when it ran, how it ended, what up packed) and its pressure figures (its recording) are that drill's; the decisions, first token and totals are queue otherq's",
    );
    const own = await gatherReport({ stateDir, name: "w", queue: "wjobs", redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + 2 * MIN });
    expect(own.inputs.gatherNotes.join("\n")).not.toContain("is not drill w's own");
  });

  // A drill on a shared Redis, rolled back and exported, its keys then removed: "give --queue" named another queue there.
  it("--name with a --queue its Redis does not hold: the drill's queue and the command that reports it from its export", async () => {
    await redis.set("aaq:seq", "3");
    await redis.xadd("xq:events", `${T0 + 1 * SEC}-0`, "reason", "admit", "job", "1", "figures", "packed=1000 limit=32000", "ts", String(T0 + 1 * SEC));
    const gone: DrillState = { version: 1, name: "x", runId: "x-1", drillFile: "d.yaml", createdAt: new Date(T0 - 5 * SEC).toISOString(), phase: "complete", queue: "xq", redis: { url: server.url, embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: process.pid, startTime: null } };
    writeState(stateDir, gone);
    await exportKeys(redis, queueKeys("xq"), path.join(stateDir, "x", `final-${new Date(T0 + 10 * SEC).toISOString().replace(/[:.]/g, "-")}.jsonl`));
    await redis.del("xq:events");
    const err = (await gatherReport({ stateDir, name: "x", queue: "nosuchq", redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + 2 * MIN }).catch((e: unknown) => e)) as Error;
    expect(err.message).toMatch(/^--queue: Redis \S+ holds no key of queue "nosuchq"; it holds queues .*aaq.*; drill x ran on queue xq: `(.+)` reports it$/);
    expect(err.message).not.toContain("give --queue");
    const pasted = pastedArgv(/`(.+)`/.exec(err.message)![1]!);
    expect(pasted).toEqual(["drill", "--state-dir", stateDir, "report", "--name", "x"]);
    // That command reads the drill's export.
    const { inputs } = await gatherReport({ stateDir, name: "x", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + 2 * MIN });
    expect(inputs.source.kind).toBe("export");
    expect(inputs.events?.map((e) => e.job)).toEqual(["1"]);
  });

  // The rollback that finishes an unfinished one acts on cgroups: on the tree the report was given, not the real /sys.
  it("the drill's rollback command is on the state dir and tree the report read", async () => {
    const sysfs = path.join(stateDir, "fake sys");
    const { inputs } = await gatherReport({ stateDir, name: "w", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN, now: () => T0 + 2 * MIN, roots: new HostRoots("/proc", sysfs) });
    expect(pastedArgv(inputs.drill!.rollbackCommand)).toEqual(["drill", "--state-dir", stateDir, "--sysfs", sysfs, "rollback", "--name", "w"]);
  });

  it("a job admitted before the window and finished in it: its slot from its admit, as from an export", async () => {
    await redis.del("sjobs:events", "sjobs:done");
    // enqueued at 0, admitted at 8 s, done at 20 s; the window (--since 15s, now 25 s) starts at 10 s.
    await xadd("sjobs:events", T0 + 8 * SEC, "admit", "1", "packed=1000 limit=32000");
    await redis.rpush("sjobs:done", doneJson("1", T0, T0 + 20 * SEC));
    const { inputs, nowMs } = await gatherReport({ stateDir, name: undefined, queue: "sjobs", redisUrl: server.url, sinceMs: 15 * SEC, now: () => T0 + 25 * SEC });
    expect(inputs.events?.map((e) => e.job)).toEqual(["1"]);
    const samples = [0, 5, 10, 15, 20].map((s) => watchSample(T0 + s * SEC, { psi_mem_some_avg10: 0, psi_mem_some_rate: 50, cg_mem_current: 1, cg_mem_peak: 1, cg_mem_max: 2, stall_ms_p99: 1 }));
    const r = buildReport({ ...inputs, recording: { file: "w.jsonl", samples, badLines: 0 } }, nowMs, 15 * SEC, { sinceGiven: true });
    // 12 s held (8 → 20 s) at 50 %: 6000 ms, not 10000 (from the enqueue).
    expect(r.cost_proxy?.jobs[0]).toMatchObject({ job: "1", stall_ms: 6000 });
  });
});
