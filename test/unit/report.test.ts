import { describe, expect, it } from "vitest";
import { buildReport, LAB_LABEL, recordingCoverage, rejectLine, stallMsBetween, type Report } from "../../src/report/build.js";
import { percentile, sharesOfHundred } from "../../src/util/stats.js";
import { formatRejectEvent } from "../../src/sampler/rejects.js";
import { counterRise, parseCount } from "../../src/util/counters.js";
import { eventFromEntry, parseDoneEntry, parseRecording, parseSampleLine, type DecisionEvent, type DoneEntry, type ReportInputs, type WatchSample } from "../../src/report/inputs.js";
import { decisionFigures, formatDecisionLine, type AdmissionDecision } from "../../src/gate/policy.js";
import { encodeJob } from "../../src/queue/job.js";
import { watchSample } from "../helpers/watchSample.js";
import { reportInputs } from "../helpers/reportInputs.js";

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const MIN = 60_000;

let seq = 0;
function event(reason: string, job: string, figures: string, tsMs: number, attempt: number | null = 0): DecisionEvent {
  return { id: `${tsMs}-${seq++}`, reason, job, figures, tsMs, gate: "g1", attempt };
}

function done(id: string, firstTokenMs: number | null, over: Partial<DoneEntry> = {}): DoneEntry {
  const enqueueTs = NOW - 5 * MIN;
  return {
    id,
    firstTokenMs,
    deadlineMs: 8000,
    late: firstTokenMs === null ? null : firstTokenMs > 8000,
    tokensOut: 256,
    promptTokens: 24000,
    completionTokens: 256,
    attempt: 0,
    enqueueTs,
    firstTokenTs: firstTokenMs === null ? null : enqueueTs + firstTokenMs,
    doneTs: enqueueTs + 20_000,
    ...over,
  };
}

const sample = watchSample;

function inputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return reportInputs({
    source: { kind: "live", url: "redis://:secret@127.0.0.1:6390" },
    drill: { name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "r1", drillFile: "drills/smoke.yaml", createdAt: new Date(NOW - 60 * MIN).toISOString(), phase: "running" },
    recording: { file: "/s/smoke/watch.jsonl", samples: [], badLines: 0 },
    recordingLooked: "/s/smoke/watch.jsonl",
    ...over,
  });
}

const build = (over: Partial<ReportInputs> = {}, sinceMs = 10 * MIN): Report => buildReport(inputs(over), NOW, sinceMs);

describe("percentile (nearest rank)", () => {
  it.each([
    { values: [], q: 50, want: null },
    { values: [812], q: 99, want: 812 },
    { values: [1, 2, 3, 4], q: 50, want: 2 },
    { values: [4, 3, 2, 1], q: 99, want: 4 },
    { values: Array.from({ length: 100 }, (_, i) => i + 1), q: 99, want: 99 },
    { values: Array.from({ length: 100 }, (_, i) => i + 1), q: 50, want: 50 },
    { values: Array.from({ length: 200 }, (_, i) => 200 - i), q: 99, want: 198 },
  ])("p$q of $values.length values → $want", ({ values, q, want }) => {
    expect(percentile(values, q)).toBe(want);
  });
});

describe("first-token p50/p99 against the deadline", () => {
  it.each([
    { name: "all on time", times: [800, 900, 1000, 1100], p50: 900, p99: 1100, late: 0, over: 1100 - 8000 },
    { name: "one late", times: [800, 900, 1000, 9120], p50: 900, p99: 9120, late: 1, over: 1120 },
    { name: "none", times: [], p50: null, p99: null, late: 0, over: null },
  ])("$name", ({ times, p50, p99, late, over }) => {
    const r = build({ done: times.map((t, i) => done(String(i + 1), t)) });
    expect(r.first_token).toMatchObject({ finished: times.length, p50_ms: p50, p99_ms: p99, late, p99_over_deadline_ms: over });
  });

  it("late comes from the record's own flag, else from first_token_ms > deadline_ms", () => {
    const r = build({ done: [done("1", 9000, { late: null }), done("2", 100, { late: true }), done("3", 100, { late: null, deadlineMs: null })] });
    expect(r.first_token?.late_jobs).toEqual(["1", "2"]);
  });

  it("a record without first_token_ms stays out of p99 and says so", () => {
    const r = build({ done: [done("1", 500), done("2", null)] });
    expect(r.first_token).toMatchObject({ finished: 2, with_first_token: 1, p99_ms: 500 });
    expect(r.notes.join("\n")).toContain("1 finished job(s) have no first_token_ms");
  });

  it("admitted counts admit events in the window", () => {
    const r = build({ events: [event("admit", "1", "packed=24000 limit=32000", NOW - MIN), event("admit", "2", "packed=24000 limit=32000", NOW - 20 * MIN)] });
    expect(r.first_token?.admitted).toBe(1);
  });
});

