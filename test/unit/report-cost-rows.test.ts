import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import type { DoneEntry, ReportInputs, WatchSample } from "../../src/report/inputs.js";
import { COST_ROWS_SHOWN, renderText } from "../../src/report/render.js";
import { watchSample } from "../helpers/watchSample.js";
import { flat } from "../helpers/reportText.js";

/**
 * QA: with no recording every cost_proxy is n/a, and the table said "the 20
 * costliest shown, by job id" over 20 rows of n/a: nothing was ranked.
 */

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const plain = new Chalk({ level: 0 });

const finished = (i: number): DoneEntry => ({
  id: String(i), firstTokenMs: 100, deadlineMs: 8000, late: false, tokensOut: 1, promptTokens: 10, completionTokens: 1, attempt: 0,
  // Jobs 1-3 ran while the recording did; the rest after its last sample.
  enqueueTs: i <= 3 ? NOW - 50_000 : NOW - 5000, firstTokenTs: i <= 3 ? NOW - 49_900 : NOW - 4900, doneTs: i <= 3 ? NOW - 40_000 : NOW - 4000,
});

function text(recording: WatchSample[] | null): string {
  const inputs: ReportInputs = {
    queue: "jobs", source: { kind: "live", url: "redis://127.0.0.1:6390" }, drill: null, events: [],
    done: Array.from({ length: COST_ROWS_SHOWN + 5 }, (_, i) => finished(i + 1)),
    stats: {}, queueLen: 0, queueHead: null, drainLen: 0,
    recording: recording === null ? null : { file: "w.jsonl", samples: recording, badLines: 0 },
    recordingLooked: null, gatherNotes: [],
  };
  return renderText(buildReport(inputs, NOW, 600_000, { sinceGiven: true }), plain);
}

describe("which cost_proxy rows the table shows, said truly", () => {
  it("no cost at all: the first jobs by id, not 'the costliest'", () => {
    const out = text(null);
    expect(out).not.toContain("costliest");
    expect(flat(out)).toContain(`no job has a cost_proxy to rank by: the first ${COST_ROWS_SHOWN} by job id shown; 5 more job(s) not shown`);
  });

  it("a few costed: those, then the first by id without a cost", () => {
    const samples = [watchSample(NOW - 60_000, { psi_mem_some_rate: 10 }), watchSample(NOW - 30_000, { psi_mem_some_rate: 10 })];
    const out = text(samples);
    expect(flat(out)).toContain(`the 3 costed job(s) and the first ${COST_ROWS_SHOWN - 3} by job id without a cost shown, by job id; 5 more job(s) not shown`);
  });
});
