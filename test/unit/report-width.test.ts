import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import type { DecisionEvent, DoneEntry, ReportInputs } from "../../src/report/inputs.js";
import { renderMarkdown, renderText, wrapWords } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat, textRow } from "../helpers/reportText.js";
import { watchSample } from "../helpers/watchSample.js";

/**
 * The text report fits 80 columns (a terminal, an incident note): long values
 * wrap with a hanging indent at their column, long labels wrap within theirs,
 * and in every table each row's figure starts in the same column.
 */

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const MIN = 60_000;
const plain = new Chalk({ level: 0 });

const admit = (job: string, ts: number): DecisionEvent => ({ id: `${ts}-0`, reason: "admit", job, figures: "packed=1000 limit=32000", tsMs: ts, gate: "g", attempt: 0 });
const reject = (job: string, ts: number): DecisionEvent => ({ id: `${ts}-1`, reason: "reject_deadline_slack", job, figures: "slack_ms=420 route=retry", tsMs: ts, gate: "g", attempt: 0 });
// 20 jobs finished late (first token at 9 s against a 2 s deadline), one on time with an 8 s deadline: mixed deadlines.
const done = (id: string, deadlineMs: number, firstTokenMs: number): DoneEntry => {
  const enqueueTs = NOW - 5 * MIN + Number(id);
  return { id, firstTokenMs, deadlineMs, late: firstTokenMs > deadlineMs, tokensOut: 8, promptTokens: 1000, completionTokens: 8, attempt: 0, enqueueTs, firstTokenTs: enqueueTs + firstTokenMs, doneTs: enqueueTs + firstTokenMs + 100 };
};
const ids = Array.from({ length: 22 }, (_, i) => String(100_000 + i));

function longReport(): string {
  const inputs: ReportInputs = reportInputs({
    drill: { name: "wide", rollbackCommand: "drill rollback --name wide", runId: "r1", drillFile: "drills/wide.yaml", createdAt: new Date(NOW - 8 * MIN).toISOString(), phase: "stopped" },
    events: [...ids.map((id, i) => admit(id, NOW - 5 * MIN + i)), reject("9", NOW - MIN)],
    done: ids.map((id, i) => done(id, i === 0 ? 8000 : 2000, i === 0 ? 900 : 9000)),
    stats: { retry_count: "3", tokens_out: "478", jobs_done: "22", worker_recovered: "1" },
    drainLen: 5,
    recording: { file: "/s/wide/watch.out", samples: [watchSample(NOW - 4 * MIN, { deadline_slack_ms: -230 }), watchSample(NOW - MIN, {})], badLines: 0 },
    recordingLooked: "/s/wide/watch.out",
  });
  return renderText(buildReport(inputs, NOW, 10 * MIN), plain);
}

const FIRST_TOKEN = ["admitted in window", "finished in window", "with a first token", "first token p50", "first token p99", "first token max", "deadline", "p99 against deadline", "late jobs"];
const PRESSURE = [
  "psi_mem_some_avg10 (host)",
  "psi_mem_some_rate (host)",
  "cg_psi_mem_some_avg10 (worker cgroup)",
  "cg_psi_mem_some_rate (worker cgroup)",
  "stall_ms_p99",
  "cgroup memory.peak",
  "cgroup memory.current",
  "deadline_slack_ms (lowest, admitted jobs awaiting a first token)",
  "si (swap-in, pages/s)",
  "at the worst stall",
  "OOM kills",
  "alarms",
];
const RETRIES = [
  "retry_count (stats, whole drill: retried jobs the worker finished)",
  "nacked to a retry host class in window (gate rejects sent to jobs:retry:<class>)",
  "finished after a retry in window (attempt > 0)",
  "tokens_out (stats: every token decoded, whole drill)",
  "tokens_out over the finished records (whole drill)",
  "decoded by runs not finished (given back: worker_recovered 1; or still running)",
  "jobs_done (stats)",
  "jobs_late (stats: finished late, whole drill)",
];
const DRAIN = ["LLEN jobs", "LINDEX jobs 0", "LLEN jobs_drain", "rejects in window", "finished per hour while jobs ran (first admit → last finish, 1 min 49 s, of a 7 min window)", "jobs + jobs_drain at that pace"];

