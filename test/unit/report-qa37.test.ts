import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import type { DoneEntry } from "../../src/report/inputs.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { watchSample } from "../helpers/watchSample.js";

/** QA 37 (report and recordings): huge recordings and many finished jobs. */

const NOW = Date.parse("2026-12-05T12:00:00.000Z");
const H = 3_600_000;
/** More than a call takes as spread arguments (about 120 000 in Node 20). */
const MANY = 200_000;

describe("a report over more samples or finished jobs than a call takes arguments", () => {
  it("a recording of 200 000 samples in the window (watch --interval 100ms for 6 h) is reported, not a RangeError", () => {
    const samples = Array.from({ length: MANY }, (_, k) => watchSample(NOW - 6 * H + k * 100, { psi_mem_some_avg10: k === 1234 ? 42 : 1 }));
    const report = buildReport(reportInputs({ recording: { file: "big.jsonl", samples, badLines: 0 } }), NOW, 7 * H, { sinceGiven: true });
    expect(report.pressure.samples).toBe(MANY);
    expect(report.pressure.first_sample).toBe(new Date(NOW - 6 * H).toISOString());
    expect(report.pressure.last_sample).toBe(new Date(NOW - 6 * H + (MANY - 1) * 100).toISOString());
    expect(report.pressure.peak_psi_mem_some_avg10.value).toBe(42);
  });

  it("200 000 finished jobs in the window: first-token figures and pace, not a RangeError", () => {
    const done: DoneEntry[] = Array.from({ length: MANY }, (_, k) => {
      const enqueueTs = NOW - 5 * H + k * 50;
      return {
        id: String(k + 1),
        firstTokenMs: 100 + (k % 7),
        deadlineMs: k === 5 ? 4000 : 8000,
        late: false,
        tokensOut: 8,
        promptTokens: 100,
        completionTokens: 8,
        attempt: 0,
        enqueueTs,
        firstTokenTs: enqueueTs + 100,
        doneTs: enqueueTs + 200,
      };
    });
    const report = buildReport(reportInputs({ done, stats: { jobs_done: String(MANY) } }), NOW, 6 * H, { sinceGiven: true });
    expect(report.first_token?.finished).toBe(MANY);
    expect(report.first_token?.max_ms).toBe(106);
    expect(report.first_token?.deadline_ms).toEqual({ min: 4000, max: 8000 });
  });
});

describe("pressure.alarms in --json: unknown is null, not none", () => {
  const recording = (samples: ReturnType<typeof watchSample>[]) => ({ file: "watch.jsonl", samples, badLines: 0 });

  it("no recording: null (the text says n/a), not [] (no alarm raised)", () => {
    const report = buildReport(reportInputs(), NOW, 10 * 60_000);
    expect(report.pressure.samples).toBe(0);
    expect(report.pressure.alarms).toBeNull();
  });

  it("a recording with no sample in the window: null", () => {
    const report = buildReport(reportInputs({ recording: recording([watchSample(NOW - 3 * H, { alarm: ["reclaim_not_underload"] })]) }), NOW, 10 * 60_000);
    expect(report.pressure.samples).toBe(0);
    expect(report.pressure.alarms).toBeNull();
  });

  it("samples in the window and none raised: [] (none); raised: counted", () => {
    const calm = buildReport(reportInputs({ recording: recording([watchSample(NOW - 60_000), watchSample(NOW - 30_000)]) }), NOW, 10 * 60_000);
    expect(calm.pressure.alarms).toEqual([]);
    const paged = buildReport(reportInputs({ recording: recording([watchSample(NOW - 60_000, { alarm: ["reclaim_not_underload"] }), watchSample(NOW - 30_000)]) }), NOW, 10 * 60_000);
    expect(paged.pressure.alarms).toEqual([{ alarm: "reclaim_not_underload", samples: 1 }]);
  });
});
