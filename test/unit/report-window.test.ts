import { Chalk } from "chalk";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { watchSample } from "../helpers/watchSample.js";
import { drillDir, runDir, writeState, type DrillState } from "../../src/drill/state.js";
import { freePort } from "../../src/drill/embeddedRedis.js";
import { buildReport } from "../../src/report/build.js";
import { gatherReport } from "../../src/report/gather.js";
import type { DecisionEvent, DoneEntry, ReportInputs, WatchSample } from "../../src/report/inputs.js";
import { renderJson, renderMarkdown, renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat, textRow } from "../helpers/reportText.js";

/**
 * QA: a queue that held an earlier run's data was reported under the current
 * run's header: `drill report --name <drill>` named the new run and counted
 * the old one's decisions, first reject included. The window now starts at
 * the run's creation unless --since was given, and the sources (recording,
 * rollback's export) are the run's own.
 */

const plain = new Chalk({ level: 0 });
const MIN = 60_000;
const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const CREATED = NOW - 2 * MIN; // the current run: 2 minutes old, well inside the default 10m

let seq = 0;
const event = (reason: string, job: string, figures: string, tsMs: number): DecisionEvent => ({ id: `${tsMs}-${seq++}`, reason, job, figures, tsMs, gate: "g1", attempt: 0 });

const doneAt = (id: string, doneTs: number): DoneEntry => ({
  id,
  firstTokenMs: 900,
  deadlineMs: 8000,
  late: false,
  tokensOut: 8,
  promptTokens: 1000,
  completionTokens: 8,
  attempt: 0,
  enqueueTs: doneTs - 1000,
  firstTokenTs: doneTs - 100,
  doneTs,
});

const sampleAt = (tsMs: number, psi: number): WatchSample => watchSample(tsMs, { psi_mem_some_avg10: psi, psi_mem_some_rate: 1, cg_mem_current: 1, cg_mem_peak: 1, cg_mem_max: 2, stall_ms_p99: 1 });

/** An earlier run on the same queue 6 minutes ago (5 decisions), then this run (3). */
function queueOfTwoRuns(): ReportInputs {
  const earlier = NOW - 6 * MIN;
  return reportInputs({
    drill: { name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "smoke-2", drillFile: "drills/smoke.yaml", createdAt: new Date(CREATED).toISOString(), phase: "stopped" },
    events: [
      event("admit", "1", "packed=24000 limit=32000", earlier),
      event("reject_packed_tokens", "2", "packed=48000 limit=32000 route=retry", earlier + 10),
      event("reject_packed_tokens", "3", "packed=48000 limit=32000 route=retry", earlier + 20),
      event("reject_deadline_slack", "4", "slack_ms=420 route=retry", earlier + 30),
      event("admit", "5", "packed=2000 limit=32000", earlier + 40),
      event("mode", "", "mode=admit previous=reject_all psi=0.00", CREATED + 100),
      event("admit", "6", "packed=24000 limit=32000", CREATED + 1000),
      event("reject_host_pressure", "7", "psi=12.40 route=retry", CREATED + 1010),
      event("admit", "8", "packed=2000 limit=32000", CREATED + 1020),
    ],
    done: [doneAt("1", earlier + 2000), doneAt("6", CREATED + 3000)],
    stats: { jobs_done: "2" },
    recording: { file: "/s/smoke/runs/smoke-2/watch.jsonl", samples: [sampleAt(earlier, 30), sampleAt(CREATED + 1000, 2)], badLines: 0 },
    recordingLooked: "/s/smoke/runs/smoke-2/watch.jsonl",
  });
}