describe("reject lines in the seed format", () => {
  const decisions: Array<{ decision: AdmissionDecision; attempt: number; route: "retry" | "dead"; want: string }> = [
    { decision: { kind: "reject_packed_tokens", packed: 36012, limit: 32000 }, attempt: 0, route: "retry", want: "reject_packed_tokens job=7 packed=36012 limit=32000 route=retry" },
    { decision: { kind: "reject_host_pressure", psi: 12.4, trigger: "psi_avg10", figure: null }, attempt: 0, route: "retry", want: "reject_host_pressure job=7 psi=12.40 route=retry" },
    { decision: { kind: "reject_deadline_slack", slackMs: 420, limitMs: 1500, stallMsP99: null }, attempt: 0, route: "retry", want: "reject_deadline_slack job=7 slack_ms=420 route=retry" },
    { decision: { kind: "reject_host_pressure", psi: "missing", trigger: "psi_missing", figure: null }, attempt: 2, route: "retry", want: "reject_host_pressure job=7 psi=missing attempt=2 route=retry" },
    { decision: { kind: "reject_host_pressure", psi: 0.4, trigger: "reject_all", figure: null }, attempt: 3, route: "dead", want: "reject_host_pressure job=7 psi=0.40 mode=reject_all attempt=3 route=dead" },
  ];
  it.each(decisions)("$want", ({ decision, attempt, route, want }) => {
    // The stream stores decisionFigures() + " route=…" (scripts.ts reject script).
    const stored = event(decision.kind, "7", `${decisionFigures(decision)} route=${route}`, NOW, attempt);
    expect(rejectLine(stored)).toBe(want);
    // …which is the gate's own stdout line.
    expect(rejectLine(stored)).toBe(`${formatDecisionLine(decision, { id: "7", attempt })} route=${route}`);
  });

  it("the same line as drill watch's for any entry (one rebuild of the gate's line): a missing job id, a route the gate never writes", () => {
    const entries = [
      event("reject_host_pressure", "", "psi=12.40 route=retry", NOW, 0),
      event("reject_host_pressure", "7", "psi=12.40 route=other", NOW, 1),
      event("reject_packed_tokens", "8", "", NOW, null),
    ];
    for (const e of entries) {
      expect(rejectLine(e)).toBe(formatRejectEvent({ reason: e.reason, job: e.job, figures: e.figures, attempt: e.attempt === null ? undefined : String(e.attempt) }));
    }
    expect(rejectLine(entries[0]!)).toBe("reject_host_pressure job=- psi=12.40 route=retry");
    // A route the gate never writes is no route: the figures as stored.
    expect(rejectLine(entries[1]!)).toBe("reject_host_pressure job=7 psi=12.40 route=other attempt=1");
    // A lever that is not a mode: its note after the attempt, as the gate's line (and watch's) has it.
    expect(rejectLine(event("reject_host_pressure", "7", "psi=0.40 mode=reject_all mode_value=banana route=retry", NOW, 2))).toBe("reject_host_pressure job=7 psi=0.40 mode=reject_all attempt=2 mode_value=banana route=retry");
  });

  it("first and last reject of the window, admits and mode flips skipped", () => {
    const r = build({
      events: [
        event("reject_host_pressure", "1", "psi=12.40 route=retry", NOW - 11 * MIN),
        event("admit", "2", "packed=24000 limit=32000", NOW - 9 * MIN),
        event("reject_packed_tokens", "3", "packed=48000 limit=32000 route=retry", NOW - 8 * MIN),
        event("mode", "", "mode=reject_all previous=admit psi=0.40", NOW - 2 * MIN),
        event("reject_deadline_slack", "4", "slack_ms=420 route=retry", NOW - 3 * MIN),
        event("reject_host_pressure", "5", "psi=0.40 mode=reject_all route=retry", NOW - MIN),
        event("admit", "6", "packed=24000 limit=32000", NOW - 10_000),
      ],
    });
    expect(r.first_reject).toEqual({ ts: new Date(NOW - 8 * MIN).toISOString(), line: "reject_packed_tokens job=3 packed=48000 limit=32000 route=retry" });
    expect(r.last_reject?.line).toBe("reject_host_pressure job=5 psi=0.40 mode=reject_all route=retry");
    expect(r.mode_flips).toEqual([{ ts: new Date(NOW - 2 * MIN).toISOString(), mode: "reject_all", previous: "admit", unchanged: false, forced: false, psi: 0.4, psi_avg60: null, by: null }]);
  });

  it("no reject in the window → null lines", () => {
    const r = build({ events: [event("admit", "1", "packed=1 limit=2", NOW - MIN)] });
    expect(r.first_reject).toBeNull();
    expect(r.last_reject).toBeNull();
  });
});

