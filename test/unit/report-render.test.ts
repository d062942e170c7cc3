import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { resolveFormat } from "../../src/commands/report.js";
import { queueKeys } from "../../src/queue/keys.js";
import { buildReport, codeSpan, LAB_LABEL } from "../../src/report/build.js";
import { exportTimeMs, parseExport } from "../../src/report/exportFile.js";
import type { ReportInputs } from "../../src/report/inputs.js";
import { COST_ROWS_SHOWN, mdText, renderJson, renderMarkdown, renderText, textColumns, type ReportDocument } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { textRow } from "../helpers/reportText.js";

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const plain = new Chalk({ level: 0 });

function inputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return reportInputs({
    drill: { name: "smoke", rollbackCommand: "drill rollback --name smoke", runId: "r1", drillFile: "drills/smoke.yaml", createdAt: null, phase: "running" },
    events: [
      { id: `${NOW - 5000}-0`, reason: "admit", job: "1", figures: "packed=24000 limit=32000", tsMs: NOW - 5000, gate: "g", attempt: 0 },
      { id: `${NOW - 4000}-0`, reason: "reject_packed_tokens", job: "7", figures: "packed=36012 limit=32000 route=retry", tsMs: NOW - 4000, gate: "g", attempt: 0 },
      { id: `${NOW - 3000}-0`, reason: "reject_host_pressure", job: "8", figures: "psi=12.40 route=retry", tsMs: NOW - 3000, gate: "g", attempt: 0 },
      { id: `${NOW - 2000}-0`, reason: "reject_deadline_slack", job: "9", figures: "slack_ms=420 route=retry", tsMs: NOW - 2000, gate: "g", attempt: 0 },
    ],
    stats: { retry_count: "3" },
    drainLen: 5,
    recordingLooked: "/s/smoke/watch.jsonl",
    ...over,
  });
}

const report = (over: Partial<ReportInputs> = {}) => buildReport(inputs(over), NOW, 600_000);

