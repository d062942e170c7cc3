import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { buildReport, PACE_MIN_SPAN_MS } from "../../src/report/build.js";
import type { DecisionEvent, DoneEntry, ReportInputs } from "../../src/report/inputs.js";
import { renderMarkdown, renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { textRow } from "../helpers/reportText.js";

/**
 * QA: "finished per hour at the window's pace" said 320.6/h in up's closing
 * summary and 125.6/h in a report of the same run after a deny-all, and
 * 3308.8/h from the one job of an up stopped 7 s in. The pace is taken over
 * the finished jobs' own span, and is n/a from too few of them.
 */

const SEC = 1000;
const MIN = 60 * SEC;
const T0 = Date.parse("2025-11-30T12:00:00.000Z"); // the run's creation

const admit = (job: string, ts: number): DecisionEvent => ({ id: `${ts}-0`, reason: "admit", job, figures: "packed=1000 limit=32000", tsMs: ts, gate: "g", attempt: 0 });
const reject = (job: string, ts: number, figures: string): DecisionEvent => ({ id: `${ts}-1`, reason: "reject_host_pressure", job, figures, tsMs: ts, gate: "g", attempt: 0 });
const mode = (ts: number, figures: string): DecisionEvent => ({ id: `${ts}-2`, reason: "mode", job: "", figures, tsMs: ts, gate: null, attempt: null });
const finished = (id: string, enqueueTs: number, doneTs: number): DoneEntry => ({
  id,
  firstTokenMs: 900,
  deadlineMs: 8000,
  late: false,
  tokensOut: 8,
  promptTokens: 1000,
  completionTokens: 8,
  attempt: 0,
  enqueueTs,
  firstTokenTs: doneTs - 100,
  doneTs,
});

// A run: set up for 3 s, 4 jobs admitted from +3 s and finished by +33 s,
// up returned at +40 s; 6 jobs wait in <q>_drain after the rollback.
const runEvents = [
  mode(T0 + 2500, "mode=admit previous=unset psi=0.10"),
  admit("1", T0 + 3 * SEC),
  admit("2", T0 + 3 * SEC),
  reject("3", T0 + 4 * SEC, "psi=12.40 route=retry"),
  admit("4", T0 + 20 * SEC),
  admit("5", T0 + 30 * SEC),
];
const runDone = [finished("1", T0 + 2900, T0 + 8 * SEC), finished("2", T0 + 2900, T0 + 9 * SEC), finished("4", T0 + 19 * SEC, T0 + 26 * SEC), finished("5", T0 + 29 * SEC, T0 + 33 * SEC)];
// Rollback, a minute after up returned: deny-all, and the gate rejects what still waited under it.
const rollbackEvents = [mode(T0 + 100 * SEC, "mode=reject_all previous=admit psi=0.10"), reject("6", T0 + 100_500, "mode=reject_all route=retry")];

function inputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return reportInputs({
    queue: "pjobs",
    drill: { name: "p", rollbackCommand: "drill rollback --name p", runId: "p-1", drillFile: "p.yaml", createdAt: new Date(T0).toISOString(), phase: "running" },
    events: runEvents,
    done: runDone,
    drainLen: 6,
    ...over,
  });
}

const paceNotes = (notes: string[]) => notes.filter((n) => n.includes("pace") || n.startsWith("finished per hour"));

describe("the pace does not move with the clock, the phase or the source", () => {
  it("the same inputs read at two nows after the last event: one pace, over the first job's admit to the last finish", () => {
    for (const phase of ["running", "stopped"]) {
      const soon = buildReport(inputs({ drill: { ...inputs().drill!, phase } }), T0 + 35 * SEC, 10 * MIN);
      const later = buildReport(inputs({ drill: { ...inputs().drill!, phase } }), T0 + 5 * MIN, 10 * MIN);
      expect(later.drain.done_per_hour).toBe(soon.drain.done_per_hour);
      expect(later.drain.backlog_hours).toBe(soon.drain.backlog_hours);
      expect(later.drain).toMatchObject({ pace_from: new Date(T0 + 3 * SEC).toISOString(), pace_to: new Date(T0 + 33 * SEC).toISOString() });
    }
  });

  it("up's closing summary and a report from the export after rollback's deny-all give the same figure", () => {
    // up: phase stopped, its since reaches the run's creation.
    const upNow = T0 + 40 * SEC;
    const closing = buildReport(inputs({ drill: { ...inputs().drill!, phase: "stopped" }, drainLen: 0, queueLen: 6 }), upNow, upNow - T0 + 1000);
    const exported = buildReport(
      inputs({
        source: { kind: "export", file: "/s/p/final-x.jsonl", atMs: T0 + 101 * SEC },
        drill: { ...inputs().drill!, phase: "complete" },
        events: [...runEvents, ...rollbackEvents],
      }),
      T0 + 101 * SEC,
      10 * MIN,
    );
    expect(closing.drain.done_per_hour).toBe(480); // 4 jobs in 30 s
    expect(exported.drain.done_per_hour).toBe(closing.drain.done_per_hour);
    expect(exported.drain.backlog_hours).toBe(closing.drain.backlog_hours);
    expect(exported.drain.pace_to).toBe(closing.drain.pace_to);
  });
});

