import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import { eventFromEntry, parseRecording, parseSampleLine } from "../../src/report/inputs.js";
import { renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";

/** QA (report and recordings): what a recording line and an events entry must be to count. */

const NOW = Date.parse("2026-12-05T12:00:00.000Z");

describe("parseSampleLine: an ISO-8601 `ts`, and at least one sample field", () => {
  const sample = (ts: unknown) => JSON.stringify({ ts, psi_mem_some_avg10: 1.5, missing: [] });

  it.each(["12", "hello 1", "1", "2026", "2026-12-05", "Sat Dec 05 2026 11:00:00 GMT", "2026-02-31T00:00:00Z", "2026-13-01T00:00:00Z", "2026-12-05T25:00:00Z", "2026-12-05T11:00:00"])(
    "`ts` %j, which Date.parse may take, is not a sample's",
    (ts) => {
      expect(parseSampleLine(sample(ts))).toBeNull();
    },
  );

  it.each([
    ["2026-12-05T11:00:00.000Z", Date.parse("2026-12-05T11:00:00.000Z")],
    ["2026-12-05T11:00:00Z", Date.parse("2026-12-05T11:00:00.000Z")],
    ["2026-12-05T12:00:00.123+01:00", Date.parse("2026-12-05T11:00:00.123Z")],
    ["2026-02-28T23:59:59.999Z", Date.parse("2026-02-28T23:59:59.999Z")],
  ])("`ts` %j is read", (ts, ms) => {
    expect(parseSampleLine(sample(ts))?.tsMs).toBe(ms);
  });

  it("a sample whose every signal is null (none could be read) is still a sample", () => {
    const line = JSON.stringify({ ts: "2026-12-05T11:00:00.000Z", psi_mem_some_avg10: null, cg_mem_current: null, missing: [{ field: "psi_mem_some_avg10", reason: "unreadable" }] });
    expect(parseSampleLine(line)).not.toBeNull();
  });

  it("a `drill --json gate` line (a ts, no sample field) is not a sample: skipped with the note, not counted as a sample of nulls", () => {
    const gateLines = [
      { ts: "2026-12-05T11:55:00.000Z", event: "decision", decision: "admit", job: "1", packed: 24000, limit: 32000, line: "admit job=1 packed=24000 limit=32000" },
      { ts: "2026-12-05T11:55:01.000Z", event: "decision", decision: "reject_host_pressure", job: "2", psi: 12.4, line: "reject_host_pressure job=2 psi=12.40" },
    ].map((o) => JSON.stringify(o));
    const watchLine = JSON.stringify({ ts: "2026-12-05T11:55:02.000Z", psi_mem_some_avg10: 2, missing: [] });
    const recording = parseRecording("gate.jsonl", [...gateLines, watchLine].join("\n"));
    expect(recording.samples).toHaveLength(1);
    expect(recording.badLines).toBe(2);
    const report = buildReport(reportInputs({ recording }), NOW, 10 * 60_000);
    expect(report.pressure.samples).toBe(1);
    expect(report.notes.join("\n")).toContain("2 line(s) of gate.jsonl were not samples: skipped");
  });
});

describe("a jobs:events entry with no reason", () => {
  it("is not a blank row under Decisions: counted apart, in a note", () => {
    const at = NOW - 60_000;
    const events = [
      eventFromEntry(`${at}-0`, ["reason", "admit", "job", "1", "figures", "packed=1 limit=32000", "ts", String(at)]),
      eventFromEntry(`${at}-1`, ["job", "2", "ts", String(at)]),
      eventFromEntry(`${at}-2`, ["reason", "", "job", "3", "ts", String(at)]),
    ];
    const report = buildReport(reportInputs({ events }), NOW, 10 * 60_000);
    expect(report.decisions?.rows.map((r) => r.reason)).not.toContain("");
    expect(report.decisions?.rows.find((r) => r.reason === "admit")?.count).toBe(1);
    expect(report.decisions?.total).toBe(1);
    expect(report.notes).toContain("2 jobs:events entries carry no reason: not counted under Decisions");
    const text = renderText(report, new Chalk({ level: 0 }));
    const decisions = text.slice(text.indexOf("Decisions"), text.indexOf("\n\n", text.indexOf("Decisions")));
    expect(decisions.split("\n").filter((l) => /^\s+\d/.test(l))).toEqual([]);
  });
});