describe("report window: the drill's current run", () => {
  it("without --since: from the run's creation; header, counts and first reject are the run's", () => {
    const r = buildReport(queueOfTwoRuns(), NOW, 10 * MIN);
    expect(r.window).toMatchObject({ from: new Date(CREATED).toISOString(), run_start: new Date(CREATED).toISOString(), clipped_to_run: true });
    expect(r.drill?.run_id).toBe("smoke-2");
    expect(r.decisions?.total).toBe(3);
    expect(r.decisions?.rejects).toBe(1);
    expect(r.first_reject?.line).toBe("reject_host_pressure job=7 psi=12.40 route=retry");
    expect(r.first_token?.finished).toBe(1);
    expect(r.pressure.samples).toBe(1);
    expect(r.pressure.peak_psi_mem_some_avg10.value).toBe(2);
    expect(r.retries.nacked_to_retry_in_window).toBe(1);
    expect(r.notes.join("\n")).toContain("5 decision(s) on jobs predate run smoke-2");
    expect(r.notes.join("\n")).toContain("jobs:stats are not windowed");
    const text = renderText(r, plain);
    // phase stopped: the window ends at the run's last decision or finish, not now.
    expect(text).toContain(`window: run smoke-2 from its creation to its end (within the run's last 10 min), ${new Date(CREATED).toISOString()} → ${new Date(CREATED + 3000).toISOString()} (ends at the run's end)`);
  });

  it("--since given and reaching before the run: what it asks for, and the header says it reaches before the run", () => {
    const r = buildReport(queueOfTwoRuns(), NOW, 10 * MIN, { sinceGiven: true });
    expect(r.window).toMatchObject({ from: new Date(NOW - 10 * MIN).toISOString(), clipped_to_run: false });
    expect(r.decisions?.total).toBe(8);
    expect(r.first_reject?.line).toBe("reject_packed_tokens job=2 packed=48000 limit=32000 route=retry");
    expect(r.notes.join("\n")).toContain("the window reaches before run smoke-2");
    expect(r.notes.join("\n")).toContain("5 decision(s) from before it, not this run's, are counted");
    expect(renderText(r, plain)).toContain("window: last 10 min, from before run smoke-2 was created");
  });

  it("a --since shorter than the run, or no drill state, is the plain window", () => {
    const short = buildReport(queueOfTwoRuns(), NOW, 1 * MIN, { sinceGiven: true });
    expect(short.window).toMatchObject({ from: new Date(NOW - MIN).toISOString(), clipped_to_run: false });
    expect(short.decisions?.total).toBe(0);
    const bare = buildReport({ ...queueOfTwoRuns(), drill: null }, NOW, 10 * MIN);
    expect(bare.window).toMatchObject({ from: new Date(NOW - 10 * MIN).toISOString(), run_start: null, clipped_to_run: false });
    expect(bare.decisions?.total).toBe(8);
    expect(bare.notes.join("\n")).not.toContain("predate");
  });

  it("a run without any earlier data on its queue gets no note about one", () => {
    const only = queueOfTwoRuns();
    only.events = only.events!.filter((e) => e.tsMs! >= CREATED);
    const r = buildReport(only, NOW, 10 * MIN);
    expect(r.decisions?.total).toBe(3);
    expect(r.notes.join("\n")).not.toMatch(/predate|not windowed/);
  });
});

/**
 * QA: without --since a report read more than 10 minutes after the run (an
 * incident note written after `drill rollback`) showed 0 decisions and no
 * word why: the window ended at now. It ends at the run's end now.
 */