describe("markdown", () => {
  const md = renderMarkdown(report());
  it("pastes cleanly: no ANSI, GitHub tables with a separator row", () => {
    expect(md).not.toContain("\u001b[");
    expect(md).toContain("| reason | count | share | note |\n|---|---:|---:|---|");
    expect(md).toContain("| reject_packed_tokens | 1 | 25.0% |  |");
    // every table row has the same number of cells as its header
    const tables = md.split("\n\n").filter((block) => block.startsWith("| "));
    for (const table of tables) {
      const widths = table.split("\n").map((row) => row.replace(/\\\|/g, "").split("|").length);
      expect(new Set(widths).size).toBe(1);
    }
  });
  it("first and last reject lines in the seed format, as code", () => {
    expect(md).toContain("| first | 2025-11-30T11:59:56.000Z | `reject_packed_tokens job=7 packed=36012 limit=32000 route=retry` |");
    expect(md).toContain("| last | 2025-11-30T11:59:58.000Z | `reject_deadline_slack job=9 slack_ms=420 route=retry` |");
  });
  it("carries the lab label and says there is no recording", () => {
    expect(md).toContain(`> **${LAB_LABEL}**`);
    expect(md).toContain("| psi_mem_some_avg10 (host) | n/a (no recording) |  |");
    expect(md).toContain("| OOM kills | n/a (no recording) |  |");
  });
  it("drain math check names the runbook's commands", () => {
    expect(md).toContain("| `LLEN jobs` | 0 |");
    expect(md).toContain("| `LLEN jobs_drain` | 5 |");
    expect(md).toContain("| rejects in window | 3 |");
  });
  // QA AF: a `\|` outside a table shows its backslash: a pasted rollback command ran on `md\|x`, not `md|x`.
  it("escapes pipes inside table cells, code spans too; prose and list items keep them as written", () => {
    expect(mdText("a|b `c|d`", "cell")).toBe("a\\|b `c\\|d`");
    expect(mdText("a|b `c|d`")).toBe("a|b `c|d`");
    expect(renderMarkdown(report({ gatherNotes: ["a|b"] }))).toContain("- a|b");
  });
  it("a code span holding a backtick gets a longer fence, kept whole in markdown (QA AF)", () => {
    const cmd = codeSpan("drill --state-dir '/tmp/bt`x' rollback --name smoke");
    expect(cmd).toBe("`` drill --state-dir '/tmp/bt`x' rollback --name smoke ``");
    expect(codeSpan("drill rollback")).toBe("`drill rollback`");
    expect(mdText(`run ${cmd} again, *now*`)).toBe(`run ${cmd} again, \\*now\\*`);
  });
  // QA: a recording path and a payload excerpt went into the prose as written, and a renderer made them emphasis and HTML.
  it("shows paths and payload text as written: what CommonMark would read is escaped, a word's own _ is not", () => {
    const note = 'head of q is not a valid job (invalid_field prompt_tokens: not "_a_ *b* |c <b>x</b> [l](u) ~s~ &amp; `t`")';
    const out = renderMarkdown(report({ gatherNotes: [note, "cg_psi_mem_some_rate from /tmp/_rec_*x*.jsonl\\n2nd line"] }));
    expect(out).toContain('- head of q is not a valid job (invalid_field prompt_tokens: not "\\_a\\_ \\*b\\* |c \\<b>x\\</b> \\[l\\](u) \\~s\\~ \\&amp; `t`")');
    expect(out).toContain("- cg_psi_mem_some_rate from /tmp/\\_rec\\_\\*x\\*.jsonl\\\\n2nd line");
    // A span in backticks stays code (QA AE: the cost_proxy prose's `some` came out as literal backticks); a lone one is escaped.
    expect(renderMarkdown(report({ gatherNotes: ["run `drill rollback --name a|b` again, or ` alone"] }))).toContain("- run `drill rollback --name a|b` again, or \\` alone");
    const split = renderMarkdown(report({ gatherNotes: ["one\ntwo"] }));
    expect(split).toContain("- one two");
  });
  it(`lists at most ${COST_ROWS_SHOWN} jobs, says how many more`, () => {
    const done = Array.from({ length: COST_ROWS_SHOWN + 5 }, (_, i) => ({
      id: String(i),
      firstTokenMs: 100,
      deadlineMs: 8000,
      late: false,
      tokensOut: 1,
      promptTokens: 10,
      completionTokens: 1,
      attempt: 0,
      enqueueTs: NOW - 1000,
      firstTokenTs: NOW - 900,
      doneTs: NOW - 500,
    }));
    const out = renderMarkdown(report({ done }));
    expect(out).toContain("5 more job(s) not shown");
    expect(out.match(/^\| job=/gm)).toHaveLength(COST_ROWS_SHOWN);
  });
});

describe("text and json", () => {
  it("text without colour has no ANSI and aligned reject lines", () => {
    const text = renderText(report(), plain);
    expect(text).not.toContain("\u001b[");
    // A reject line stays whole on its row, as the gate printed it (what a grep of its log finds), past 80 columns if need be.
    expect(text.split("\n").find((l) => l.trimStart().startsWith("first "))).toMatch(/^ {2}first +2025-11-30T11:59:56\.000Z +reject_packed_tokens job=7 packed=36012 limit=32000 route=retry$/);
    expect(text).toContain(LAB_LABEL);
  });
  it("json is one document that round-trips the Report, its keys in snake_case", () => {
    const r = report();
    const parsed = JSON.parse(renderJson(r)) as ReportDocument;
    expect(r.decisions?.rows.some((row) => row.sharePct !== null)).toBe(true);
    // The only camelCase field of a Report: decisions.rows[].sharePct prints as share_pct, with the same values.
    const rows = r.decisions?.rows.map(({ sharePct, ...row }) => ({ ...row, share_pct: sharePct }));
    expect(parsed).toEqual(JSON.parse(JSON.stringify({ ...r, decisions: r.decisions && { ...r.decisions, rows } })));
  });
});

