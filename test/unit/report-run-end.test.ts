import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import type { DecisionEvent, DoneEntry, DrillInfo, JobTiming, ReportInputs, WatchSample } from "../../src/report/inputs.js";
import { renderReport } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat, textRow } from "../helpers/reportText.js";

/**
 * QA (report after later rollbacks, late jobs, p99 against mixed deadlines,
 * the drain math's hours): figures of a finished run that moved with a later
 * rollback or with the time the report was read, a p99 compared with the
 * longest deadline, and 8 jobs waiting shown as 0 h.
 */

const SEC = 1000;
const MIN = 60 * SEC;
const T0 = Date.parse("2025-11-30T12:00:00.000Z"); // the run's creation; the schedule starts at T0 + 1 s
const iso = (ms: number) => new Date(ms).toISOString();
const plain = new Chalk({ level: 0 });

const admit = (job: string, ts: number): DecisionEvent => ({ id: `${ts}-0`, reason: "admit", job, figures: "packed=1000 limit=32000", tsMs: ts, gate: "g", attempt: 0 });
const mode = (ts: number, figures: string): DecisionEvent => ({ id: `${ts}-2`, reason: "mode", job: "", figures, tsMs: ts, gate: null, attempt: null });
const finished = (id: string, enqueueTs: number, firstTokenMs: number, deadlineMs: number, doneTs: number): DoneEntry => ({
  id,
  firstTokenMs,
  deadlineMs,
  late: firstTokenMs > deadlineMs,
  tokensOut: 8,
  promptTokens: 1000,
  completionTokens: 8,
  attempt: 0,
  enqueueTs,
  firstTokenTs: enqueueTs + firstTokenMs,
  doneTs,
});

function inputs(over: Partial<ReportInputs> = {}, drill: Partial<DrillInfo> = {}): ReportInputs {
  return reportInputs({
    queue: "rjobs",
    drill: { name: "r", rollbackCommand: "drill rollback --name r", runId: "r-1", drillFile: "r.yaml", createdAt: iso(T0), scheduleStartedAt: iso(T0 + SEC), phase: "complete", queue: "rjobs", ...drill },
    ...over,
  });
}

describe("a later rollback does not move when the drill was rolled back", () => {
  // up --detach, a rollback at 14 s (took the drill over), jobs pushed after it, a second rollback (re-drain) at 33 s.
  const tookOver = T0 + 15 * SEC;
  const redrain = T0 + 34 * SEC;
  const events = [mode(T0 + 500, "mode=admit previous=unset psi=0.10"), admit("1", T0 + 2 * SEC), mode(T0 + 13 * SEC, "mode=reject_all previous=admit psi=0.10"), mode(T0 + 33 * SEC, "mode=reject_all previous=reject_all psi=0.10")];
  const drill = { ended: null, rollbackAt: iso(tookOver), lastRollbackAt: iso(redrain), redrains: [{ at: iso(redrain), drained: 4 }] };

  it("ended and the window stay at the rollback that took the drill over; the re-drain is said on its own", () => {
    const r = buildReport(inputs({ events }, drill), T0 + 10 * MIN, 10 * MIN);
    expect(r.drill?.ended).toMatchObject({ verdict: "rolled_back", at: iso(tookOver), after_ms: 14 * SEC, rolled_back_at: iso(tookOver), redrains: [{ at: iso(redrain), drained: 4 }] });
    expect(r.window.to).toBe(iso(tookOver));
    // Its deny-all is the first rollback's (the re-drain's repeat cut nothing off).
    expect(r.rollback_deny_all).toMatchObject({ ts: iso(T0 + 13 * SEC), window: "in" });
    const text = renderReport(r, "text", plain);
    expect(text).toContain(`ended: rolled_back — a rollback took the drill over before up recorded an end 14 s into the drill; what up packed n/a (up wrote no end record as the rollback stopped it: gone by then, or an older drill); re-drained at ${iso(redrain)} (jobs pushed after the rollback; drain length 4)`);
  });

  it("a first rollback that could not reach Redis (exit 4) took the drill over; the second one's deny-all is still found, after the window", () => {
    const second = T0 + 40 * SEC;
    const noDenyFirst = [mode(T0 + 500, "mode=admit previous=unset psi=0.10"), admit("1", T0 + 2 * SEC), mode(T0 + 38 * SEC, "mode=reject_all previous=admit psi=0.10")];
    const r = buildReport(inputs({ events: noDenyFirst }, { ended: null, rollbackAt: iso(tookOver), lastRollbackAt: iso(second) }), T0 + 10 * MIN, 10 * MIN);
    expect(r.drill?.ended).toMatchObject({ at: iso(tookOver), after_ms: 14 * SEC, last_rollback_at: iso(second) });
    expect(r.window.to).toBe(iso(tookOver));
    expect(r.rollback_deny_all).toMatchObject({ ts: iso(T0 + 38 * SEC), window: "after" });
  });
});