describe("too few finished jobs: n/a with the reason, never an extrapolation", () => {
  it("one finished job", () => {
    const r = buildReport(inputs({ events: runEvents.slice(0, 2), done: runDone.slice(0, 1), drill: { ...inputs().drill!, phase: "stopped" } }), T0 + 7 * SEC, 10 * MIN);
    expect(r.drain.done_per_hour).toBeNull();
    expect(r.drain.backlog_hours).toBeNull();
    expect(paceNotes(r.notes)).toEqual([
      "finished per hour while jobs ran is n/a, and so are the hours for the 6 job(s) on pjobs + pjobs_drain: only 1 job finished in the window (5.0 s from its start to its finish): one job's time is a latency, not a rate (a pace needs at least 2)",
    ]);
  });

  // QA AE: a job begun before a --since window read "1.3 s from its start" where it ran 9.5 s.
  it("one finished job begun before the window: its span from the window's start, said so", () => {
    const r = buildReport(inputs({ events: runEvents.slice(0, 2), done: runDone.slice(0, 1), drill: { ...inputs().drill!, phase: "stopped" } }), T0 + 9 * SEC, 4 * SEC);
    expect(paceNotes(r.notes).join("\n")).toMatch(/only 1 job finished in the window \([\d.]+ s from the window's start to its finish\)/);
  });

  it("two jobs of one batch, finished within a few seconds", () => {
    const r = buildReport(inputs({ done: runDone.slice(0, 2) }), T0 + MIN, 10 * MIN);
    expect(9 * SEC - 3 * SEC).toBeLessThan(PACE_MIN_SPAN_MS);
    expect(r.drain.done_per_hour).toBeNull();
    expect(paceNotes(r.notes).join("\n")).toContain("the 2 finished jobs span 6.0 s from the first one's start to the last one's finish, under 10 s: one batch");
  });

  it("no finished job: n/a, not 0/h; an empty backlog still takes 0 h", () => {
    const r = buildReport(inputs({ done: [], drainLen: 0 }), T0 + MIN, 10 * MIN);
    expect(r.drain).toMatchObject({ done_per_hour: null, backlog_hours: 0, pace_from: null, pace_to: null });
    expect(paceNotes(r.notes)).toEqual(["finished per hour while jobs ran is n/a: no job finished in the window"]);
  });
});

describe("the normal case", () => {
  it("jobs per hour over first admit → last finish, and the backlog's hours at it", () => {
    const r = buildReport(inputs(), T0 + MIN, 10 * MIN);
    expect(r.drain).toMatchObject({ done_per_hour: 480, backlog_hours: 0.01, pace_from: new Date(T0 + 3 * SEC).toISOString(), pace_to: new Date(T0 + 33 * SEC).toISOString() });
    expect(paceNotes(r.notes)).toEqual([]);
  });

  it("without admit events a job counts from its enqueue_ts", () => {
    const r = buildReport(inputs({ events: [] }), T0 + MIN, 10 * MIN);
    expect(r.drain.pace_from).toBe(new Date(T0 + 2900).toISOString());
    expect(r.drain.done_per_hour).toBe(478.4); // 4 jobs in 30.1 s
  });

  it("a window that starts after the first job's admit counts from the window's start", () => {
    const r = buildReport(inputs(), T0 + MIN, 55 * SEC, { sinceGiven: true }); // from T0 + 5 s: jobs 1 and 2 started before it
    expect(r.drain.pace_from).toBe(new Date(T0 + 5 * SEC).toISOString());
    expect(r.drain.done_per_hour).toBe(514.3); // 4 jobs in 28 s
  });
});

// QA: 2 jobs done early in a 15-minute window read "85.1 at the window's pace": the figure is the pace while they ran.
describe("the label says what the pace is", () => {
  it("while jobs ran, first admit → last finish, with that span; not the window's", () => {
    const r = buildReport(inputs(), T0 + 15 * MIN, 15 * MIN, { sinceGiven: true });
    expect(r.drain).toMatchObject({ done_per_hour: 480, pace_from: new Date(T0 + 3 * SEC).toISOString(), pace_to: new Date(T0 + 33 * SEC).toISOString() });
    const label = `finished per hour while jobs ran (first admit → last finish, 30 s, of a 15 min window)`;
    expect(textRow(renderText(r, new Chalk({ level: 0 })), label)?.value).toBe("480");
    expect(renderMarkdown(r)).toContain(`| ${label} | 480 |`);
    expect(renderMarkdown(r)).not.toContain("window's pace");
    // n/a says the same
    const none = buildReport(inputs({ done: [] }), T0 + MIN, 10 * MIN);
    expect(renderMarkdown(none)).toContain("| finished per hour while jobs ran | n/a |");
    expect(paceNotes(none.notes)).toEqual(["finished per hour while jobs ran is n/a, and so are the hours for the 6 job(s) on pjobs + pjobs_drain: no job finished in the window"]);
  });
});

describe("a worker that stopped finishing while jobs wait", () => {
  it("keeps its earlier pace (data only) and the notes say since when", () => {
    const stalled = buildReport(inputs({ queueLen: 3 }), T0 + 5 * MIN, 10 * MIN);
    expect(stalled.drain.done_per_hour).toBe(480);
    expect(stalled.notes).toContain(`no job finished since ${new Date(T0 + 33 * SEC).toISOString()} (267 s before this report) while 3 wait on pjobs: the pace is of before that`);
    // a minute is not yet a stall; an empty queue (drained by rollback) has nobody waiting
    expect(buildReport(inputs({ queueLen: 3 }), T0 + 80 * SEC, 10 * MIN).notes.filter((n) => n.startsWith("no job finished since"))).toEqual([]);
    expect(buildReport(inputs({ queueLen: 0 }), T0 + 5 * MIN, 10 * MIN).notes.filter((n) => n.startsWith("no job finished since"))).toEqual([]);
  });
});
