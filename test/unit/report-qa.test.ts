import { Chalk } from "chalk";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { freePort } from "../../src/drill/embeddedRedis.js";
import { drillDir, writeState, type DrillState } from "../../src/drill/state.js";
import { UsageError } from "../../src/errors.js";
import { queueKeys } from "../../src/queue/keys.js";
import { buildReport } from "../../src/report/build.js";
import { parseExport } from "../../src/report/exportFile.js";
import { gatherReport } from "../../src/report/gather.js";
import { parseRecording, type DecisionEvent, type DoneEntry, type ReportInputs } from "../../src/report/inputs.js";
import { humanDuration, renderJson, renderMarkdown, renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat } from "../helpers/reportText.js";

/**
 * QA walkthrough 2026-11-30, findings 7, 8, 12, 13, 14 (report): where the
 * jobs are, a --queue the source does not hold, generated_at, a pace that
 * does not move with the clock, and readability.
 */

const plain = new Chalk({ level: 0 });
const MIN = 60_000;
const NOW = Date.parse("2025-11-30T12:00:00.000Z");

const payload = (id: string) => JSON.stringify({ id, prompt_tokens: 1000, completion_tokens: 8, files: 1, enqueue_ts: NOW - MIN, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
const listLine = (key: string, ids: string[]) => JSON.stringify({ key, type: "list", ttl_ms: null, value: ids.map((id) => ({ utf8: payload(id) })) });
const stringLine = (key: string, value: string, ttl: number | null = null) => JSON.stringify({ key, type: "string", ttl_ms: ttl, value: { utf8: value } });

/** After a worker kill (QA 7): jobs on the ready list, a live gate's and a dead gate's processing list, a dead worker's working list, retry, done. */
function exportAfterWorkerKill(queue = "qaAjobs"): string {
  return [
    stringLine(`${queue}:seq`, "12"),
    listLine(queue, ["12"]),
    listLine(`${queue}:processing:g1`, ["11"]),
    stringLine(`${queue}:gates:g1`, "{}", 3000),
    listLine(`${queue}:processing:g0`, ["10"]),
    listLine(`${queue}:admitted`, ["9"]),
    listLine(`${queue}:working:w1`, ["6", "7", "8"]),
    listLine(`${queue}:done`, ["1"]),
    listLine(`${queue}:retry:dedicated`, ["2", "3", "4"]),
    JSON.stringify({ key: `${queue}:dead`, type: "list", ttl_ms: null, value: [{ utf8: "not json" }] }),
    JSON.stringify({ key: `${queue}:stats`, type: "hash", ttl_ms: null, value: { jobs_done: { utf8: "1" } } }),
  ].join("\n");
}

function baseInputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return reportInputs({
    queue: "qaAjobs",
    source: { kind: "export", file: "/s/qaA/final-x.jsonl", atMs: NOW },
    drill: { name: "qaA", rollbackCommand: "drill rollback --name qaA", runId: "qaA-1", drillFile: "qaA.yaml", createdAt: new Date(NOW - 2 * MIN).toISOString(), phase: "complete" },
    ...over,
  });
}

describe("QA 7: where the jobs are", () => {
  const keys = queueKeys("qaAjobs");
  const exported = parseExport(exportAfterWorkerKill(), keys);

  it("the export's job lists, one row per key in the order a job travels, fixed keys even when empty", () => {
    const rows = exported.jobPlaces!.lists.map((l) => [l.key, l.count, l.holderAlive]);
    expect(rows).toEqual([
      ["qaAjobs", 1, null],
      ["qaAjobs:processing:g0", 1, false],
      ["qaAjobs:processing:g1", 1, true],
      ["qaAjobs:admitted", 1, null],
      ["qaAjobs:working:w1", 3, false],
      ["qaAjobs:done", 1, null],
      ["qaAjobs:retry:dedicated", 3, null],
      ["qaAjobs:dead", 1, null],
      ["qaAjobs_drain", 0, null],
    ]);
    expect(exported.jobPlaces!.seq).toBe(12);
  });

  it("report: counts, jobs held by a dead gate or worker named, ids against <q>:seq", () => {
    const r = buildReport(baseInputs({ jobPlaces: exported.jobPlaces }), NOW, 10 * MIN);
    expect(r.jobs_where).toMatchObject({ total: 12, held_by_dead: 4, ids_issued: 12, distinct_ids: 11, not_found: ["5"], duplicates: [], without_id: 1 });
    const working = r.jobs_where!.rows.find((row) => row.key === "qaAjobs:working:w1")!;
    expect(working).toMatchObject({ role: "working", holder: "w1", count: 3, holder_alive: false });
    expect(working.note).toContain("DEAD, heartbeat qaAjobs:workers:w1 gone at the export");
    expect(r.jobs_where!.rows.find((row) => row.key === "qaAjobs:processing:g1")!.note).toBe("being decided by gate g1: alive");
    expect(r.notes.join("\n")).toContain("4 job(s) are held by a gate or worker whose heartbeat is gone");
    expect(r.notes.join("\n")).toContain("1 job id(s) issued by qaAjobs:seq are on no list");
    // drill's own pushes take the id in the same script: a dead pack no longer explains a gap.
    expect(r.notes.join("\n")).toContain("lost (drill pack and drill up take an id only with its push), or taken by another producer");
    expect(r.notes.join("\n")).not.toContain("a pack that died");

    const md = renderMarkdown(r);
    expect(md).toContain("### Where the jobs are");
    expect(md).toContain("| `qaAjobs:working:w1` | 3 | held by worker w1: DEAD, heartbeat qaAjobs:workers:w1 gone at the export;");
    expect(md).toContain("| `qaAjobs:retry:dedicated` | 3 | nacked to host class dedicated |");
    expect(md).toContain("| total | 12 | 4 held by a dead gate or worker |");
    expect(md).toContain("ids issued by qaAjobs:seq: 12; distinct ids on the lists: 11; 1 on no list: job=5.");
    expect(renderText(r, plain)).toMatch(/qaAjobs:working:w1\s+3\s+held by worker w1: DEAD/);
    expect((JSON.parse(renderJson(r)) as { jobs_where: unknown }).jobs_where).toEqual(r.jobs_where);
  });

  it("every issued id on a list: said so; none lost", () => {
    const whole = parseExport(exportAfterWorkerKill().replace(listLine("qaAjobs", ["12"]), listLine("qaAjobs", ["12", "5"])), keys);
    const r = buildReport(baseInputs({ jobPlaces: whole.jobPlaces }), NOW, 10 * MIN);
    expect(r.jobs_where?.not_found).toEqual([]);
    expect(flat(renderText(r, plain))).toContain("ids issued by qaAjobs:seq: 12; distinct ids on the lists: 12; every one is on a list.");
  });
});

describe("QA 8: a --queue the source holds no key of", () => {
  let stateDir: string;
  beforeEach(() => {
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-qa-"));
  });
  afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

  async function writeDrill(exportText: string): Promise<string> {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const state: DrillState = {
      version: 1,
      name: "qaA",
      runId: "qaA-1",
      drillFile: "qaA.yaml",
      createdAt: new Date(Date.now() - 60_000).toISOString(),
      phase: "complete",
      queue: "qaAjobs",
      redis: { url: dead, embedded: null },
      cgroup: null,
      processes: [],
      fileDir: null,
      owner: { pid: process.pid, startTime: null },
    };
    writeState(stateDir, state);
    const file = path.join(drillDir(stateDir, "qaA"), `final-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
    writeFileSync(file, exportText);
    return file;
  }

  it("an export holding another queue: a usage error naming the queues it holds", async () => {
    const file = await writeDrill(exportAfterWorkerKill());
    const gather = gatherReport({ stateDir, name: "qaA", queue: "qaAjbos", redisUrl: undefined, sinceMs: 10 * MIN });
    await expect(gather).rejects.toBeInstanceOf(UsageError);
    await expect(gather).rejects.toThrow(`--queue: rollback's export ${file} holds no key of queue "qaAjbos"; it holds queue qaAjobs (give --queue qaAjobs)`);
    // The drill's own queue reads as before.
    const { inputs } = await gatherReport({ stateDir, name: "qaA", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.jobPlaces?.seq).toBe(12);
  });

  // After a rollback the drill's figures are its export's: a --queue it does not hold names the drill's queue and its report.
  it("--name with another --queue: the queue the drill ran on, and the command that reports it", async () => {
    const file = await writeDrill(exportAfterWorkerKill());
    const err = (await gatherReport({ stateDir, name: "qaA", queue: "other", redisUrl: undefined, sinceMs: 10 * MIN }).catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(UsageError);
    const command = `drill --state-dir ${stateDir} report --name qaA`;
    expect(err.message).toBe(`--queue: rollback's export ${file} holds no key of queue "other"; it holds queue qaAjobs (give --queue qaAjobs); drill qaA ran on queue qaAjobs: \`${command}\` reports it`);
    const { inputs } = await gatherReport({ stateDir, name: "qaA", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.jobPlaces?.seq).toBe(12);
  });

  it("an export holding no queue at all: the report goes on, its first note says every figure is empty", async () => {
    const file = await writeDrill("");
    const { inputs } = await gatherReport({ stateDir, name: "qaA", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.gatherNotes[0]).toBe(
      `rollback's export ${file} holds no key of queue qaAjobs (nor of any other queue): nothing was ever packed on it there; every figure in this report is empty, not a clean run`,
    );
  });
});

describe("QA 12: generated_at is when the report was made", () => {
  it("an export's report: generated now, the window still ends at the export", () => {
    const made = NOW + 3 * 3_600_000;
    const r = buildReport(baseInputs(), NOW, 10 * MIN, { generatedAtMs: made });
    expect(r.generated_at).toBe(new Date(made).toISOString());
    expect(r.window).toMatchObject({ to: new Date(NOW).toISOString(), anchored: "export" });
    const before = Date.now();
    expect(Date.parse(buildReport(baseInputs(), NOW, 10 * MIN).generated_at)).toBeGreaterThanOrEqual(before);
  });
});

describe("QA 13: the pace of a finished run does not move with the clock", () => {
  const created = NOW - 2 * MIN;
  const doneAt = (id: string, ts: number): DoneEntry => ({
    id,
    firstTokenMs: 900,
    deadlineMs: 8000,
    late: false,
    tokensOut: 8,
    promptTokens: 1000,
    completionTokens: 8,
    attempt: 0,
    enqueueTs: ts - 1000,
    firstTokenTs: ts - 100,
    doneTs: ts,
  });
  const ev = (job: string, ts: number): DecisionEvent => ({ id: `${ts}-0`, reason: "admit", job, figures: "packed=1000 limit=32000", tsMs: ts, gate: "g", attempt: 0 });
  // The run: created at -2 min, 10 jobs finished by -1 min, the last decision at -1 min.
  const finishedRun = (phase: string): ReportInputs =>
    baseInputs({
      source: { kind: "live", url: "redis://127.0.0.1:6390" },
      drill: { name: "qaA", rollbackCommand: "drill rollback --name qaA", runId: "qaA-1", drillFile: "qaA.yaml", createdAt: new Date(created).toISOString(), phase },
      events: Array.from({ length: 10 }, (_, i) => ev(String(i + 1), created + 5000 + i * 1000)),
      done: Array.from({ length: 10 }, (_, i) => doneAt(String(i + 1), created + 6000 * (i + 1))),
      queueLen: 2,
    });

  it("stopped: the same pace at the drill's end and a minute later, over the first admit → last finished job", () => {
    const atEnd = buildReport(finishedRun("stopped"), created + 61_000, 10 * MIN);
    const later = buildReport(finishedRun("stopped"), created + 121_000, 10 * MIN);
    expect(atEnd.drain.done_per_hour).toBe(654.5); // 10 jobs in 55 s
    expect(later.drain.done_per_hour).toBe(atEnd.drain.done_per_hour);
    expect(later.drain.backlog_hours).toBe(atEnd.drain.backlog_hours);
    expect(later.drain).toMatchObject({ pace_from: new Date(created + 5000).toISOString(), pace_to: new Date(created + 60_000).toISOString() });
  });

  it("a running run: the same span; the time since its last finished job does not dilute it", () => {
    const r = buildReport(finishedRun("running"), created + 120_000, 10 * MIN);
    expect(r.drain.done_per_hour).toBe(654.5);
    expect(r.drain.pace_to).toBe(new Date(created + 60_000).toISOString());
  });
});

describe("QA 14: readability", () => {
  it("a reject held by hysteresis says so, count first", () => {
    const r = buildReport(
      baseInputs({
        events: ["1", "2", "3"].map((job, i) => ({ id: `${NOW - 1000 + i}-0`, reason: "reject_host_pressure", job, figures: "psi=4.00 hysteresis=1 route=retry", tsMs: NOW - 1000 + i, gate: "g", attempt: 0 })),
      }),
      NOW,
      10 * MIN,
    );
    const row = r.decisions!.rows.find((x) => x.reason === "reject_host_pressure")!;
    expect(row.note).toBe("3 × held by hysteresis");
  });

  it("window spans read as durations, not raw ms", () => {
    expect([850, 1518, 30_000, 91_196, 600_000, 7_500_000].map(humanDuration)).toEqual(["850 ms", "1.5 s", "30 s", "1 min 31 s", "10 min", "2 h 5 min"]);
    const r = buildReport(baseInputs({ drill: null }), NOW, 91_196, { sinceGiven: true });
    const text = renderText(r, plain);
    expect(text).toContain("window: last 1 min 31 s,");
    expect(text).not.toMatch(/\d+ms/);
  });

  it("cost table rows by job id ascending, numerically", () => {
    const done = ["10", "9", "8", "2", "1"].map(
      (id): DoneEntry => ({ id, firstTokenMs: 900, deadlineMs: 8000, late: false, tokensOut: 8, promptTokens: 1000, completionTokens: 8, attempt: 0, enqueueTs: NOW - 5000, firstTokenTs: NOW - 4000, doneTs: NOW - 3000 }),
    );
    const r = buildReport(baseInputs({ done }), NOW, 10 * MIN);
    expect(r.cost_proxy?.jobs.map((j) => j.job)).toEqual(["1", "2", "8", "9", "10"]);
    const md = renderMarkdown(r);
    const order = [...md.matchAll(/^\| job=(\d+) \|/gm)].map((m) => m[1]);
    expect(order).toEqual(["1", "2", "8", "9", "10"]);
  });

  it("a Redis restarted from the drill's AOF is not called live", () => {
    const r = buildReport(baseInputs({ source: { kind: "aof", url: "redis://127.0.0.1:40001", aofDir: "/s/qaA/runs/qaA-1/redis" } }), NOW, 10 * MIN);
    expect(r.source).toEqual({ kind: "aof", where: "/s/qaA/runs/qaA-1/redis" });
    const text = renderText(r, plain);
    expect(text).toContain("source: the drill's embedded Redis restarted from its AOF in /s/qaA/runs/qaA-1/redis");
    expect(text).not.toContain("live Redis");
  });

  it("watch.jsonl lines with impossible values are skipped and counted, never a peak", () => {
    const line = (over: Record<string, unknown>) => JSON.stringify({ ts: new Date(NOW - 1000).toISOString(), psi_mem_some_avg10: 2, cg_mem_current: 1024, ...over });
    const rec = parseRecording("/s/qaA/watch.jsonl", [line({}), line({ psi_mem_some_avg10: 99999 }), line({ cg_mem_current: -5 }), line({ cg_psi_mem_some_rate: 250 }), "not json"].join("\n"));
    expect(rec.samples).toHaveLength(1);
    expect(rec.badLines).toBe(4);
    const r = buildReport(baseInputs({ recording: rec }), NOW, 10 * MIN);
    expect(r.pressure.peak_psi_mem_some_avg10.value).toBe(2);
    expect(r.pressure.peak_cg_mem_current.value).toBe(1024);
    expect(r.notes.join("\n")).toContain(
      "4 line(s) of /s/qaA/watch.jsonl were not samples: skipped (3 of them held a value no sample can have: psi_mem_some_avg10=99999, cg_mem_current=-5, cg_psi_mem_some_rate=250)",
    );
  });
});