describe("late jobs of a finished run are judged at its end, not when the report is read", () => {
  // Job 2 admitted at +3 s with a 30 s deadline (due +32 s), drained by the rollback that took the drill over at +20 s.
  const events = [admit("1", T0 + 2 * SEC), admit("2", T0 + 3 * SEC)];
  const done = [finished("1", T0 + 2 * SEC, 900, 30 * SEC, T0 + 5 * SEC)];
  const drained: JobTiming = { id: "2", role: "drain", enqueueTs: T0 + 2 * SEC, deadlineMs: 30 * SEC, firstTokenTs: null };
  const run = (nowMs: number, drill: Partial<DrillInfo>) => buildReport(inputs({ events, done, unfinished: [drained], firstTokens: {} }, drill), nowMs, 10 * MIN).first_token!;

  it("drained before its deadline: not late, a minute or an hour later", () => {
    const rolled = { ended: null, rollbackAt: iso(T0 + 20 * SEC) };
    for (const now of [T0 + 25 * SEC, T0 + MIN, T0 + 60 * MIN]) {
      const ft = run(now, rolled);
      expect(ft.late_unfinished, `read at +${(now - T0) / SEC} s`).toBe(0);
      expect(ft.late).toBe(0);
    }
  });

  it("up ended first and the rollback came after the deadline: late at the drain, and no later", () => {
    const ended = { verdict: "ran" as const, at: iso(T0 + 10 * SEC), reason: null, pushed: 2, notPacked: 0 };
    for (const [rollbackAt, late] of [[T0 + 60 * SEC, 1], [T0 + 31 * SEC, 0]] as const) {
      for (const now of [rollbackAt + SEC, T0 + 60 * MIN]) expect(run(now, { ended, rollbackAt: iso(rollbackAt) }).late_unfinished).toBe(late);
    }
  });

  it("a live run: judged now, late once its deadline passed", () => {
    const live = { phase: "running", ended: null, rollbackAt: null };
    expect(run(T0 + 25 * SEC, live).late_unfinished).toBe(0);
    expect(run(T0 + 40 * SEC, live).late_jobs).toEqual(["2"]);
  });
});

/**
 * QA: a rollback at +12 s stopped the worker, which gave its jobs back (their
 * first tokens void: they start over); drained, six jobs whose first token
 * came on time were reported "without a first token at their deadline", and
 * the samples of the teardown (the worker killed, its jobs waiting again)
 * gave a page and the lowest slack.
 */
describe("a rollback during the run: jobs given back after their first token, samples of the teardown", () => {
  const rollbackStart = T0 + 12 * SEC;
  const events = [admit("1", T0 + 2 * SEC), admit("2", T0 + 2 * SEC)];
  // Both due at +10 s; job 1's first token came at +3 s before the give-back, job 2 never had one.
  const drained = (id: string, givenBackFirstTokenTs: number | null): JobTiming => ({ id, role: "drain", enqueueTs: T0 + 2 * SEC, deadlineMs: 8 * SEC, firstTokenTs: null, givenBackFirstTokenTs });
  const sample = (ts: number, slack: number, idle: number): WatchSample => ({
    tsMs: ts, psi_mem_some_avg10: 0.1, psi_mem_some_rate: 1, cg_psi_mem_some_avg10: 0.1, cg_psi_mem_some_rate: 1, cg_mem_current: 1e8, cg_mem_peak: 1e8, cg_mem_max: 1.6e8, cg_oom_kill: 0,
    cg_absent: false, stall_ms_p99: 10, cpu_idle_pct: idle, queue_age_ms: 0, deadline_slack_ms: slack, slack_partial: false, si: 0, alarm: slack < 0 ? ["reclaim_not_underload"] : [],
  });

  it("a first token that came before the give-back counts: on time, with a first token; the one without stays late", () => {
    const r = buildReport(inputs({ events, done: [], unfinished: [drained("1", T0 + 3 * SEC), drained("2", null)], firstTokens: {} }, { ended: null, rollbackStartedAt: iso(rollbackStart), rollbackAt: iso(rollbackStart + 2 * SEC) }), T0 + 10 * MIN, 10 * MIN);
    expect(r.first_token).toMatchObject({ late_unfinished: 1, late_jobs: ["2"], with_first_token: 1 });
  });

  it("samples from the rollback's start on are left out of the pressure rows, with a note saying how many", () => {
    const recording = { file: "watch.jsonl", samples: [sample(T0 + 5 * SEC, 4000, 50), sample(rollbackStart + 500, 2000, 40), sample(rollbackStart + 800, -2756, 33)], badLines: 0 };
    const r = buildReport(inputs({ events, recording }, { ended: null, rollbackStartedAt: iso(rollbackStart), rollbackAt: iso(rollbackStart + 2 * SEC) }), T0 + 10 * MIN, 10 * MIN);
    expect(r.notes).toContain(`2 sample(s) from the rollback's start (${iso(rollbackStart)}) on left out: they measure its teardown (the worker killed, its jobs given back), not the drill`);
    expect(JSON.stringify(r)).not.toContain("-2756");
  });
});

