import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { decisionFigures, formatDecisionLine, type AdmissionDecision } from "../../src/gate/policy.js";
import {
  formatRejectEvent,
  initialRejectFeed,
  joinRejectBatches,
  nextRejectFeed,
  NO_NEW_EVENTS,
  NO_REJECTS,
  parseRejectEvents,
  REJECT_LINES_PER_SAMPLE,
  rejectBatchLines,
  rejectTotal,
  type RejectEventsRaw,
} from "../../src/sampler/rejects.js";
import { LiveView } from "../../src/sampler/render.js";
import type { Sample } from "../../src/sampler/step.js";

const b = (text: string) => Buffer.from(text);

describe("formatRejectEvent: the gate's own line from its <q>:events entry", () => {
  const decisions: AdmissionDecision[] = [
    { kind: "reject_packed_tokens", packed: 36012, limit: 32000 },
    { kind: "reject_host_pressure", psi: 12.4, trigger: "psi_avg10", figure: null },
    { kind: "reject_host_pressure", psi: "missing", trigger: "psi_missing", figure: null },
    { kind: "reject_host_pressure", psi: 0.4, trigger: "reject_all", figure: null },
    { kind: "reject_host_pressure", psi: 3, trigger: "cg_stall_rate", figure: 23.456 },
    { kind: "reject_deadline_slack", slackMs: 420.4, limitMs: 1500, stallMsP99: null },
    { kind: "reject_deadline_slack", slackMs: 1600, limitMs: 1500, stallMsP99: 1400 },
  ];
  // What src/queue/queue.ts reject() XADDs, beside what src/gate/loop.ts prints.
  const cases = decisions.flatMap((decision) =>
    [0, 2].flatMap((attempt) => (["retry", "dead"] as const).map((route) => ({ decision, attempt, route }))),
  );
  it.each(cases)("$decision.kind $decision.trigger attempt=$attempt route=$route", ({ decision, attempt, route }) => {
    const job = { id: "7", attempt };
    const gateLine = `${formatDecisionLine(decision, job)} route=${route}`;
    const fields = { reason: decision.kind, job: "7", figures: `${decisionFigures(decision)} route=${route}`, ts: "1764480000000", gate: "g1", attempt: String(attempt) };
    expect(formatRejectEvent(fields)).toBe(gateLine);
  });

  it("DESIGN.md's examples, begun exactly as there, the route the reject took after them", () => {
    expect(formatRejectEvent({ reason: "reject_packed_tokens", job: "7", figures: "packed=36012 limit=32000 route=retry", attempt: "0" })).toBe("reject_packed_tokens job=7 packed=36012 limit=32000 route=retry");
    expect(formatRejectEvent({ reason: "reject_host_pressure", job: "8", figures: "psi=12.40 route=retry", attempt: "0" })).toBe("reject_host_pressure job=8 psi=12.40 route=retry");
    expect(formatRejectEvent({ reason: "reject_deadline_slack", job: "9", figures: "slack_ms=420 route=dead", attempt: "0" })).toBe("reject_deadline_slack job=9 slack_ms=420 route=dead");
  });

  // The entry's figures end with the lever's note (mode_value=/mode_type=, what the gate stored); the gate's line has the attempt before it.
  it.each([
    ["psi=0.40 mode=reject_all mode_value=banana", "2", "reject_host_pressure job=7 psi=0.40 mode=reject_all attempt=2 mode_value=banana route=dead"],
    ['psi=0.40 mode=reject_all mode_value="reject all"', "1", 'reject_host_pressure job=7 psi=0.40 mode=reject_all attempt=1 mode_value="reject all" route=dead'],
    ["psi=0.40 mode=reject_all mode_type=hash", "3", "reject_host_pressure job=7 psi=0.40 mode=reject_all attempt=3 mode_type=hash route=dead"],
    ["psi=0.40 mode=reject_all mode_type=hash", "0", "reject_host_pressure job=7 psi=0.40 mode=reject_all mode_type=hash route=dead"],
  ])("a lever that is not a mode (%s, attempt %s): the attempt before its note, as the gate's line", (figures, attempt, line) => {
    expect(formatRejectEvent({ reason: "reject_host_pressure", job: "7", figures: `${figures} route=dead`, attempt })).toBe(line);
  });

  it("an entry missing fields says so with '-' rather than inventing them", () => {
    expect(formatRejectEvent({ reason: "reject_host_pressure" })).toBe("reject_host_pressure job=-");
    expect(formatRejectEvent({ reason: "reject_host_pressure", job: "", figures: "psi=12.40", attempt: "x" })).toBe("reject_host_pressure job=- psi=12.40");
  });
});