describe("--format", () => {
  it.each([
    { format: undefined, json: false, want: "text" },
    { format: undefined, json: true, want: "json" },
    { format: "md", json: false, want: "md" },
    { format: "json", json: true, want: "json" },
  ])("$format with --json=$json → $want", ({ format, json, want }) => {
    expect(resolveFormat(format, json)).toBe(want);
  });
  it.each([
    { format: "html", json: false, error: /--format: "html" is not one of text, md, json/ },
    { format: "md", json: true, error: /contradicts --json/ },
  ])("$format refused", ({ format, json, error }) => {
    expect(() => resolveFormat(format, json)).toThrow(error);
  });
});

describe("rollback export file", () => {
  const keys = queueKeys("jobs");
  const lines = [
    { key: "jobs", type: "list", ttl_ms: null, value: [{ utf8: '{"id":"9","enqueue_ts":1}' }, { base64: Buffer.from([0xff, 0xfe]).toString("base64") }] },
    { key: "jobs_drain", type: "list", ttl_ms: null, value: [{ utf8: "a" }, { utf8: "b" }, { utf8: "c" }] },
    { key: "jobs:stats", type: "hash", ttl_ms: null, value: { retry_count: { utf8: "4" }, tokens_out: { utf8: "512" } } },
    { key: "jobs:done", type: "list", ttl_ms: null, value: [{ utf8: '{"id":"1","first_token_ms":900}' }, { utf8: "nope" }] },
    {
      key: "jobs:events",
      type: "stream",
      ttl_ms: null,
      value: [["1764480000123-0", ["reason", "reject_packed_tokens", "job", "7", "figures", "packed=36012 limit=32000 route=retry", "ts", "1764480000123", "gate", "g", "attempt", "0"]]],
    },
    { key: "jobs:mode", type: "string", ttl_ms: null, value: { utf8: "reject_all" } },
  ];
  it("reads lists, hashes and streams; a missing key is empty", () => {
    const parsed = parseExport([...lines.map((l) => JSON.stringify(l)), "{torn"].join("\n"), keys);
    expect(parsed.queueLen).toBe(2);
    expect(parsed.queueHead?.toString()).toBe('{"id":"9","enqueue_ts":1}');
    expect(parsed.drainLen).toBe(3);
    expect(parsed.stats).toEqual({ retry_count: "4", tokens_out: "512" });
    expect(parsed.done).toHaveLength(1);
    expect(parsed.badDone).toBe(1);
    expect(parsed.badLines).toBe(1);
    expect(parsed.events![0]).toMatchObject({ reason: "reject_packed_tokens", job: "7", tsMs: 1764480000123 });
    expect(parseExport("", keys)).toMatchObject({ queueLen: 0, drainLen: 0, events: [], done: [], stats: {} });
  });
  it.each([
    { name: "final-2025-11-30T09-55-00-123Z.jsonl", want: Date.parse("2025-11-30T09:55:00.123Z") },
    { name: "/x/final-2025-11-30T09-55-00-123Z.jsonl", want: Date.parse("2025-11-30T09:55:00.123Z") },
    { name: "final-latest.jsonl", want: null },
  ])("export time of $name", ({ name, want }) => {
    expect(exportTimeMs(name)).toBe(want);
  });
});

describe("late jobs: each id list beside its own count", () => {
  const lateOf = (late_finished: number, late_unfinished: number | null, ids: string[]) => {
    const r = report();
    return textRow(renderText({ ...r, first_token: { ...r.first_token!, late: ids.length, late_jobs: ids, late_finished, late_unfinished } }, new Chalk({ level: 0 })), "late jobs")!.value;
  };
  it("finished-late ids follow the finished count, not the never-got-a-first-token one", () => {
    const line = lateOf(2, 0, ["33", "31"]);
    expect(line).toBe("2 of 0 judged (2 finished late: job=33 job=31; 0 admitted and without a first token at their deadline)");
  });
  it("both sets named", () => {
    expect(lateOf(1, 2, ["33", "40", "41"])).toBe("3 of 0 judged (1 finished late: job=33; 2 admitted and without a first token at their deadline: job=40 job=41)");
  });
  it("unfinished jobs not read", () => {
    expect(lateOf(1, null, ["33"])).toBe("1 of 0 judged (1 finished late: job=33; unfinished jobs not read)");
  });
});