describe("decisions by reason", () => {
  it("fixed rows first, then dead with causes, then bookkeeping events; shares over decisions", () => {
    const r = build({
      events: [
        event("admit", "1", "packed=24000 limit=32000", NOW - MIN),
        event("reject_packed_tokens", "2", "packed=48000 limit=32000 route=retry", NOW - MIN),
        event("reject_host_pressure", "3", "psi=0.40 mode=reject_all route=dead", NOW - MIN),
        event("reject_host_pressure", "4", "psi=missing route=retry", NOW - MIN),
        event("dead", "", "cause=not_json", NOW - MIN, null),
        event("dead", "9", "cause=id_reused_with_different_payload first=admit", NOW - MIN),
        event("redelivery", "1", "stored=admit packed=24000 limit=32000", NOW - MIN),
        event("recovered", "5", "from_gate=g0 route=ready", NOW - MIN),
      ],
    });
    expect(r.decisions?.rows.map((row) => [row.reason, row.count, row.sharePct, row.note])).toEqual([
      ["admit", 1, 16.7, ""],
      ["reject_host_pressure", 2, 33.3, "1 × mode=reject_all, 1 × psi=missing, 1 × route=dead"],
      ["reject_deadline_slack", 0, 0, ""],
      ["reject_packed_tokens", 1, 16.7, ""],
      ["dead", 2, 33.3, "1 × cause=id_reused_with_different_payload, 1 × cause=not_json"],
      ["recovered", 1, null, ""],
      ["redelivery", 1, null, ""],
    ]);
    expect(r.decisions).toMatchObject({ total: 6, rejects: 3 });
    expect(r.retries.nacked_to_retry_in_window).toBe(2);
  });
});

// QA X: made to add up to 100.0, equal counts read 33.4 and 33.3, and 3 of 23 read 13.1 %.
describe("decision shares: each its count over the total", () => {
  it("rounded each on its own: equal counts read equal, each checkable by count ÷ total", () => {
    expect(sharesOfHundred([1, 1, 1])).toEqual([33.3, 33.3, 33.3]);
    expect(sharesOfHundred([2, 1, 0])).toEqual([66.7, 33.3, 0]);
    expect(sharesOfHundred([3, 20])).toEqual([13, 87]);
    expect(sharesOfHundred([4, 5])).toEqual([44.4, 55.6]);
    expect(sharesOfHundred([0, 0])).toEqual([null, null]);
    expect(sharesOfHundred([])).toEqual([]);
  });

  it("in the report: three reasons at one decision each are 33.3 each; bookkeeping events have none", () => {
    const r = build({
      events: [
        event("admit", "1", "packed=24000 limit=32000", NOW - MIN),
        event("reject_packed_tokens", "2", "packed=48000 limit=32000 route=retry", NOW - MIN),
        event("reject_deadline_slack", "3", "slack_ms=-5 route=retry", NOW - MIN),
        event("recovered", "5", "from_gate=g0 route=ready", NOW - MIN),
      ],
    });
    const shares = r.decisions?.rows.map((row) => [row.reason, row.sharePct]);
    expect(shares).toEqual([
      ["admit", 33.3],
      ["reject_host_pressure", 0],
      ["reject_deadline_slack", 33.3],
      ["reject_packed_tokens", 33.3],
      ["recovered", null],
    ]);
  });
});