describe("parseRejectEvents", () => {
  it("entries' fields → lines, in order", () => {
    const entry = (id: string) => ["reason", "reject_host_pressure", "job", id, "figures", "psi=12.40 route=retry", "ts", "1", "gate", "g", "attempt", "0"].map(b);
    expect(parseRejectEvents(b("9-0"), [entry("1"), entry("2")], 3)).toEqual({ tip: b("9-0"), lines: ["reject_host_pressure job=1 psi=12.40 route=retry", "reject_host_pressure job=2 psi=12.40 route=retry"], beyond: 3 });
  });
  it("nothing after the cursor (no tip): the shared NO_NEW_EVENTS", () => {
    expect(parseRejectEvents(null, [], 0)).toBe(NO_NEW_EVENTS);
  });
  it.each([
    ["tip not a string", [5, [], 0]],
    ["entries without a tip", [null, [["reason", "reject_x"].map(b)], 0]],
    ["a count without a tip", [null, [], 2]],
    ["entries not a list", [b("1-0"), null, 0]],
    ["entry not strings", [b("1-0"), [["reason"]], 0]],
    ["odd fields", [b("1-0"), [[b("reason"), b("x"), b("job")]], 0]],
    ["count not an integer", [b("1-0"), [], 1.5]],
  ])("%s: null (a failed reading)", (_name, [tip, entries, beyond]) => {
    expect(parseRejectEvents(tip, entries, beyond)).toBeNull();
  });
});

describe("nextRejectFeed", () => {
  const raw = (tip: string | null, lines: string[] = [], beyond = 0): RejectEventsRaw => ({ tip: tip === null ? null : b(tip), lines, beyond });
  const stats = (n: number) => ({ admitted: "40", reject_host_pressure: String(n), tokens_out: "9" });

  it("the first reading only marks where the feed starts: what is there already is history", () => {
    const { feed, batch } = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12));
    expect(feed).toEqual({ cursor: "5-0", rejectTotal: 12 });
    expect(batch).toBe(NO_REJECTS);
  });

  it("nothing new: the same feed and no batch", () => {
    const start = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12)).feed;
    const next = nextRejectFeed(start, NO_NEW_EVENTS, stats(12));
    expect(next.feed).toBe(start);
    expect(next.batch).toBe(NO_REJECTS);
    // Not started and nothing read: still not started.
    expect(nextRejectFeed(initialRejectFeed, NO_NEW_EVENTS, stats(12)).feed).toBe(initialRejectFeed);
  });

  it("new entries, only admits among them: the cursor moves on, no lines", () => {
    const start = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12)).feed;
    const next = nextRejectFeed(start, raw("8-0"), stats(12));
    expect(next.feed).toEqual({ cursor: "8-0", rejectTotal: 12 });
    expect(next.batch).toBe(NO_REJECTS);
  });

  it("new rejects: their lines; capped ones counted in more", () => {
    const start = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12)).feed;
    const lines = ["reject_host_pressure job=1 psi=12.40", "reject_host_pressure job=2 psi=12.40"];
    expect(nextRejectFeed(start, raw("8-0", lines), stats(14)).batch).toEqual({ lines, more: 0 });
    expect(nextRejectFeed(start, raw("8-0", lines, 5), stats(19)).batch).toEqual({ lines, more: 5 });
  });

  it("past the scan cap: the stats counters count the rejects the script did not reach", () => {
    const start = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12)).feed;
    const next = nextRejectFeed(start, raw("2000-0", ["reject_host_pressure job=1 psi=12.40"]), stats(512));
    expect(next.batch).toEqual({ lines: ["reject_host_pressure job=1 psi=12.40"], more: 499 });
    expect(next.feed).toEqual({ cursor: "2000-0", rejectTotal: 512 });
  });

  it("counters reset (stats key gone): counted from 0, never negative", () => {
    const start = nextRejectFeed(initialRejectFeed, raw("5-0"), stats(12)).feed;
    expect(nextRejectFeed(start, raw("8-0", ["reject_host_pressure job=1 psi=12.40"]), stats(1)).batch.more).toBe(0);
    expect(nextRejectFeed(start, raw("8-0", ["a", "b"]), {}).batch).toEqual({ lines: ["a", "b"], more: 0 });
  });

  it("rejectTotal: the reject_* counters that are counts", () => {
    expect(rejectTotal({ reject_host_pressure: "3", reject_packed_tokens: "4", reject_x: "nope", admitted: "9" })).toBe(7);
    expect(rejectTotal({})).toBe(0);
  });
});