// QA AD: "p99 against deadline: within the smallest deadline, 1272 ms to spare" beside 3 of 21 admitted jobs past their
// deadline without a first token: those get theirs later than the deadline, so past 1 % of the jobs the p99 is over it.
describe("p99 against deadline counts the jobs still waiting past their deadline", () => {
  const verdictOf = (withToken: number, waiting: number | null) => {
    const r = report();
    const none = withToken === 0;
    const ft = { ...r.first_token!, with_first_token: withToken, p99_ms: none ? null : 728, deadline_ms: { min: 2000, max: 2000 }, p99_over_deadline_ms: none ? null : -1272, p99_deadline_ms: 2000, late_unfinished: waiting, waiting_past_deadline: waiting, late_finished: 0, late: waiting ?? 0 };
    return textRow(renderText({ ...r, first_token: ft }, new Chalk({ level: 0 })), "p99 against deadline")!.value;
  };
  it("over when they are more than 1 % of the jobs judged", () => {
    expect(verdictOf(18, 3)).toBe("over: 3 of 21 jobs are past their deadline still without a first token (over 1 %); of the 18 with one: within, 1272 ms to spare");
  });
  it("the finished ones' verdict, with the few waiting said, under 1 %", () => {
    expect(verdictOf(200, 1)).toBe("within, 1272 ms to spare (of the 200 with a first token; 1 of 201 are past their deadline still without one, under 1 %)");
  });
  // QA AE: a stopped worker, every admitted job past its deadline and none with a first token: the verdict was n/a.
  it("over when no job has a first token and some passed their deadline", () => {
    expect(verdictOf(0, 3)).toBe("over: 3 of 3 jobs are past their deadline still without a first token");
  });
  it("as before when none waits or the unfinished ones were not read", () => {
    expect(verdictOf(18, 0)).toBe("within, 1272 ms to spare");
    expect(verdictOf(18, null)).toBe("within, 1272 ms to spare");
  });
});

describe("tokens_out split in every format", () => {
  const r = report({ stats: { tokens_out: "478", jobs_done: "1", worker_recovered: "1" }, done: [{ id: "1", firstTokenMs: 900, deadlineMs: 8000, late: false, tokensOut: 300, promptTokens: 1000, completionTokens: 300, attempt: 0, enqueueTs: NOW - 9000, firstTokenTs: NOW - 8100, doneTs: NOW - 1000 }] });
  it("text and markdown name the difference", () => {
    const md = renderMarkdown(r);
    expect(md).toMatch(/tokens_out \(stats: every token decoded, whole drill\)\D+478/);
    expect(md).toMatch(/tokens_out over the finished records \(whole drill\)\D+300/);
    expect(md).toMatch(/decoded by runs not finished \(given back: worker_recovered 1; or still running\)\D+178/);
    // Text: a label too long for the label column wraps within it, its figure on its first line.
    const text = renderText(r, new Chalk({ level: 0 }));
    expect(textRow(text, "tokens_out (stats: every token decoded, whole drill)")?.value).toBe("478");
    expect(textRow(text, "tokens_out over the finished records (whole drill)")?.value).toBe("300");
    expect(textRow(text, "decoded by runs not finished (given back: worker_recovered 1; or still running)")?.value).toBe("178");
  });
  it("json carries it", () => {
    expect(JSON.parse(renderJson(r)).tokens_out_split).toEqual({ decoded: 478, finished: 300, given_back: 178, worker_recovered: 1, unknown_because: null });
  });
  it("n/a with the reason when the records are incomplete", () => {
    const text = renderText(report({ stats: { tokens_out: "478", jobs_done: "2" }, done: [] }), new Chalk({ level: 0 }));
    expect(textRow(text, "decoded by runs not finished (given back: worker_recovered n/a; or still running)")?.value).toMatch(/^n\/a: 0 of the 2 finished jobs/);
  });
});