const section = (text: string, title: string) => text.slice(text.indexOf(`\n${title}\n`) + 1).split("\n\n")[0]!;

describe("the text report fits 80 columns", () => {
  const text = longReport();

  it("every line of the tables and paragraphs, the formula too; only the facts under the title, the reject lines and the notes (a line each, for grep) run on", () => {
    const body = text.slice(text.indexOf("\n\n"), text.indexOf("\nNotes\n"));
    const rejects = section(text, "First and last reject").split("\n").slice(2);
    expect(rejects.length).toBeGreaterThan(0);
    expect(body.split("\n").filter((l) => l.length > 80 && !rejects.includes(l))).toEqual([]);
    expect(flat(section(text, "cost_proxy"))).toContain("cost_proxy = prompt_tokens + completion_tokens + retry_count * prompt_tokens + stall_ms * workers_held / 1000");
  });

  it.each([
    ["First token of admitted jobs", FIRST_TOKEN, "value"],
    ["Pressure (sidecar recording)", PRESSURE, "peak"],
    ["Retries and totals", RETRIES, "value"],
    ["Drain math check", DRAIN, "value"],
  ])("%s: every row's figure starts in the header's figure column, its long label wrapped within the label column", (title, labels, figure) => {
    const table = section(text, title);
    const header = table.split("\n").find((l) => l.includes(`  ${figure}`))!;
    const rows = labels.map((label) => textRow(table, label));
    expect(rows.map((row) => row?.label)).toEqual(labels);
    expect(rows.map((row) => row?.column)).toEqual(labels.map(() => header.indexOf(figure)));
  });

  it("a long value wraps with a hanging indent at the figure column: the mixed-deadline verdict, the 20 late ids (between ids)", () => {
    const table = section(text, "First token of admitted jobs");
    const verdict = "over the smallest deadline (2000 ms) by 7000 ms; each job's first token against its own deadline: p99 over by 7000 ms";
    expect(verdict.length).toBeGreaterThan(90);
    expect(textRow(table, "p99 against deadline")?.value).toBe(verdict);
    const late = ids.slice(1, 21).map((id) => `job=${id}`).join(" ");
    expect(textRow(table, "late jobs")?.value).toBe(`21 of 22 judged (21 finished late: ${late} … 1 more; unfinished jobs not read)`);
    const column = textRow(table, "late jobs")!.column;
    const lines = table.split("\n");
    const from = lines.findIndex((l) => l.startsWith("  late jobs"));
    expect(lines.length - from).toBeGreaterThan(2);
    for (const line of lines.slice(from + 1)) {
      expect(line.slice(0, column).trim()).toBe("");
      expect(line.slice(column)).toMatch(/^(job=\d+|…|\d|unfinished|jobs)/);
    }
  });

  it("markdown keeps each row one line, labels and values whole", () => {
    const md = renderMarkdown(buildReport(reportInputs({ stats: { worker_recovered: "1" } }), NOW, 10 * MIN));
    expect(md).toContain("| nacked to a retry host class in window (gate rejects sent to jobs:retry:\\<class>) | 0 |");
  });
});

describe("wrapWords", () => {
  it("breaks at spaces: between ids, after a comma, never inside a word", () => {
    expect(wrapWords("job=1001 job=1002 job=1003", 18)).toEqual(["job=1001 job=1002", "job=1003"]);
    expect(wrapWords("job=1 (jobs + jobs_drain), job=2 (jobs)", 28)).toEqual(["job=1 (jobs + jobs_drain),", "job=2 (jobs)"]);
  });
  it("a word longer than the room stays whole, on a line of its own", () => {
    expect(wrapWords(`at ${"x".repeat(30)} then`, 10)).toEqual(["at", "x".repeat(30), "then"]);
    expect(wrapWords("", 10)).toEqual([""]);
  });
});