// QA: a recording cut short read as a calm drill (no PSI, "alarms none") beside reject_host_pressure psi=17.53.
describe("what part of the window the recording covers", () => {
  const at = (offsetS: number) => NOW - 5 * MIN + offsetS * 1000;
  const samples = [4, 5, 6, 7, 8, 9, 10, 11].map((s) => watchSample(at(s), { psi_mem_some_avg10: 0 }));

  it("names the first and last sample, and the decisions in the window after the last or before the first", () => {
    const events = [event("admit", "1", "packed=1 limit=2", at(6)), event("reject_host_pressure", "9", "psi=17.53 route=retry", at(31)), event("mode", "", "mode=reject_all", at(40))];
    const r = build({ events, recording: { file: "cut.jsonl", samples, badLines: 1 } });
    expect(r.pressure).toMatchObject({ samples: 8, first_sample: new Date(at(4)).toISOString(), last_sample: new Date(at(11)).toISOString(), decisions_outside_recording: 1 });
    expect(r.notes).toContain(
      `recording cut.jsonl covers ${new Date(at(4)).toISOString()} to ${new Date(at(11)).toISOString()} only; 1 decision(s) in the window fall outside it (cut short, or started late): its PSI, memory and alarm figures say nothing of them`,
    );
  });

  it("a decision within a sample interval of the edges is covered; no samples or no decisions: null", () => {
    expect(recordingCoverage(samples, [event("admit", "1", "", at(12.5))]).decisions_outside_recording).toBe(0);
    expect(recordingCoverage(samples, [event("admit", "1", "", at(2.5))]).decisions_outside_recording).toBe(0);
    expect(recordingCoverage(samples, []).decisions_outside_recording).toBeNull();
    expect(recordingCoverage([], [event("admit", "1", "", at(3))])).toEqual({ first_sample: null, last_sample: null, decisions_outside_recording: null });
  });
});

describe("window filtering (--since)", () => {
  const evs = [
    event("reject_packed_tokens", "1", "packed=48000 limit=32000 route=retry", NOW - 30 * MIN),
    event("reject_packed_tokens", "2", "packed=48000 limit=32000 route=retry", NOW - 5 * MIN),
    event("admit", "3", "packed=24000 limit=32000", NOW - 30_000),
  ];
  const dones = [done("a", 9000, { doneTs: NOW - 40 * MIN }), done("b", 700, { doneTs: NOW - 2 * MIN }), done("c", 800, { doneTs: null, firstTokenTs: null })];
  const recording = {
    file: "w.jsonl",
    badLines: 0,
    samples: [sample(NOW - 30 * MIN, { psi_mem_some_avg10: 40, cg_oom_kill: 0 }), sample(NOW - 3 * MIN, { psi_mem_some_avg10: 7, cg_oom_kill: 1 }), sample(NOW - 2 * MIN, { psi_mem_some_avg10: 2, cg_oom_kill: 3 })],
  };
  it.each([
    { since: 10 * MIN, rejects: 1, finished: 2, peakPsi: 7, oom: 2, first: "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry" },
    { since: 60 * MIN, rejects: 2, finished: 3, peakPsi: 40, oom: 3, first: "reject_packed_tokens job=1 packed=48000 limit=32000 route=retry" },
    { since: 10_000, rejects: 0, finished: 1, peakPsi: null, oom: null, first: null },
  ])("since $since ms: $rejects rejects, $finished finished, peak psi $peakPsi", ({ since, rejects, finished, peakPsi, oom, first }) => {
    const r = build({ events: evs, done: dones, recording }, since);
    expect(r.drain.rejects_in_window).toBe(rejects);
    expect(r.first_token?.finished).toBe(finished);
    expect(r.pressure.peak_psi_mem_some_avg10.value).toBe(peakPsi);
    expect(r.pressure.oom_kills_in_window).toBe(oom);
    expect(r.first_reject?.line ?? null).toBe(first);
    expect(r.window).toMatchObject({ since_ms: since, to: new Date(NOW).toISOString(), anchored: "now" });
  });

  it("an undated finished job is counted, and said", () => {
    const r = build({ done: [done("c", 800, { doneTs: null, firstTokenTs: null })] });
    expect(r.first_token?.finished).toBe(1);
    expect(r.notes.join("\n")).toContain("carry no done_ts");
  });
});

describe("stall_ms from the recording", () => {
  const samples = [sample(0, { psi_mem_some_rate: 0 }), sample(1000, { psi_mem_some_rate: 10 }), sample(2000, { psi_mem_some_rate: 50, cg_psi_mem_some_rate: 20 }), sample(3000, { psi_mem_some_rate: null })];
  it.each([
    { start: 0, end: 2000, stall: 100 + 200, coverage: 1 }, // (0,1000] host 10 %, (1000,2000] cgroup 20 % (preferred over host 50 %)
    { start: 500, end: 1500, stall: 50 + 100, coverage: 1 },
    { start: 0, end: 3000, stall: 300, coverage: 0.667 }, // (2000,3000] has no rate: not covered
    { start: 1000, end: 5000, stall: 200, coverage: 0.25 },
    { start: 5000, end: 6000, stall: null, coverage: null },
    { start: 2000, end: 2000, stall: null, coverage: null },
  ])("($start, $end] → $stall ms", ({ start, end, stall, coverage }) => {
    const got = stallMsBetween(samples, start, end);
    expect(got?.stallMs ?? null).toBe(stall);
    expect(got?.coverage ?? null).toBe(coverage);
  });
});