// QA: "retry_count (stats, whole drill) 3" beside "nacked to a retry host class in window 3": two counts, no word on
// the difference, pasted into incident notes as one figure. Each row says what it counts.
describe("Retries and totals: each retry figure says what it counts", () => {
  const r = report({ stats: { retry_count: "2" } });
  it("md", () => {
    const out = renderMarkdown(r);
    expect(out).toMatch(/retry_count \(stats, whole drill: retried jobs the worker finished\)\D+2\b/);
    expect(out).toMatch(/nacked to a retry host class in window \(gate rejects sent to jobs:retry:\\<class>\)\D+3\b/);
    expect(out).toMatch(/finished after a retry in window \(attempt > 0\)\D+0\b/);
  });
  it("text", () => {
    const out = renderText(r, plain);
    expect(textRow(out, "retry_count (stats, whole drill: retried jobs the worker finished)")?.value).toBe("2");
    expect(textRow(out, "nacked to a retry host class in window (gate rejects sent to jobs:retry:<class>)")?.value).toBe("3");
    expect(textRow(out, "finished after a retry in window (attempt > 0)")?.value).toBe("0");
  });
});

// A wide value (mixed deadlines, a large p99, negative slack) narrowed the label column to its next shorter label:
// "p99 against deadline" ran past it and its figure started 2 columns right of every other row's (pasted, it read broken).
describe("the figure/value tables: every row's figure starts in one column", () => {
  const section = (text: string, title: string) => text.slice(text.indexOf(`\n${title}\n`) + 1).split("\n\n")[0]!.split("\n");
  /** Where each row's figure starts: the first character after its label and the spaces that follow. */
  const figureColumns = (lines: string[], labels: string[]) =>
    labels.map((label) => {
      const line = lines.find((l) => l.startsWith(`  ${label}  `))!;
      return line.length - line.slice(2 + label.length).trimStart().length;
    });
  const LABELS = ["admitted in window", "finished in window", "with a first token", "first token p50", "first token p99", "first token max", "deadline", "p99 against deadline", "late jobs"];

  it.each([
    ["mixed deadlines, a large p99", { p99_ms: 98_765_432, max_ms: 99_999_999, deadline_ms: { min: 2000, max: 8000 }, p99_over_deadline_ms: 98_763_432, p99_deadline_ms: 2000, p99_over_own_deadline_ms: 98_757_432 }],
    ["mixed deadlines, negative slack", { p99_ms: 700, deadline_ms: { min: 2000, max: 8000 }, p99_over_deadline_ms: -1300, p99_deadline_ms: 2000, p99_over_own_deadline_ms: -7300 }],
    ["one deadline, 20 late ids", { p99_over_deadline_ms: -1272, late: 20, late_finished: 20, late_unfinished: 0, late_jobs: Array.from({ length: 20 }, (_, i) => String(1000 + i)) }],
  ])("%s: the p99 against deadline row's too, the table's columns within 80", (_what, over) => {
    const r = report();
    const lines = section(renderText({ ...r, first_token: { ...r.first_token!, ...over } }, plain), "First token of admitted jobs");
    const columns = figureColumns(lines, LABELS);
    expect(new Set(columns)).toEqual(new Set([columns[0]]));
    const header = lines.find((l) => l.trimStart().startsWith("figure"))!;
    expect(header.indexOf("value")).toBe(columns[0]);
    // Every line within 80 columns: a figure too long for the room left wraps, its later lines starting in the figure column.
    expect(lines.filter((l) => l.length > 80)).toEqual([]);
    const rowStarts = lines.filter((l) => LABELS.some((label) => l.startsWith(`  ${label}  `)) || l.trimStart().startsWith("figure"));
    for (const line of lines.slice(lines.indexOf(rowStarts[0]!)).filter((l) => !rowStarts.includes(l))) expect(line.slice(0, columns[0]).trim(), line).toBe("");
  });

  it("textColumns: a two-column table's labels keep their width, however wide a figure: it wraps in the room left", () => {
    const table = [["figure", "value"], ["admitted in window", "3"], ["p99 against deadline", "x".repeat(120)], ["first token p50", "812 ms"]];
    expect(textColumns(table)).toEqual({ widths: [20, 56], gap: 2 });
  });
});