describe("report window: read long after the run ended", () => {
  const T0 = NOW - 30 * MIN;
  const run = (drill: Partial<NonNullable<ReportInputs["drill"]>>): ReportInputs => (reportInputs({
    drill: { name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "smoke-1", drillFile: "drills/smoke.yaml", createdAt: new Date(T0 - 5000).toISOString(), phase: "stopped", queue: "jobs", ...drill },
    events: [
      event("admit", "1", "packed=24000 limit=32000", T0 + 1000),
      event("reject_host_pressure", "2", "psi=12.40 route=retry", T0 + 2000),
      event("reject_host_pressure", "3", "psi=12.40 route=retry", T0 + 3000),
    ],
    done: [doneAt("1", T0 + 3500)],
  }));
  const ended = { verdict: "ran" as const, at: new Date(T0 + 4000).toISOString(), reason: null, pushed: 3, notPacked: 0 };

  it.each([
    ["up's recorded end", { ended }],
    ["a rollback that took it over", { phase: "complete", rollbackAt: new Date(T0 + 5000).toISOString() }],
    ["up recorded an end, rolled back much later", { ended, phase: "complete", rollbackAt: new Date(T0 + 25 * MIN).toISOString() }],
    ["up gone without a record", { phase: "running", upGone: { pid: 4242 } }],
  ])("%s: the same figures 2 min and 15 min after the run", (_, drill) => {
    for (const now of [T0 + 2 * MIN, T0 + 15 * MIN]) {
      const r = buildReport(run(drill), now, 10 * MIN);
      expect(r.decisions).toMatchObject({ total: 3, rejects: 2 });
      expect(r.first_token?.finished).toBe(1);
      expect(r.window).toMatchObject({ from: new Date(T0 - 5000).toISOString(), clipped_to_run: true });
      expect(r.notes.join("\n")).not.toContain("no job finished in the window");
      expect(r.notes.join("\n")).not.toContain("fall outside the window");
    }
    const late = buildReport(run(drill), T0 + 15 * MIN, 10 * MIN);
    expect(late.window.anchored).toBe("run_end");
    expect(Date.parse(late.window.to)).toBeGreaterThanOrEqual(T0 + 3500);
    expect(Date.parse(late.window.to)).toBeLessThan(T0 + 6 * MIN);
    expect(renderText(late, plain)).toMatch(/window: run smoke-1 from its creation to its end \(within the run's last 10 min\), \S+ → \S+ \(ends at the run's end\)/);
  });

  // QA: 90 s of gate decisions after up's end put the window's end 91 s past the `ended:` line, both said as the run's end.
  it("gate and worker deciding on after up's recorded end: the window takes their work in and says how far past that end", () => {
    const early = run({ ended: { ...ended, at: new Date(T0 + 2000).toISOString() } });
    early.events!.push(event("reject_host_pressure", "4", "psi=12.40 route=retry", T0 + 93_000));
    const r = buildReport(early, T0 + 15 * MIN, 10 * MIN);
    expect(r.window).toMatchObject({ to: new Date(T0 + 93_000).toISOString(), anchored: "run_end" });
    expect(renderText(r, plain)).toMatch(/\(ends at the run's last decision or finished job, 91s after its recorded end: gate and worker ran on\)/);
    // Within a second of it: the run's end, as before.
    expect(renderText(buildReport(run({ ended: { ...ended, at: new Date(T0 + 3000).toISOString() } }), T0 + 15 * MIN, 10 * MIN), plain)).toContain("(ends at the run's end)");
  });

  it("a run longer than --since's default: its last 10 min up to its end, and the decisions before them counted in a note", () => {
    const long = run({ ended: { ...ended, at: new Date(T0 + 20 * MIN).toISOString() }, createdAt: new Date(T0 - 20 * MIN).toISOString() });
    long.events!.push(event("admit", "9", "packed=1 limit=32000", T0 + 15 * MIN));
    const r = buildReport(long, T0 + 60 * MIN, 10 * MIN);
    expect(r.window).toMatchObject({ from: new Date(T0 + 10 * MIN).toISOString(), to: new Date(T0 + 20 * MIN).toISOString(), anchored: "run_end", clipped_to_run: false });
    expect(r.decisions?.total).toBe(1);
    expect(r.notes).toContain("3 of run smoke-1's 4 decision(s) fall outside the window (3 before its start): not counted");
    expect(renderText(r, plain)).toContain(`window: last 10 min of run smoke-1, to its end, ${new Date(T0 + 10 * MIN).toISOString()} → ${new Date(T0 + 20 * MIN).toISOString()} (ends at the run's end)`);
  });

  it("--since given keeps its meaning (ends now), and a note counts the run's decisions outside it", () => {
    const r = buildReport(run({ ended }), T0 + 15 * MIN, 10 * MIN, { sinceGiven: true });
    expect(r.window).toMatchObject({ to: new Date(T0 + 15 * MIN).toISOString(), anchored: "now" });
    expect(r.decisions?.total).toBe(0);
    expect(r.notes.join("\n")).toContain("3 of run smoke-1's 3 decision(s) fall outside the window (3 before its start): not counted (a --since window ends now, or at the export; without --since the window is the run's last 10m up to the run's end)");
  });

  // QA: the default report of a rolled-back run left out the rollback's deny-all, seconds after the window's end; only --since 30m showed it.
  it("rolled back after its end: the rollback's deny-all is said, after the window, in text, md and json", () => {
    const rolledBack = run({ ended, phase: "complete", rollbackAt: new Date(T0 + 25 * MIN).toISOString() });
    const cutAt = T0 + 25 * MIN - 3000;
    rolledBack.events!.unshift(event("mode", "", "mode=admit previous=unset psi=0.00", T0 + 500));
    // rollback's deny-all, then its "deny-all again" (a repeat: it cut nothing off)
    rolledBack.events!.push(event("mode", "", "mode=reject_all previous=admit psi=5.30", cutAt), event("mode", "", "mode=reject_all previous=reject_all psi=5.10", cutAt + 500));
    const r = buildReport(rolledBack, T0 + 26 * MIN, 10 * MIN);
    expect(r.window.anchored).toBe("run_end");
    expect(r.mode_flips?.map((m) => m.mode)).toEqual(["admit"]); // the window's own, as before
    expect(r.rollback_deny_all).toEqual({ ts: new Date(cutAt).toISOString(), mode: "reject_all", previous: "admit", unchanged: false, forced: false, psi: 5.3, psi_avg60: null, by: null, window: "after" });
    const line = `rollback: deny-all at ${new Date(cutAt).toISOString()} (reject_all, was admit, psi avg10 5.30), after the window`;
    const text = renderText(r, plain);
    expect(text).toContain(line);
    expect(flat(text)).toContain(`${new Date(cutAt).toISOString()} reject_all admit 5.30 rollback's deny-all, after the window`);
    const md = renderMarkdown(r);
    expect(md).toContain(`- ${line}`);
    expect(md).toContain(`| ${new Date(cutAt).toISOString()} | reject_all | admit | 5.30 | rollback's deny-all, after the window |`);
    expect((JSON.parse(renderJson(r)) as { rollback_deny_all: unknown }).rollback_deny_all).toMatchObject({ ts: new Date(cutAt).toISOString(), window: "after" });
    // With --since reaching it, it is in the window and in the table already, marked there as the rollback's (QA: an
    // unmarked row read as a hand on the lever mid-drill); its repeat is not the cut; no rollback recorded: none.
    const reaching = buildReport(rolledBack, T0 + 26 * MIN, 30 * MIN, { sinceGiven: true });
    expect(reaching.rollback_deny_all?.window).toBe("in");
    const flips = ["at", "mode", "previous", "psi avg10", "note"];
    const rows = [cutAt, cutAt + 500].map((ts) => textRow(renderText(reaching, plain), new Date(ts).toISOString(), flips)?.cells);
    expect(rows).toEqual([
      [new Date(cutAt).toISOString(), "reject_all", "admit", "5.30", "rollback's deny-all"],
      [new Date(cutAt + 500).toISOString(), "reject_all", "reject_all", "5.10", "(unchanged)"],
    ]);
    expect(buildReport(run({ ended }), T0 + 26 * MIN, 10 * MIN).rollback_deny_all).toBeNull();
  });

  it("a running drill still ends at now", () => {
    const r = buildReport(run({ phase: "running" }), T0 + 2 * MIN, 10 * MIN);
    expect(r.window).toMatchObject({ to: new Date(T0 + 2 * MIN).toISOString(), anchored: "now" });
    expect(r.decisions?.total).toBe(3);
  });
});

describe("report sources: the run's own", () => {
  let stateDir: string;
  beforeEach(() => {
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-window-"));
  });
  afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

  const createdAt = new Date(Date.now() - 30_000).toISOString();
  const stateOf = (dead: string, over: Partial<DrillState> = {}): DrillState => ({
    version: 1,
    name: "twice",
    runId: "twice-2",
    drillFile: "drills/smoke.yaml",
    createdAt,
    phase: "stopped",
    queue: "jobs",
    redis: { url: dead, embedded: null },
    cgroup: null,
    processes: [],
    fileDir: null,
    owner: { pid: process.pid, startTime: null },
    ...over,
  });
  const exportName = (ms: number) => `final-${new Date(ms).toISOString().replace(/[:.]/g, "-")}.jsonl`;
  const eventsLine = (ms: number, job: string) =>
    `${JSON.stringify({ key: "jobs:events", type: "stream", ttl_ms: null, value: [[`${ms}-0`, ["reason", "reject_packed_tokens", "job", job, "figures", "packed=48000 limit=32000 route=retry"]]] })}\n`;

  it("an earlier run's export is not this run's: report says so instead of reading it", async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    writeState(stateDir, stateOf(dead));
    const old = Date.now() - 3_600_000;
    writeFileSync(path.join(drillDir(stateDir, "twice"), exportName(old)), eventsLine(old, "2"));
    await expect(gatherReport({ stateDir, name: "twice", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN })).rejects.toThrow(
      /no final-\*\.jsonl of run twice-2 in .*final-.*\.jsonl is an earlier run's, written before this run was created/,
    );

    // This run's own export, once rollback wrote it, is the one read.
    const mine = Date.now();
    const file = path.join(drillDir(stateDir, "twice"), exportName(mine));
    writeFileSync(file, eventsLine(mine, "9"));
    const { inputs } = await gatherReport({ stateDir, name: "twice", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.source).toMatchObject({ kind: "export", file });
    expect(inputs.events?.map((e) => e.job)).toEqual(["9"]);
  });

  it("the recording is the run's own (runs/<runId>/watch.jsonl), not an earlier run's in the drill dir", async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    writeState(stateDir, stateOf(dead));
    writeFileSync(path.join(drillDir(stateDir, "twice"), exportName(Date.now())), eventsLine(Date.now(), "1"));
    writeFileSync(path.join(drillDir(stateDir, "twice"), "watch.jsonl"), `${JSON.stringify({ ts: new Date(Date.now() - 3_600_000).toISOString(), psi_mem_some_avg10: 30 })}\n`);
    const own = runDir(stateDir, "twice", "twice-2");
    mkdirSync(own, { recursive: true });
    writeFileSync(path.join(own, "watch.jsonl"), `${JSON.stringify({ ts: new Date().toISOString(), psi_mem_some_avg10: 2 })}\n`);
    const { inputs } = await gatherReport({ stateDir, name: "twice", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.recording?.file).toBe(path.join(own, "watch.jsonl"));

    // A run whose dir was never made (up died first) has no recording, not an earlier run's.
    writeState(stateDir, stateOf(dead, { runId: "twice-3" }));
    const { inputs: none } = await gatherReport({ stateDir, name: "twice", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(none.recording).toBeNull();
    expect(none.recordingLooked).toContain(path.join("runs", "twice-3", "watch.jsonl"));
  });

  it("a state from before runs had their own dir reads the drill dir, as before", async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    writeState(stateDir, stateOf(dead));
    writeFileSync(path.join(drillDir(stateDir, "twice"), exportName(Date.now())), eventsLine(Date.now(), "1"));
    writeFileSync(path.join(drillDir(stateDir, "twice"), "watch.jsonl"), `${JSON.stringify({ ts: new Date().toISOString(), psi_mem_some_avg10: 2 })}\n`);
    const { inputs } = await gatherReport({ stateDir, name: "twice", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    expect(inputs.recording?.file).toBe(path.join(drillDir(stateDir, "twice"), "watch.jsonl"));
  });
});