describe("cost_proxy", () => {
  // One recorded minute at a steady 10 % cgroup stall: 100 ms of stall per second.
  const base = NOW - 5 * MIN;
  const steady = { file: "w.jsonl", badLines: 0, samples: Array.from({ length: 61 }, (_, i) => sample(base + i * 1000, { cg_psi_mem_some_rate: 10 })) };
  it.each([
    {
      name: "no retry: 24000 + 256 + 0 + 2000 ms stall × 1 / 1000",
      job: done("1", 900, { enqueueTs: base, doneTs: base + 20_000 }),
      events: [],
      want: { stall_ms: 2000, cost_proxy: 24000 + 256 + 2, retry_count: 0, workers_held: 1, stall_coverage: 1 },
    },
    {
      name: "one retry counts the prompt twice; the slot starts at the admit event",
      job: done("2", 900, { attempt: 1, enqueueTs: base, doneTs: base + 20_000 }),
      events: [event("admit", "2", "packed=24000 limit=32000", base + 10_000, 1)],
      want: { stall_ms: 1000, cost_proxy: 24000 + 256 + 24000 + 1, retry_count: 1 },
    },
    {
      name: "completion_tokens missing: tokens_out stands in",
      job: done("3", 900, { completionTokens: null, tokensOut: 100, enqueueTs: base, doneTs: base + 10_000 }),
      events: [],
      want: { completion_tokens: 100, cost_proxy: 24000 + 100 + 1 },
    },
    {
      name: "outside the recording: stall_ms and cost_proxy null, never 0",
      job: done("4", 900, { enqueueTs: NOW - 3 * MIN, doneTs: NOW - 2 * MIN }),
      events: [],
      want: { stall_ms: null, cost_proxy: null },
    },
    {
      name: "prompt_tokens missing: null",
      job: done("5", 900, { promptTokens: null, enqueueTs: base, doneTs: base + 1000 }),
      events: [],
      want: { cost_proxy: null, stall_ms: 100 },
    },
  ])("$name", ({ job, events, want }) => {
    const r = build({ done: [job], events, recording: steady });
    expect(r.cost_proxy?.jobs[0]).toMatchObject(want);
  });

  // QA: a recording started after a job finished left its cost n/a with no word why.
  it("a job wholly outside the recording is said in a note; one inside is not", () => {
    const outside = build({ done: [done("4", 900, { enqueueTs: NOW - 3 * MIN, doneTs: NOW - 2 * MIN })], events: [], recording: steady });
    expect(outside.notes).toContain("1 finished job(s) ran wholly outside the recording (before its first sample or after its last): their stall_ms and cost_proxy are n/a");
    const inside = build({ done: [done("5", 900, { enqueueTs: base, doneTs: base + 1000 })], events: [], recording: steady });
    expect(inside.notes.join("\n")).not.toContain("wholly outside the recording");
  });

  it("total over costed jobs, token part over all of them", () => {
    const jobs = [done("1", 900, { enqueueTs: base, doneTs: base + 20_000 }), done("2", 900, { enqueueTs: base, doneTs: base + 10_000 }), done("3", 900, { enqueueTs: NOW - 3 * MIN, doneTs: NOW - 2 * MIN })];
    const r = build({ done: jobs, recording: steady });
    expect(r.cost_proxy).toMatchObject({ total: 2 * 24256 + 2 + 1, jobs_costed: 2, jobs_without_cost: 1, token_part_total: 3 * 24256 });
    expect(r.cost_proxy?.formula).toBe("cost_proxy = prompt_tokens + completion_tokens + retry_count * prompt_tokens + stall_ms * workers_held / 1000");
    expect(r.cost_proxy?.stall_ms_source).toContain("cg_psi_mem_some_rate");
  });
});