describe("p99 against the deadline when deadlines differ", () => {
  // Three 3 s jobs whose first token came at 5 s (late), one 60 s job at 10.6 s.
  const done = [
    finished("1", T0 + 2 * SEC, 5000, 3000, T0 + 8 * SEC),
    finished("2", T0 + 2 * SEC, 5000, 3000, T0 + 8 * SEC),
    finished("3", T0 + 2 * SEC, 5000, 3000, T0 + 8 * SEC),
    finished("4", T0 + 2 * SEC, 10_622, 60_000, T0 + 14 * SEC),
  ];
  const events = ["1", "2", "3", "4"].map((id) => admit(id, T0 + 2 * SEC));

  it("compares p99 with the smallest deadline, and gives the p99 of each job's first token against its own deadline", () => {
    const r = buildReport(inputs({ events, done }, { phase: "running" }), T0 + 20 * SEC, 10 * MIN);
    expect(r.first_token).toMatchObject({ p99_ms: 10_622, late: 3, deadline_ms: { min: 3000, max: 60_000 }, p99_over_deadline_ms: 7622, p99_deadline_ms: 3000, p99_over_own_deadline_ms: 2000 });
    const text = renderReport(r, "text", plain);
    expect(text).not.toMatch(/to spare/);
    expect(flat(text)).toContain("over the smallest deadline (3000 ms) by 7622 ms; each job's first token against its own deadline: p99 over by 2000 ms");
  });

  it("one deadline: the same figure as before, said as before", () => {
    const same = [finished("1", T0 + 2 * SEC, 800, 8000, T0 + 4 * SEC), finished("2", T0 + 2 * SEC, 9120, 8000, T0 + 12 * SEC)];
    const r = buildReport(inputs({ events: events.slice(0, 2), done: same }, { phase: "running" }), T0 + 20 * SEC, 10 * MIN);
    expect(r.first_token).toMatchObject({ p99_over_deadline_ms: 1120, p99_deadline_ms: 8000, p99_over_own_deadline_ms: 1120 });
    expect(renderReport(r, "text", plain)).toMatch(/p99 against deadline\s+over by 1120 ms\n/);
  });
});

describe("the drain math never shows a backlog as 0 h", () => {
  // 40 jobs finished over 20 s (7200/h); 8 wait on the queue: 4 s of work.
  const done = Array.from({ length: 40 }, (_, i) => finished(String(i + 1), T0 + 2 * SEC, 500, 8000, T0 + 2 * SEC + (i + 1) * 500));
  const events = done.map((d) => admit(d.id!, T0 + 2 * SEC));

  it("8 waiting at 7200/h: a figure above 0, shown in seconds beside the hours", () => {
    const r = buildReport(inputs({ events, done, queueLen: 8, drainLen: 0 }, { phase: "running" }), T0 + 30 * SEC, 10 * MIN);
    expect(r.drain.done_per_hour).toBe(7200);
    expect(r.drain.backlog_hours).toBeGreaterThan(0);
    expect(r.drain.backlog_hours).toBe(0.0011); // 8 / 7200 h, to 2 significant digits
    const text = renderReport(r, "text", plain);
    expect(text).not.toMatch(/at that pace\s+0 h/);
    expect(text).toMatch(/rjobs \+ rjobs_drain at that pace\s+4 s \(0\.0011 h\)/);
  });

  it("an empty backlog still takes 0 h", () => {
    const r = buildReport(inputs({ events, done, queueLen: 0, drainLen: 0 }, { phase: "running" }), T0 + 30 * SEC, 10 * MIN);
    expect(r.drain.backlog_hours).toBe(0);
    expect(textRow(renderReport(r, "text", plain), `${r.queue} + ${r.queue}_drain at that pace`)?.value).toBe(`0 h (none in ${r.queue} or ${r.queue}_drain)`);
  });
});