describe("reject batches", () => {
  it("join keeps the line cap; the overflow goes to more", () => {
    const many = Array.from({ length: REJECT_LINES_PER_SAMPLE - 1 }, (_, i) => `r${i}`);
    expect(joinRejectBatches(NO_REJECTS, { lines: ["a"], more: 1 })).toEqual({ lines: ["a"], more: 1 });
    expect(joinRejectBatches({ lines: ["a"], more: 0 }, NO_REJECTS)).toEqual({ lines: ["a"], more: 0 });
    const joined = joinRejectBatches({ lines: many, more: 2 }, { lines: ["x", "y", "z"], more: 1 });
    expect(joined.lines).toHaveLength(REJECT_LINES_PER_SAMPLE);
    expect(joined.lines.at(-1)).toBe("x");
    expect(joined.more).toBe(2 + 1 + 2);
  });

  it("lines to print: each line, then (N more rejects) when capped", () => {
    expect(rejectBatchLines(NO_REJECTS)).toEqual([]);
    expect(rejectBatchLines({ lines: ["a"], more: 0 })).toEqual(["a"]);
    expect(rejectBatchLines({ lines: ["a"], more: 412 })).toEqual(["a", "(412 more rejects)"]);
  });
});

describe("the live view's reject lines", () => {
  const sample: Sample = {
    ts: "2025-11-30T04:12:00.000Z", queue_len: 3, queue_age_ms: 180, queue_head_slack_ms: 7000, deadline_slack_ms: 6000,
    psi_mem_some_avg10: 12.4, psi_mem_full_avg10: 4, psi_mem_some_total_us: 5000, psi_mem_some_rate: 1, cg_psi_mem_some_avg10: 1,
    cg_psi_mem_some_rate: 1, si: 0, so: 0, cg_swap_current: 0, refault_rate: 0, cg_mem_current: 1024, cg_mem_max: 2048, cg_mem_peak: 1024,
    cg_oom_kill: 0, cpu_idle_pct: 50, cpu_iowait_pct: 0, tokens_out: 1, retry_count: 0, admitted: 1, rejected: { reject_host_pressure: 5 },
    gate_mode: "admit", stall_ms_p99: 10, alarm: [], missing: [],
  };
  const view = () => new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
  const frameOf = (out: string) => out.replace(/\x1b\[\d+F\x1b\[J/, "").trimEnd().split("\n"); // eslint-disable-line no-control-regex

  it("none yet: no row", () => {
    expect(frameOf(view().redraw(sample, [])).join("\n")).not.toMatch(/^rejects/m);
  });

  it("the last three, under the gate's counters, in the gate's words; kept until newer ones come", () => {
    const v = view();
    const lines = ["1", "2", "3", "4"].map((id) => `reject_host_pressure job=${id} psi=12.40`);
    let frame = frameOf(v.redraw(sample, [], undefined, { lines, more: 0 }));
    const at = frame.findIndex((l) => l.startsWith("rejects"));
    expect(frame[at - 1]).toMatch(/^gate /);
    expect(frame.slice(at, at + 3)).toEqual(["rejects  reject_host_pressure job=2 psi=12.40", "         reject_host_pressure job=3 psi=12.40", "         reject_host_pressure job=4 psi=12.40"]);
    expect(frame[at + 3]).toMatch(/^alarms/);
    frame = frameOf(v.redraw(sample, []));
    expect(frame.filter((l) => l.includes("reject_host_pressure job="))).toHaveLength(3);
    frame = frameOf(v.redraw(sample, [], undefined, { lines: ["reject_packed_tokens job=5 packed=48000 limit=32000"], more: 7 }));
    const rows = frame.slice(frame.findIndex((l) => l.startsWith("rejects")));
    expect(rows.slice(0, 4)).toEqual([
      "rejects  reject_host_pressure job=3 psi=12.40",
      "         reject_host_pressure job=4 psi=12.40",
      "         reject_packed_tokens job=5 packed=48000 limit=32000",
      "         (7 more rejects)",
    ]);
  });

  it("a line longer than the view goes on under itself, whole, within 80 columns", () => {
    const long = "reject_host_pressure job=123456789 psi=12.40 cg_stall_rate=23.45 attempt=2 route=dead extra=somethingquitelong";
    const frame = frameOf(view().redraw(sample, [], undefined, { lines: [long], more: 0 }));
    for (const line of frame) expect([...line].length, line).toBeLessThanOrEqual(80);
    const at = frame.findIndex((l) => l.startsWith("rejects"));
    expect(frame[at + 1]).toMatch(/^ {11}\S/);
    expect(`${frame[at]} ${frame[at + 1]!.trim()}`.replace(/^rejects\s+/, "")).toBe(long);
    expect(frame.join("\n")).not.toContain("…");
  });

  it("a small terminal drops the reject lines before the gate's counters", () => {
    const v = view();
    v.redraw(sample, [], undefined, { lines: ["1", "2", "3"].map((id) => `reject_host_pressure job=${id} psi=12.40`), more: 0 });
    // Kept while the job counters go (12 rows); gone before the gate's counters (9 rows).
    expect(v.layout(sample, { columns: 60, rows: 12 }).join("\n")).toMatch(/^rejects/m);
    const lines = v.layout(sample, { columns: 60, rows: 9 });
    expect(lines.length).toBeLessThan(9);
    expect(lines.join("\n")).toMatch(/^gate /m);
    expect(lines.join("\n")).not.toMatch(/^rejects/m);
  });
});