describe("missing sources are null, not 0", () => {
  it("no recording: every pressure figure null, and the note says no recording", () => {
    const r = build({ recording: null, done: [done("1", 900)] });
    expect(r.pressure).toMatchObject({
      recording: null,
      samples: 0,
      peak_psi_mem_some_avg10: { value: null, ts: null },
      peak_cg_psi_mem_some_rate: { value: null },
      peak_cg_mem_peak: { value: null },
      cg_oom_kill_end: null,
      oom_kills_in_window: null,
      cg_mem_max: null,
    });
    expect(r.cost_proxy?.jobs[0]?.stall_ms).toBeNull();
    expect(r.cost_proxy?.total).toBeNull();
    expect(r.cost_proxy?.token_part_total).toBe(24256);
    expect(r.notes.join("\n")).toContain("no recording (looked for /s/smoke/watch.jsonl)");
  });

  it("unreadable Redis figures: decisions, first token, totals, drain all null", () => {
    const r = build({ events: null, done: null, stats: null, queueLen: null, drainLen: null });
    expect(r.decisions).toBeNull();
    expect(r.first_token).toBeNull();
    expect(r.totals).toBeNull();
    expect(r.cost_proxy).toBeNull();
    expect(r.retries).toEqual({ retry_count_total: null, nacked_to_retry_in_window: null, finished_after_retry: null });
    expect(r.drain).toMatchObject({ queue_len: null, head_age_ms: null, drain_len: null, rejects_in_window: null, done_per_hour: null, backlog_hours: null });
  });

  it("a recorded signal that was null stays null (cgroup absent)", () => {
    const r = build({ recording: { file: "w", badLines: 0, samples: [sample(NOW - MIN, { cg_mem_peak: null, cg_oom_kill: null })] } });
    expect(r.pressure.peak_cg_mem_peak.value).toBeNull();
    expect(r.pressure.oom_kills_in_window).toBeNull();
    expect(r.pressure.peak_psi_mem_some_avg10.value).toBe(1);
  });

  describe("oom_kills_in_window", () => {
    const absent = { cg_oom_kill: null, cg_absent: true };
    const oomIn = (samples: Array<Partial<WatchSample>>) =>
      build({ recording: { file: "w", badLines: 0, samples: samples.map((over, i) => sample(NOW - 10 * MIN + i * 1000, over)) } }).pressure.oom_kills_in_window;
    it("a cgroup that appears with kills after it was recorded absent: a new cgroup counts from 0", () => {
      expect(oomIn([absent, absent, { cg_oom_kill: 2 }, { cg_oom_kill: 3 }])).toBe(3);
    });
    it("gone and back: the new cgroup's kills count, whatever the old count", () => {
      expect(oomIn([{ cg_oom_kill: 4 }, absent, { cg_oom_kill: 4 }])).toBe(4);
    });
    it("the first recorded count of a cgroup already there is a baseline", () => {
      expect(oomIn([{ cg_oom_kill: 2 }, { cg_oom_kill: 3 }])).toBe(1);
    });
    it("an unreadable count (cgroup there) keeps the baseline", () => {
      expect(oomIn([{ cg_oom_kill: 2 }, { cg_oom_kill: null }, { cg_oom_kill: 2 }])).toBe(0);
    });
    it("never a count: n/a", () => {
      expect(oomIn([absent, absent])).toBeNull();
    });
  });

  it("stats fields never incremented are 0 (Redis semantics), garbage is null", () => {
    const r = build({ stats: { tokens_out: "5120", retry_count: "x" } });
    expect(r.totals).toEqual({ tokens_out: 5120, retry_count: null, jobs_done: 0, jobs_late: 0 });
  });

  it("a negative stats value is not a count, as drill watch reads it (parseCount)", () => {
    const r = build({ stats: { jobs_done: "-3", tokens_out: "+4" } });
    expect(r.totals).toMatchObject({ jobs_done: null, tokens_out: null });
  });
});

describe("counters shared with the sidecar", () => {
  it("parseCount: digits only", () => {
    expect(["0", "12", "-1", "+1", "1.5", "", " 1"].map(parseCount)).toEqual([0, 12, null, null, null, null, null]);
  });
  it("counterRise: a drop is a recreated cgroup, its whole count new", () => {
    expect([counterRise(2, 5), counterRise(5, 5), counterRise(5, 1), counterRise(5, 0)]).toEqual([3, 0, 1, 0]);
  });
});

