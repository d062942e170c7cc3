import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import type { DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readCgroupNow } from "../../src/report/gather.js";
import { upDiedUnrecorded } from "../../src/drill/state.js";
import { readProcessStat } from "../../src/host/process.js";
import { buildReport, FIRST_TOKEN_COUNTED } from "../../src/report/build.js";
import { drillEnded } from "../../src/drill/up.js";
import { Chalk } from "chalk";
import { endedText, renderReport } from "../../src/report/render.js";
import { parseExport } from "../../src/report/exportFile.js";
import { queueKeys } from "../../src/queue/keys.js";
import type { DecisionEvent, DoneEntry, JobTiming, ReportInputs } from "../../src/report/inputs.js";
import { watchSample } from "../helpers/watchSample.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat, textRow } from "../helpers/reportText.js";

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const MIN = 60_000;

const sample = watchSample;

function inputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return reportInputs({
    drill: { name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "r1", drillFile: "drills/smoke.yaml", createdAt: new Date(NOW - 5 * MIN).toISOString(), phase: "stopped" },
    recording: { file: "/s/smoke/watch.out", samples: [], badLines: 0 },
    recordingLooked: "/s/smoke/watch.out",
    ...over,
  });
}

// QA AD: a peak of zero was stamped with the first sample's time ("si (swap-in, pages/s) | 0.0 | <ts>").
describe("a signal that never rose names no moment", () => {
  it("says never above 0 where the peak is 0, keeps the time of a real peak and of a slack of 0", () => {
    const samples = [sample(NOW - 4 * MIN, { si: 0, deadline_slack_ms: 0, stall_ms_p99: 0 }), sample(NOW - 10_000, { si: 0, deadline_slack_ms: 500, stall_ms_p99: 40 })];
    const text = renderReport(buildReport(inputs({ recording: { file: "w", samples, badLines: 0 } }), NOW, 10 * MIN), "text", new Chalk({ level: 0 }));
    const row = (label: string) => text.split("\n").find((l) => l.trimStart().startsWith(label))!;
    expect(row("si (swap-in")).toMatch(/0\.0\s+never above 0$/);
    expect(row("stall_ms_p99")).toContain(new Date(NOW - 10_000).toISOString());
    expect(row("deadline_slack_ms")).toContain(new Date(NOW - 4 * MIN).toISOString());
  });
});