describe("drain math check", () => {
  it("head age from enqueue_ts, backlog at the window's pace", () => {
    const head = encodeJob({ id: "9", prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: NOW - 4200, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
    const r = build({ queueLen: 3, queueHead: head, drainLen: 7, done: [done("1", 900, { doneTs: NOW - MIN }), done("2", 900, { doneTs: NOW - MIN })] });
    // 2 finished in the 4 min from their enqueue_ts (no admit recorded) to their finish = 30/h; 10 waiting → 0.33 h
    expect(r.drain).toEqual({
      queue_len: 3,
      head_job: "9",
      head_age_ms: 4200,
      drain_len: 7,
      rejects_in_window: 0,
      done_per_hour: 30,
      backlog_hours: 0.33,
      pace_from: new Date(NOW - 5 * MIN).toISOString(),
      pace_to: new Date(NOW - MIN).toISOString(),
    });
  });

  it("an undecodable head: age n/a, said", () => {
    const r = build({ queueLen: 1, queueHead: Buffer.from("not json") });
    expect(r.drain.head_age_ms).toBeNull();
    expect(r.notes.join("\n")).toContain("head of jobs is not a valid job");
  });

  it("the pace counts only the time the drill existed", () => {
    // Both jobs were enqueued 5 min ago (done()), before the run was created 3 min ago: the span starts at its creation.
    const created = new Date(NOW - 3 * MIN).toISOString();
    const r = build({ drill: { name: "d", rollbackCommand: "drill rollback --name d", runId: null, drillFile: null, createdAt: created, phase: null }, done: [done("1", 1, { doneTs: NOW - 2 * MIN }), done("2", 1, { doneTs: NOW - MIN })] });
    expect(r.drain.pace_from).toBe(created);
    expect(r.drain.done_per_hour).toBe(60); // 2 jobs in 2 min
  });
});

describe("labels and source", () => {
  it("carries the lab label and redacts the Redis password", () => {
    const r = build();
    expect(r.label).toBe(LAB_LABEL);
    expect(LAB_LABEL).toBe("lab expectation from a declared drill, not observed production");
    expect(r.source).toEqual({ kind: "live", where: "redis://:***@127.0.0.1:6390" });
  });
  it("an export anchors the window at the export", () => {
    const r = build({ source: { kind: "export", file: "/s/d/final-x.jsonl", atMs: NOW } });
    expect(r.window.anchored).toBe("export");
    expect(r.notes.join("\n")).toContain("rollback's export /s/d/final-x.jsonl");
  });
});

describe("tolerant parsers", () => {
  it("stream entry: ts field, else the stream id's time; empty attempt is null", () => {
    expect(eventFromEntry("1764480000999-0", ["reason", "dead", "job", "", "figures", "cause=not_json", "ts", "1764480000123", "gate", "g", "attempt", ""])).toEqual({
      id: "1764480000999-0",
      reason: "dead",
      job: "",
      figures: "cause=not_json",
      tsMs: 1764480000123,
      gate: "g",
      attempt: null,
    });
    expect(eventFromEntry("1764480000999-3", ["reason", "mode"]).tsMs).toBe(1764480000999);
  });

  it.each([
    { text: "not json", want: null },
    { text: "[1,2]", want: null },
    { text: '{"id":7,"first_token_ms":"812","late":"yes","done_ts":1e400}', want: { id: "7", firstTokenMs: 812, late: null, doneTs: null, deadlineMs: null } },
    { text: '{"id":"7","first_token_ms":812,"deadline_ms":8000,"late":false,"tokens_out":256}', want: { id: "7", firstTokenMs: 812, deadlineMs: 8000, late: false, tokensOut: 256, promptTokens: null } },
  ])("done record $text", ({ text, want }) => {
    const got = parseDoneEntry(text);
    if (want === null) expect(got).toBeNull();
    else expect(got).toMatchObject(want);
  });

  it("recording: bad lines counted, samples sorted, cg_mem_max keeps max", () => {
    const rec = parseRecording(
      "w.jsonl",
      ['{"ts":"2025-11-30T12:00:02.000Z","psi_mem_some_avg10":1.5,"cg_mem_max":"max","alarm":["oom_kill"]}', "", "{torn", '{"ts":"2025-11-30T12:00:01.000Z","cpu_idle_pct":null}', '{"no_ts":1}'].join("\n"),
    );
    expect(rec.badLines).toBe(2);
    expect(rec.samples.map((s) => s.tsMs)).toEqual([Date.parse("2025-11-30T12:00:01.000Z"), Date.parse("2025-11-30T12:00:02.000Z")]);
    expect(rec.samples[1]).toMatchObject({ psi_mem_some_avg10: 1.5, cg_mem_max: "max", alarm: ["oom_kill"], cg_psi_mem_some_rate: null });
    expect(parseSampleLine('{"ts":"yesterday"}')).toBeNull();
  });

  it("recording: a sample taken while the worker cgroup did not exist says so (its missing entry)", () => {
    const line = (missing: unknown) => JSON.stringify({ ts: "2025-11-30T12:00:01.000Z", cg_oom_kill: null, missing });
    expect(parseSampleLine(line([{ field: "cg_oom_kill", file: "/sys/fs/cgroup/infer", reason: "worker cgroup does not exist" }]))?.cg_absent).toBe(true);
    expect(parseSampleLine(line([{ field: "cg_oom_kill", file: "/sys/fs/cgroup/infer/memory.events", reason: "unreadable (EACCES)" }]))?.cg_absent).toBe(false);
    expect(parseSampleLine(line("garbage"))?.cg_absent).toBe(false);
    expect(parseSampleLine(line([null, 3]))?.cg_absent).toBe(false);
  });
});

// QA (scale): watch read only the oldest 2000 of a long admitted list; its deadline_slack_ms is now null with the reason in missing.
describe("recorded samples whose deadline slack was not known", () => {
  const at = (offsetS: number) => NOW - 5 * MIN + offsetS * 1000;
  it("are found by their missing entry, and the report says the lowest slack is of the other samples", () => {
    const line = (reason: string) => JSON.stringify({ ts: "2025-11-30T12:00:01.000Z", deadline_slack_ms: null, missing: [{ field: "deadline_slack_ms", file: "redis://h:1 jobs:admitted", reason }] });
    expect(parseSampleLine(line("read the oldest 2000 of 9893 admitted jobs (a sample reads at most 2000): a smaller slack further back is not seen"))?.slack_partial).toBe(true);
    expect(parseSampleLine(line("not connected"))?.slack_partial).toBe(false);

    const samples = [watchSample(at(1), { deadline_slack_ms: 5000 }), watchSample(at(2), { slack_partial: true }), watchSample(at(3), { slack_partial: true })];
    const r = build({ recording: { file: "w.jsonl", samples, badLines: 0 } });
    expect(r.pressure.lowest_deadline_slack_ms.value).toBe(5000);
    expect(r.notes).toContain(
      "deadline_slack_ms is n/a in 2 of 3 recorded sample(s): jobs:admitted was too long for watch to read whole (the smallest slack was not known); the lowest deadline slack is of the other samples",
    );
    const all = build({ recording: { file: "w.jsonl", samples: samples.slice(1), badLines: 0 } });
    expect(all.pressure.lowest_deadline_slack_ms.value).toBeNull();
    expect(all.notes.find((n) => n.startsWith("deadline_slack_ms is n/a"))).toMatch(/in 2 of 2 .*; the lowest deadline slack is n\/a$/);
  });
});

describe("tokens_out: every token decoded (stats) beside the finished records'", () => {
  // The soak: one job of 300 tokens, its first run given back at SIGTERM after 178 tokens and run again.
  it("the gap to the finished records is named: decoded by runs given back and run again", () => {
    const r = build({ stats: { tokens_out: "478", jobs_done: "1", worker_recovered: "1" }, done: [done("1", 900, { tokensOut: 300 })] });
    expect(r.tokens_out_split).toEqual({ decoded: 478, finished: 300, given_back: 178, worker_recovered: 1, unknown_because: null });
  });

  it("counts every finished record, not only the window's", () => {
    const old = done("1", 900, { tokensOut: 300, doneTs: NOW - 30 * MIN });
    const r = build({ stats: { tokens_out: "600", jobs_done: "2" }, done: [old, done("2", 900, { tokensOut: 300 })] }, 1 * MIN);
    expect(r.tokens_out_split).toMatchObject({ finished: 600, given_back: 0 });
  });

  it.each([
    { name: "fewer records than jobs_done (skipped, or the export short)", stats: { tokens_out: "900", jobs_done: "3" }, records: 2, why: /2 of the 3/ },
    { name: "a record without tokens_out", stats: { tokens_out: "900", jobs_done: "2" }, records: 2, noTokens: true, why: /without tokens_out/ },
    { name: "stats behind the records (tokens not flushed yet)", stats: { tokens_out: "100", jobs_done: "2" }, records: 2, why: /not flushed/ },
  ])("$name: the difference is null, and says why", ({ stats, records, noTokens, why }) => {
    const recs = Array.from({ length: records }, (_, i) => done(String(i + 1), 900, { tokensOut: noTokens && i === 0 ? null : 300 }));
    const split = build({ stats, done: recs }).tokens_out_split;
    expect(split?.given_back).toBeNull();
    expect(split?.unknown_because).toMatch(why);
  });

  it("unreadable done list: finished and difference null", () => {
    expect(build({ stats: { tokens_out: "5" }, done: null }).tokens_out_split).toMatchObject({ decoded: 5, finished: null, given_back: null });
  });
});