describe("OOM kills with the worker cgroup read now (up stops before watch's next sample)", () => {
  const samples = [sample(NOW - 4 * MIN, { cg_oom_kill: 0 }), sample(NOW - 10_000, { cg_oom_kill: 0 })];
  const file = "/sys/fs/cgroup/x/infer/memory.events";

  it("counts the kills read after the last sample, and says where the figure came from", () => {
    const r = buildReport(inputs({ recording: { file: "/s/smoke/watch.out", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: 2, reason: null } }), NOW, 10 * MIN);
    expect(r.pressure.oom_kills_in_window).toBe(2);
    expect(r.pressure.cg_oom_kill_end).toBe(2);
    expect(r.notes.join("\n")).toContain(`OOM kills counted to ${new Date(NOW).toISOString()} from ${file}`);
    expect(renderReport(r, "text", new Chalk({ level: 0 }))).toContain("2 in window (cg_oom_kill=2)");
  });

  it("a read that agrees with the recording adds no note; an unreadable one keeps the recording's figure", () => {
    const same = buildReport(inputs({ recording: { file: "w", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: 0, reason: null } }), NOW, 10 * MIN);
    expect(same.pressure.oom_kills_in_window).toBe(0);
    expect(same.notes.join("\n")).not.toContain("OOM kills counted");
    const bad = buildReport(inputs({ recording: { file: "w", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: null, reason: "EACCES" } }), NOW, 10 * MIN);
    expect(bad.pressure.oom_kills_in_window).toBe(0);
    expect(bad.notes.join("\n")).toContain("could not be read");
  });

  it("with no recorded reading, the counter is shown but the window's kills stay n/a (no baseline), never 0", () => {
    const r = buildReport(inputs({ recording: null, cgroupNow: { tsMs: NOW, file, oomKill: 2, reason: null } }), NOW, 10 * MIN);
    expect(r.pressure.oom_kills_in_window).toBeNull();
    expect(r.pressure.cg_oom_kill_end).toBe(2);
  });

  // CI: the worker's KV overfilled the cgroup in the drill's first second, before watch's first
  // sample; every sample read oom_kill=1, and the kill that stopped the drill counted 0.
  it("up's reading at setup is the first one: a kill before watch's first sample counts", () => {
    const after = [sample(NOW - 4 * MIN, { cg_oom_kill: 1 }), sample(NOW - 10_000, { cg_oom_kill: 1 })];
    const withSetup = buildReport(inputs({ recording: { file: "w", samples: after, badLines: 0 }, cgroupAtSetup: { tsMs: NOW - 5 * MIN, count: 0 } }), NOW, 10 * MIN);
    expect(withSetup.pressure.oom_kills_in_window).toBe(1);
    expect(buildReport(inputs({ recording: { file: "w", samples: after, badLines: 0 } }), NOW, 10 * MIN).pressure.oom_kills_in_window).toBe(0);
    // Before the window: kills between setup and the window's start are not the window's.
    expect(buildReport(inputs({ recording: { file: "w", samples: after, badLines: 0 }, cgroupAtSetup: { tsMs: NOW - 20 * MIN, count: 0 } }), NOW, 10 * MIN).pressure.oom_kills_in_window).toBe(0);
    // No sample at all: setup and the live read count it.
    const none = buildReport(inputs({ recording: null, cgroupAtSetup: { tsMs: NOW - 5 * MIN, count: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: 1, reason: null } }), NOW, 10 * MIN);
    expect(none.pressure.oom_kills_in_window).toBe(1);
    // QA: its note read "where the recording's last sample (null) said oom_kill=n/a".
    expect(none.notes.join("\n")).toContain("1 in the window, where the recording has no sample");
    expect(none.notes.join("\n")).not.toMatch(/\(null\)|last sample \(/);
  });
});


describe("late jobs and first-token percentiles count every job admitted in the window, not only finished ones", () => {
  const enq = NOW - 60_000;
  const admit = (job: string, tsMs: number): DecisionEvent => ({ id: `${tsMs}-${job}`, reason: "admit", job, figures: "slack=5000", tsMs, gate: "g1", attempt: 0 });
  const timing = (id: string, role: JobTiming["role"], over: Partial<JobTiming> = {}): JobTiming => ({ id, role, enqueueTs: enq, deadlineMs: 8000, firstTokenTs: null, ...over });
  const finished: DoneEntry = {
    id: "1", firstTokenMs: 900, deadlineMs: 8000, late: false, tokensOut: 256, promptTokens: 24000, completionTokens: 256, attempt: 0,
    enqueueTs: enq, firstTokenTs: enq + 900, doneTs: enq + 5000,
  };
  const build = (over: Partial<ReportInputs>) =>
    buildReport(inputs({ events: [admit("1", enq + 100), admit("2", enq + 200), admit("3", enq + 300), admit("4", NOW - 1000)], done: [finished], ...over }), NOW, 10 * MIN);

  it("an admitted job past its deadline without a first token is late; a drained one with a first token is in p99; one within its deadline is not late", () => {
    const r = build({
      unfinished: [
        timing("2", "admitted"), // due at enq + 8 s, long past, no first token: late
        timing("3", "drain"), // drained after its first token at 12 s: in the percentiles, and late
        timing("4", "working", { enqueueTs: NOW - 2000 }), // due 6 s from now: on time so far
      ],
      firstTokens: { "3": enq + 12_000 },
    });
    const ft = r.first_token!;
    expect(ft.late_jobs).toEqual(["2", "3"]);
    expect(ft.late).toBe(2);
    expect(ft.late_finished).toBe(0);
    expect(ft.late_unfinished).toBe(2);
    expect(ft.with_first_token).toBe(2);
    expect(ft.unfinished_with_first_token).toBe(1);
    // QA AE: job 3's first token came late: timed once, among those with one, not also as waiting.
    expect(ft.waiting_past_deadline).toBe(1);
    expect(ft.p99_ms).toBe(12_000);
    expect(ft.p50_ms).toBe(900);
    const text = renderReport(r, "text", new Chalk({ level: 0 }));
    expect(flat(text)).toContain("2 of 4 judged (0 finished late; 2 admitted and without a first token at their deadline: job=2 job=3)");
    expect(flat(text)).toContain("over: 1 of 3 jobs are past their deadline still without a first token (over 1 %); of the 2 with one: over by 4000 ms");
  });

  it("drained jobs alone (nothing finished) give the first-token percentiles from <q>:first_token", () => {
    const r = build({
      done: [],
      unfinished: [timing("1", "drain"), timing("2", "drain"), timing("3", "drain")],
      firstTokens: { "1": enq + 3000, "2": enq + 4000 },
    });
    expect(r.first_token!.p50_ms).toBe(3000);
    expect(r.first_token!.p99_ms).toBe(4000);
    expect(r.first_token!.late_jobs).toEqual(["3"]);
  });

  it("without the lists read (an older caller), only finished jobs count, and the text says so", () => {
    const r = build({});
    expect(r.first_token!.late_unfinished).toBeNull();
    expect(flat(renderReport(r, "text", new Chalk({ level: 0 })))).toContain("unfinished jobs not read");
  });
});

// QA: a stopped worker, no admitted job with a first token, 3 past their deadline: the text said "over", the
// JSON had p99_over_deadline_ms null beside waiting_past_deadline 3, and a script had to work "over" out itself.
describe("p99_deadline_verdict in --format json says what the text's \"p99 against deadline\" says", () => {
  const enq = NOW - 60_000;
  const admit = (job: string): DecisionEvent => ({ id: `${enq}-${job}`, reason: "admit", job, figures: "", tsMs: enq + 100, gate: "g1", attempt: 0 });
  const waiting = (id: string): JobTiming => ({ id, role: "admitted", enqueueTs: enq, deadlineMs: 8000, firstTokenTs: null });
  const finished = (id: string, firstTokenMs: number): DoneEntry => ({
    id, firstTokenMs, deadlineMs: 8000, late: firstTokenMs > 8000, tokensOut: 8, promptTokens: 100, completionTokens: 8, attempt: 0, enqueueTs: enq, firstTokenTs: enq + firstTokenMs, doneTs: enq + firstTokenMs + 100,
  });
  const cases: Array<[string, Partial<ReportInputs>, "over" | "within" | null, string]> = [
    ["a stopped worker: none with a first token, 3 past their deadline", { events: ["1", "2", "3"].map(admit), done: [], unfinished: ["1", "2", "3"].map(waiting), firstTokens: {} }, "over", "over: 3 of 3 jobs are past their deadline"],
    ["all in time", { events: [admit("1")], done: [finished("1", 900)], unfinished: [], firstTokens: {} }, "within", "within, 7100 ms to spare"],
    ["late first tokens", { events: [admit("1")], done: [finished("1", 9000)], unfinished: [], firstTokens: {} }, "over", "over by 1000 ms"],
    ["in time, but one of 2 timed still waits past its deadline", { events: [admit("1"), admit("2")], done: [finished("1", 900)], unfinished: [waiting("2")], firstTokens: {} }, "over", "over: 1 of 2 jobs are past their deadline"],
    ["nothing timed", { events: [], done: [], unfinished: [], firstTokens: {} }, null, "n/a"],
  ];
  for (const [what, given, verdict, text] of cases) {
    it(`${what}: ${verdict}`, () => {
      const r = buildReport(inputs(given), NOW, 10 * MIN, { sinceGiven: true });
      const doc = JSON.parse(renderReport(r, "json", new Chalk({ level: 0 }))) as { first_token: Record<string, unknown> };
      expect(doc.first_token.p99_deadline_verdict).toBe(verdict);
      const row = renderReport(r, "text", new Chalk({ level: 0 })).split("\n").find((l) => l.includes("p99 against deadline"))!;
      expect(row).toMatch(new RegExp(`p99 against deadline\\s+${text.replace(/[()]/g, "\\$&")}`));
      // Every existing field stays.
      expect(doc.first_token).toHaveProperty("p99_over_deadline_ms");
      expect(doc.first_token).toHaveProperty("waiting_past_deadline");
    });
  }
});

describe("rollback's export carries what the late count needs", () => {
  it("reads the drained payloads' times and <q>:first_token", () => {
    const payload = (id: string) => ({ utf8: JSON.stringify({ id, enqueue_ts: 1000, deadline_ms: 8000, prompt_tokens: 10 }) });
    const text = [
      { key: "jobs_drain", type: "list", ttl_ms: null, value: [payload("2"), payload("3"), { utf8: "nope" }] },
      { key: "jobs:first_token", type: "hash", ttl_ms: null, value: { "2": { utf8: "4000" }, "9": { utf8: "x" } } },
    ]
      .map((l) => JSON.stringify(l))
      .join("\n");
    const exported = parseExport(text, queueKeys("jobs"));
    expect(exported.unfinished!.map((t) => [t.id, t.role, t.enqueueTs, t.deadlineMs])).toEqual([
      ["2", "drain", 1000, 8000],
      ["3", "drain", 1000, 8000],
    ]);
    expect(exported.firstTokens).toEqual({ "2": 4000 });
  });
});

describe("the header says how the drill ended (M3)", () => {
  const created = new Date(NOW - 5 * MIN).toISOString();
  const drillWith = (over: Partial<NonNullable<ReportInputs["drill"]>>): ReportInputs["drill"] => ({ name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "r1", drillFile: "d.yaml", createdAt: created, scheduleStartedAt: created, phase: "stopped", ...over });

  it("up's stopped_early verdict with its reason, how far in, and what was not packed: text, md and json", () => {
    const ended = drillEnded(
      {
        interrupted: false,
        exitedEarly: [{ key: "gate", how: "exited (code 143)", code: 143, log: null, cause: "exited", lastLine: null }],
        pushed: ["1", "2", "3", "4", "5", "6"],
        notPacked: 6,
        unansweredPushes: 0,
        skippedJobs: 0,
      },
      NOW - 5 * MIN + 7000,
    );
    expect(ended).toMatchObject({ verdict: "stopped_early", reason: "gate exited (code 143)", pushed: 6, notPacked: 6, unansweredPushes: 0, skippedJobs: 0 });
    const r = buildReport(inputs({ drill: drillWith({ ended }) }), NOW, 10 * MIN);
    expect(r.drill?.ended).toMatchObject({ verdict: "stopped_early", after_ms: 7000, not_packed: 6 });
    const line = "ended: stopped_early — gate exited (code 143) 7 s into the drill; 6 of 12 jobs not packed";
    expect(renderReport(r, "text", new Chalk({ level: 0 }))).toContain(line);
    expect(renderReport(r, "md", new Chalk({ level: 0 }))).toContain(line);
    expect((JSON.parse(renderReport(r, "json", new Chalk({ level: 0 }))) as { drill: { ended: { verdict: string } } }).drill.ended.verdict).toBe("stopped_early");
  });

  // QA: up said "gate: exited … 7s into the drill" and the report "8 s": the end was stamped when up wrote it, after its follow-up.
  it("a stopped_early end is when up saw the exit, not when it wrote the verdict", () => {
    const seenAt = NOW - 5 * MIN + 7000;
    const ended = drillEnded({ interrupted: false, exitedEarly: [{ key: "gate", how: "exited (killed by a signal)", code: null, log: null, cause: "exited", lastLine: null, atMs: seenAt }], pushed: ["1"], notPacked: 3, unansweredPushes: 0, skippedJobs: 0 }, seenAt + 1400);
    expect(ended.at).toBe(new Date(seenAt).toISOString());
    expect(buildReport(inputs({ drill: drillWith({ ended }) }), NOW, 10 * MIN).drill?.ended?.after_ms).toBe(7000);
  });

  // up counts "N s into the drill" from when gate and worker were ready; the report counted from the run's creation (5.6 s apart in a packing run).
  it("counts from the schedule's clock start when up recorded it, as up's own line does", () => {
    const ended = drillEnded({ interrupted: false, exitedEarly: [], pushed: [], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 5 * MIN + 9000);
    const r = buildReport(inputs({ drill: drillWith({ ended, scheduleStartedAt: new Date(NOW - 5 * MIN + 4000).toISOString() }) }), NOW, 10 * MIN);
    expect(r.drill?.ended?.after_ms).toBe(5000);
  });

  // QA: a gate killed while up waited for readiness read "1 s into the drill"; up said "before the schedule started".
  it("a run that stopped before its schedule started says when, not how far in", () => {
    const ended = drillEnded({ interrupted: false, exitedEarly: [{ key: "gate", how: "exited (killed by a signal)", code: null, log: null, cause: "exited", lastLine: null }], pushed: [], notPacked: 5, unansweredPushes: 0, skippedJobs: 0 }, NOW - 5 * MIN + 1044);
    const r = buildReport(inputs({ drill: drillWith({ ended, scheduleStartedAt: null }) }), NOW, 10 * MIN);
    expect(r.drill?.ended?.after_ms).toBeNull();
    const text = renderReport(r, "text", new Chalk({ level: 0 }));
    expect(text).toContain(`gate exited (killed by a signal) at ${ended.at}`);
    expect(text).not.toContain("into the drill");
  });

  it("interrupted, a clean run, and a rollback that stopped up before it recorded a verdict", () => {
    const interrupted = drillEnded({ interrupted: true, exitedEarly: [], pushed: ["1"], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 4 * MIN);
    expect(endedText(buildReport(inputs({ drill: drillWith({ ended: interrupted }) }), NOW, 10 * MIN).drill!.ended!)).toBe(
      "ended: interrupted — up was stopped by a signal (SIGINT/SIGTERM) 60 s into the drill; its one job packed",
    );
    // QA: it never said which; up records the signal it got.
    const byCtrlC = drillEnded({ interrupted: true, exitedEarly: [], pushed: ["1"], notPacked: 2, unansweredPushes: 0, skippedJobs: 0 }, NOW - 4 * MIN, "SIGINT");
    expect(endedText(buildReport(inputs({ drill: drillWith({ ended: byCtrlC }) }), NOW, 10 * MIN).drill!.ended!)).toBe(
      "ended: interrupted — up was stopped by SIGINT 60 s into the drill; 2 of 3 jobs not packed",
    );
    const ran = drillEnded({ interrupted: false, exitedEarly: [], pushed: ["1", "2"], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 3 * MIN);
    expect(endedText(buildReport(inputs({ drill: drillWith({ ended: ran }) }), NOW, 10 * MIN).drill!.ended!)).toBe("ended: ran — ran to its end (120 s); all 2 jobs packed");
    // QA: "all N jobs packed" beside phases a short --duration skipped, whose jobs were never counted.
    const short = drillEnded({ interrupted: false, exitedEarly: [], pushed: ["1", "2"], notPacked: 0, unansweredPushes: 0, skippedJobs: 8 }, NOW - 3 * MIN);
    const shortReport = buildReport(inputs({ drill: drillWith({ ended: short }) }), NOW, 10 * MIN);
    expect(shortReport.drill!.ended!.skipped_jobs).toBe(8);
    expect(endedText(shortReport.drill!.ended!)).toBe("ended: ran — ran to its end (120 s); all 2 jobs packed; 8 more in phases past the drill's end, skipped");
    // QA AD: "all 0 jobs packed" for a drill that packs none.
    const none = drillEnded({ interrupted: false, exitedEarly: [], pushed: [], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 3 * MIN);
    expect(endedText(buildReport(inputs({ drill: drillWith({ ended: none }) }), NOW, 10 * MIN).drill!.ended!)).toBe("ended: ran — ran to its end (120 s); no job packed");
    // A state written before the count: nothing said of it.
    const { skippedJobs: _older, ...older } = short;
    expect(endedText(buildReport(inputs({ drill: drillWith({ ended: older }) }), NOW, 10 * MIN).drill!.ended!)).toBe("ended: ran — ran to its end (120 s); all 2 jobs packed");
    const rolled = buildReport(inputs({ drill: drillWith({ phase: "complete", ended: null, rollbackAt: new Date(NOW - 4 * MIN).toISOString() }) }), NOW, 10 * MIN);
    // Without up's end record, what it packed is not known: said n/a, with why (QA: dropped without a word).
    expect(endedText(rolled.drill!.ended!)).toBe("ended: rolled_back — a rollback took the drill over before up recorded an end 60 s into the drill; what up packed n/a (up wrote no end record as the rollback stopped it: gone by then, or an older drill)");
    // QA: an up-ended.json not taken (a note says why) dropped what up packed, and the jobs it did not, without a word.
    const notTaken = buildReport(inputs({ drill: drillWith({ phase: "complete", ended: null, rollbackAt: new Date(NOW - 4 * MIN).toISOString(), upEndedNotTaken: true }) }), NOW, 10 * MIN);
    expect(notTaken.drill!.ended).toMatchObject({ pushed: null, not_packed: null, other_jobs: null, packed_unknown: "its end record was not taken: see notes", other_jobs_unknown: "its end record was not taken: see notes" });
    expect(endedText(notTaken.drill!.ended!)).toBe("ended: rolled_back — a rollback took the drill over before up recorded an end 60 s into the drill; what up packed n/a (its end record was not taken: see notes)");
    expect(buildReport(inputs({ drill: drillWith({ phase: "running" }) }), NOW, 10 * MIN).drill!.ended).toBeNull();
  });

  // QA: "all 9 jobs packed" beside 11 decisions and 11 ids issued: 2 were a `drill pack` the operator ran during the drill.
  it("jobs decided during the run that up did not pack (a hand-run drill pack) are said apart from up's: text, md and json", () => {
    const ended = drillEnded({ interrupted: false, exitedEarly: [], pushed: ["1", "2", "3"], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 3 * MIN);
    const start = Date.parse(created);
    const decided = (job: string, tsMs: number, reason = "admit"): DecisionEvent => ({ id: `${tsMs}-0`, reason, job, figures: "", tsMs, gate: "g1", attempt: 0 });
    const events = [
      decided("1", start + 1000), decided("2", start + 1100), decided("3", start + 1200, "reject_packed_tokens"),
      decided("4", start + 20_000, "reject_host_pressure"), decided("5", start + 20_100), // pushed by hand
      decided("5", start + 20_200, "redelivery"), // bookkeeping, not a second job
      decided("0", start - 60_000), // an earlier run's job on the same queue: not this run's
    ];
    const r = buildReport(inputs({ events, drill: drillWith({ ended }) }), NOW, 10 * MIN);
    expect(r.drill!.ended).toMatchObject({ pushed: 3, other_jobs: 2, other_job_ids: ["4", "5"] });
    expect(r.decisions!.total).toBe(ended.pushed! + r.drill!.ended!.other_jobs!);
    const line = "ended: ran — ran to its end (120 s); all 3 jobs packed; 2 more job(s) decided on the queue during the run that up did not pack (job=4 job=5: pushed by hand or by another producer; in the figures below)";
    expect(renderReport(r, "text", new Chalk({ level: 0 }))).toContain(line);
    expect(renderReport(r, "md", new Chalk({ level: 0 }))).toContain(line);
    expect((JSON.parse(renderReport(r, "json", new Chalk({ level: 0 }))) as { drill: { ended: Record<string, unknown> } }).drill.ended).toMatchObject({ other_jobs: 2, other_job_ids: ["4", "5"] });
    // A state written before up recorded its ids: not known, said n/a with why (not dropped).
    const { pushedIds: _ids, ...older } = ended;
    const old = buildReport(inputs({ events, drill: drillWith({ ended: older }) }), NOW, 10 * MIN);
    expect(old.drill!.ended).toMatchObject({ other_jobs: null, other_job_ids: [], other_jobs_unknown: "up recorded no pushed ids: an older drill", packed_unknown: null });
    expect(endedText(old.drill!.ended!)).toBe("ended: ran — ran to its end (120 s); all 3 jobs packed; jobs decided during the run that up did not pack n/a (up recorded no pushed ids: an older drill)");
    // Another queue than the run's (report --queue): nothing of up's to tell apart, nothing said.
    const otherQueue = buildReport(inputs({ events, queue: "other", drill: drillWith({ ended: older, queue: "jobs" }) }), NOW, 10 * MIN);
    expect(otherQueue.drill!.ended).toMatchObject({ other_jobs: null, other_jobs_unknown: null });
    expect(endedText(otherQueue.drill!.ended!)).toBe("ended: ran — ran to its end (120 s); all 3 jobs packed");
  });

  // QA: a push whose reply was lost ran once Redis woke: "22 of 33 jobs not packed" beside 12 ids issued (12 + 22 = 34).
  it("a push that got no reply as the drill stopped is named among the jobs not packed; an older state without the count says nothing of it", () => {
    const ended = drillEnded({ interrupted: false, exitedEarly: [{ key: "redis", how: "did not answer a push", code: null, log: null, cause: "no_reply", lastLine: null }], pushed: Array.from({ length: 11 }, (_, i) => String(i + 1)), notPacked: 22, unansweredPushes: 1, skippedJobs: 0 }, NOW - 4 * MIN);
    expect(ended.unansweredPushes).toBe(1);
    const r = buildReport(inputs({ drill: drillWith({ ended }) }), NOW, 10 * MIN);
    expect(r.drill!.ended!.unanswered_pushes).toBe(1);
    expect(endedText(r.drill!.ended!)).toBe(
      "ended: stopped_early — redis did not answer a push 60 s into the drill; 22 of 33 jobs not packed (1 of them got no reply to its push: queued under the next id if Redis ran it)",
    );
    const two = buildReport(inputs({ drill: drillWith({ ended: { ...ended, unansweredPushes: 2, skippedJobs: 0 } }) }), NOW, 10 * MIN);
    expect(endedText(two.drill!.ended!)).toContain("; 22 of 33 jobs not packed (2 of them got no reply to their pushes: each queued under the next id if Redis ran it)");
    const { unansweredPushes: _, ...older } = ended;
    const old = buildReport(inputs({ drill: drillWith({ ended: older }) }), NOW, 10 * MIN);
    expect(old.drill!.ended!.unanswered_pushes).toBeNull();
    expect(endedText(old.drill!.ended!)).toMatch(/; 22 of 33 jobs not packed$/);
  });

  // QA: after `kill -9` of up the report still read "phase running", 26 s into a 20 s drill, with no word of it.
  // QA: a rollback interrupted after its drain left "phase rolling_back" and nothing else: no end, no word to finish it.
  it("a rollback that took the drill over and has not recorded: said unfinished, with the command, and the window ends at its start", () => {
    const takeover = new Date(NOW - 4 * MIN).toISOString();
    const r = buildReport(inputs({ drill: drillWith({ phase: "rolling_back", ended: null, rollbackStartedAt: takeover }) }), NOW, 10 * MIN);
    expect(r.drill!.ended).toMatchObject({ verdict: "rolling_back", at: takeover, after_ms: 60_000 });
    expect(endedText(r.drill!.ended!)).toBe(
      `ended: rolling_back — a rollback took the drill over before up recorded an end 60 s into the drill; what up packed n/a (read once the rollback finishes); a rollback started at ${takeover} has not finished (still running, or interrupted): \`drill rollback --name smoke\` again finishes it`,
    );
    expect(r.window.anchored).toBe("run_end");
    // up had recorded its end: its verdict stands, and the unfinished rollback is said after it.
    const ran = drillEnded({ interrupted: false, exitedEarly: [], pushed: ["1"], notPacked: 0, unansweredPushes: 0, skippedJobs: 0 }, NOW - 5 * MIN + 30_000);
    const after = buildReport(inputs({ drill: drillWith({ phase: "rolling_back", ended: ran, rollbackStartedAt: takeover }) }), NOW, 10 * MIN);
    expect(endedText(after.drill!.ended!)).toBe(`ended: ran — ran to its end (30 s); its one job packed; a rollback started at ${takeover} has not finished (still running, or interrupted): \`drill rollback --name smoke\` again finishes it`);
    // The command as the operator runs it on this state dir (QA: without --state-dir it went to /var/lib/drill);
    // and the deny-all it pulled is shown already (QA: none until the rollback finished).
    const flip: DecisionEvent = { id: `${NOW - 4 * MIN + 100}-0`, tsMs: NOW - 4 * MIN + 100, reason: "mode", job: "", figures: "mode=reject_all previous=admit psi=6.37", gate: "", attempt: null };
    const withCmd = buildReport(inputs({ events: [flip], drill: drillWith({ phase: "rolling_back", ended: null, rollbackStartedAt: takeover, rollbackCommand: "drill --state-dir /s rollback --name smoke" }) }), NOW, 10 * MIN);
    expect(endedText(withCmd.drill!.ended!)).toContain("`drill --state-dir /s rollback --name smoke` again finishes it");
    expect(withCmd.rollback_deny_all).toMatchObject({ mode: "reject_all", previous: "admit" });
    // Finished: nothing unfinished is said.
    const done = buildReport(inputs({ drill: drillWith({ phase: "complete", ended: ran, rollbackStartedAt: takeover, rollbackAt: takeover }) }), NOW, 10 * MIN);
    expect(endedText(done.drill!.ended!)).not.toContain("not finished");
  });

  it("up gone without an end recorded: said, in place of nothing", () => {
    const gone = buildReport(inputs({ drill: drillWith({ phase: "running", upGone: { pid: 4242 } }) }), NOW, 10 * MIN).drill!.ended!;
    expect(endedText(gone)).toBe(
      "ended: up_gone — drill up (pid 4242) is gone and recorded no end (killed, or the host rebooted): the packing stopped then; what it started may still run until a rollback; what up packed n/a (up died without recording it)",
    );
  });
});

describe("upDiedUnrecorded: the run's up, by pid and start time", () => {
  const roots = new HostRoots();
  const self = readProcessStat(roots, process.pid);
  const state = (over: Partial<DrillState>): DrillState =>
    ({ phase: "running", ended: undefined, owner: { pid: process.pid, startTime: self.ok ? self.value.startTime : null }, ...over }) as DrillState;

  it("alive: not gone; gone (another start time): gone; a run that ended or is stopped: never", () => {
    expect(self.ok).toBe(true);
    expect(upDiedUnrecorded(roots, state({}))).toBe(false);
    const dead = state({ owner: { pid: process.pid, startTime: 1 } });
    expect(upDiedUnrecorded(roots, dead)).toBe(true);
    expect(upDiedUnrecorded(roots, { ...dead, phase: "starting" })).toBe(true);
    expect(upDiedUnrecorded(roots, { ...dead, phase: "stopped" })).toBe(false);
    expect(upDiedUnrecorded(roots, { ...dead, phase: "complete" })).toBe(false);
    expect(upDiedUnrecorded(roots, { ...dead, ended: { verdict: "ran", at: "x", reason: null, pushed: 1, notPacked: 0, unansweredPushes: 0 } })).toBe(false);
    // No start time recorded: it cannot be told from a reused pid, so it is not called gone.
    expect(upDiedUnrecorded(roots, state({ owner: { pid: 999_999_999, startTime: null } }))).toBe(false);
  });
});

describe("readCgroupNow: the worker cgroup up recorded, read at gather time (fake v2 tree)", () => {
  const sys = mkdtempSync(path.join(tmpdir(), "drill-report-cg-"));
  const root = path.join(sys, "fs", "cgroup");
  const dir = path.join(root, "x", "infer");
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(root, "cgroup.controllers"), "memory\n");
  writeFileSync(path.join(dir, "memory.events"), "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n");
  const roots = new HostRoots("/proc", sys);
  const state = (over: Partial<DrillState> = {}): DrillState => ({
    version: 1, name: "smoke", runId: "r1", drillFile: "d.yaml", createdAt: new Date(NOW).toISOString(), phase: "stopped", queue: "jobs",
    redis: { url: "redis://127.0.0.1:1", embedded: null }, cgroup: { name: "infer", parent: "self", dirs: [dir] }, processes: [], fileDir: null,
    owner: { pid: 1, startTime: null }, ...over,
  });

  it("reads oom_kill from memory.events while the cgroup is there; nothing once it is gone or rolled back", () => {
    expect(readCgroupNow(roots, state(), NOW)).toEqual({ tsMs: NOW, file: path.join(dir, "memory.events"), oomKill: 2, reason: null });
    expect(readCgroupNow(roots, state({ phase: "complete" }), NOW)).toBeNull();
    // Rolled back, or gone: what rollback read before it removed the cgroup, if it did.
    const teardown = { tsMs: NOW - 1000, count: 3 };
    expect(readCgroupNow(roots, state({ phase: "complete", cgroup: { name: "infer", parent: "self", dirs: [dir], oomKillAtTeardown: teardown } }), NOW)).toEqual({
      tsMs: NOW - 1000, file: `${dir} (read by rollback before it removed the cgroup)`, oomKill: 3, reason: null,
    });
    expect(readCgroupNow(roots, state({ cgroup: { name: "gone", parent: "self", dirs: [path.join(root, "x", "gone")], oomKillAtTeardown: teardown } }), NOW)?.oomKill).toBe(3);
    expect(readCgroupNow(roots, state({ cgroup: { name: "gone", parent: "self", dirs: [path.join(root, "x", "gone")] } }), NOW)).toBeNull();
    expect(readCgroupNow(roots, state({ cgroup: null }), NOW)).toBeNull();
    rmSync(sys, { recursive: true, force: true });
  });
});

// QA: the md report could not tell the runbook's story: peaks only, no idle
// CPU, no slack, no swap-in, and no word that neighbours were already pressing.
describe("the pressure section tells the seed's contradiction", () => {
  const samples = [
    watchSample(NOW - 4 * MIN, { cg_psi_mem_some_rate: 2, cpu_idle_pct: 95, deadline_slack_ms: 6409, si: 0 }),
    watchSample(NOW - 3 * MIN, { cg_psi_mem_some_rate: 26.33, cpu_idle_pct: 50, queue_age_ms: 180, deadline_slack_ms: -230, si: 12 }),
    watchSample(NOW - 2 * MIN, { cg_psi_mem_some_rate: 11, cpu_idle_pct: 60, deadline_slack_ms: 418, si: 3 }),
  ];
  const at = (ms: number) => new Date(ms).toISOString();

  it("the lowest slack, the peak swap-in, and idle CPU and queue age at the worst stall: json and text", () => {
    const r = buildReport(inputs({ recording: { file: "w", samples, badLines: 0 } }), NOW, 10 * MIN);
    expect(r.pressure.lowest_deadline_slack_ms).toEqual({ value: -230, ts: at(NOW - 3 * MIN) });
    expect(r.pressure.peak_si).toEqual({ value: 12, ts: at(NOW - 3 * MIN) });
    expect(r.pressure.at_worst_stall).toEqual({ ts: at(NOW - 3 * MIN), stall_rate_pct: 26.33, source: "worker cgroup", cpu_idle_pct: 50, queue_age_ms: 180, deadline_slack_ms: -230 });
    const text = renderReport(r, "text", new Chalk({ level: 0 }));
    // Both wrap within their columns: the label within the signal column, the worst stall within the peak column.
    const pressure = ["signal", "peak", "at"];
    expect(textRow(text, "deadline_slack_ms (lowest, admitted jobs awaiting a first token)", pressure)?.cells).toEqual(["deadline_slack_ms (lowest, admitted jobs awaiting a first token)", "-230 ms", at(NOW - 3 * MIN)]);
    expect(textRow(text, "at the worst stall", pressure)?.cells).toEqual(["at the worst stall", "stall 26.33% (worker cgroup) with cpu idle 50.0%, queue age 180 ms, slack -230 ms", at(NOW - 3 * MIN)]);
    // Paste-able (QA: every Pressure row padded to 175 columns, the stall_ms sentence 377): tables, explanations and the
    // formula keep to 80 columns; only the one-line facts under the title and the notes (a line each, for grep) are longer.
    const body = text.slice(text.indexOf("\n\n"));
    const long = body.split("\n").filter((line) => line.length > 80);
    const section = (title: string) => text.slice(text.indexOf(`\n${title}\n`) + 1).split("\n\n")[0] ?? "";
    expect(long.filter((line) => !line.startsWith("  - ")), long.join("\n")).toEqual([]);
    expect(section("cost_proxy").split("\n").filter((line) => line.startsWith("  stall_ms = ")).length).toBe(1);
    expect(text).toMatch(/^ {2}si \(swap-in, pages\/s\) {2,}12\.0 {2,}\S+$/m);
    expect(text).toMatch(/^ {2}si \(swap-in, pages\/s\)\s{1,40}12\.0/m);
  });

  // QA: a worker cgroup at 0 % all along pointed the row at the first sample while the host stalled 26 %.
  it("the host's stall when it is the larger", () => {
    const hostOnly = [watchSample(NOW - 4 * MIN, { cg_psi_mem_some_rate: 0, psi_mem_some_rate: 1 }), watchSample(NOW - 3 * MIN, { cg_psi_mem_some_rate: 0, psi_mem_some_rate: 26.04, cpu_idle_pct: 34 })];
    const r = buildReport(inputs({ recording: { file: "w", samples: hostOnly, badLines: 0 } }), NOW, 10 * MIN);
    expect(r.pressure.at_worst_stall).toMatchObject({ ts: at(NOW - 3 * MIN), stall_rate_pct: 26.04, source: "host", cpu_idle_pct: 34 });
  });

  it("admission opened on a host already at PSI >= 1.00: a note says neighbours are in the figures", () => {
    const mode = (psi: string): DecisionEvent => ({ id: `${NOW - 5 * MIN}-0`, tsMs: NOW - 5 * MIN, reason: "mode", job: "", figures: `mode=admit previous=unset psi=${psi}`, gate: "", attempt: null });
    const noisy = buildReport(inputs({ events: [mode("7.39")] }), NOW, 10 * MIN);
    expect(noisy.notes.join("\n")).toContain(`admission opened at ${at(NOW - 5 * MIN)} with host PSI avg10 already 7.39 (>= 1.00): neighbours' pressure is in these figures`);
    expect(buildReport(inputs({ events: [mode("0.12")] }), NOW, 10 * MIN).notes.join("\n")).not.toMatch(/neighbours/);
  });
});

// QA: "late 12" beside "admitted in window 10" read as 12 of 10 admitted in an incident note.
const admitAt = (job: string, tsMs: number): DecisionEvent => ({ id: `${tsMs}-0`, reason: "admit", job, figures: "packed=1000 limit=32000", tsMs, gate: "g1", attempt: 0 });
/** A job enqueued at `enqTs`, its first token `firstMs` later (deadline 4 s), finished at `doneTs`. */
const finished = (id: string, enqTs: number, firstMs: number, doneTs: number): DoneEntry => ({
  id, firstTokenMs: firstMs, deadlineMs: 4000, late: firstMs > 4000, tokensOut: 16, promptTokens: 1000, completionTokens: 16, attempt: 0,
  enqueueTs: enqTs, firstTokenTs: enqTs + firstMs, doneTs,
});

describe("report --since: late jobs are counted over the jobs judged, never over the jobs admitted in the window", () => {
  // Six jobs admitted at once 25 s ago, run one after another: the last three finish (late) in an 11 s window.
  const enq = NOW - 25_000;
  const events = ["1", "2", "3", "4", "5", "6"].map((id, i) => admitAt(id, enq + 100 + i));
  const done = [finished("1", enq, 1300, enq + 5000), finished("2", enq, 5000, enq + 9000), finished("3", enq, 9000, enq + 13_000), finished("4", enq, 12_500, enq + 16_500), finished("5", enq, 16_300, enq + 20_300), finished("6", enq, 20_000, enq + 24_000)];
  // One more admitted in the window, not finished, its deadline past: judged late too.
  const late = admitAt("7", NOW - 10_000);
  const r = buildReport(inputs({ drill: null, events: [...events, late], done, unfinished: [{ id: "7", role: "admitted", enqueueTs: NOW - 10_000, deadlineMs: 4000, firstTokenTs: null }], firstTokens: {} }), NOW, 11_000, { sinceGiven: true });
  const ft = r.first_token!;

  it("admitted, finished (and how many of them were admitted earlier), judged, late ≤ judged", () => {
    expect(ft).toMatchObject({ admitted: 1, finished: 3, finished_admitted_earlier: 3, judged: 4, late: 4, late_finished: 3, late_unfinished: 1 });
    expect(ft.late).toBeLessThanOrEqual(ft.judged);
    expect(ft.late).toBeGreaterThan(ft.admitted!);
  });

  it("text and md say what each figure counts, and late against judged; json carries the same words", () => {
    for (const format of ["text", "md"] as const) {
      const out = renderReport(r, format, new Chalk({ level: 0 }));
      expect(out).toMatch(/finished in window\W+3 \(3 of them admitted before the window\)/);
      expect(flat(out)).toMatch(/late jobs\W+4 of 4 judged \(3 finished late: job=4 job=5 job=6; 1 admitted and without a first token at their deadline: job=7\)/);
      expect(out.replace(/\s+/g, " ")).toContain(`admitted = ${FIRST_TOKEN_COUNTED.admitted}`);
      expect(out.replace(/\s+/g, " ")).toContain(`late = ${FIRST_TOKEN_COUNTED.late}`);
    }
    const json = JSON.parse(renderReport(r, "json", new Chalk({ level: 0 }))) as { first_token: Record<string, unknown> };
    expect(json.first_token).toMatchObject({ finished_admitted_earlier: 3, judged: 4, counted: FIRST_TOKEN_COUNTED });
  });

  it("an unreadable stream: how many finished jobs were admitted earlier is not known (null), not 0", () => {
    const blind = buildReport(inputs({ drill: null, events: null, done, unfinished: [], firstTokens: {} }), NOW, 11_000, { sinceGiven: true });
    expect(blind.first_token).toMatchObject({ admitted: null, finished: 3, finished_admitted_earlier: null, judged: 3 });
  });
});
