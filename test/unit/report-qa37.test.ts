import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { buildReport } from "../../src/report/build.js";
import { parseExport } from "../../src/report/exportFile.js";
import { renderText } from "../../src/report/render.js";
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

describe("an export cut short: what it lost is n/a, not 0", () => {
  const keys = queueKeys("jobs");
  const payload = (id: string) => JSON.stringify({ id, prompt_tokens: 100, completion_tokens: 8, files: 1, enqueue_ts: NOW - 60_000, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
  // As rollback writes it: one key a line, sorted by key.
  const whole = [
    { key: "jobs:done", type: "list", ttl_ms: null, value: [{ utf8: JSON.stringify({ id: "1", first_token_ms: 15, deadline_ms: 8000, late: false, tokens_out: 8, done_ts: NOW - 50_000 }) }] },
    { key: "jobs:events", type: "stream", ttl_ms: null, value: [[`${NOW - 59_000}-0`, ["reason", "admit", "job", "1", "figures", "packed=100 limit=32000", "ts", String(NOW - 59_000)]], [`${NOW - 58_000}-0`, ["reason", "reject_packed_tokens", "job", "2", "figures", "packed=40000 limit=32000 route=retry", "ts", String(NOW - 58_000)]]] },
    { key: "jobs:retry:dedicated", type: "list", ttl_ms: null, value: [{ utf8: payload("2") }] },
    { key: "jobs:seq", type: "string", ttl_ms: null, value: { utf8: "2" } },
    { key: "jobs:stats", type: "hash", ttl_ms: null, value: { admitted: { utf8: "1" }, reject_packed_tokens: { utf8: "1" }, jobs_done: { utf8: "1" }, tokens_out: { utf8: "8" } } },
  ]
    .map((l) => JSON.stringify(l))
    .join("\n");

  it("whole: the keys not in it are empty (0), as Redis had none", () => {
    const exported = parseExport(`${whole}\n`, keys);
    expect(exported).toMatchObject({ badLines: 0, queueLen: 0, drainLen: 0, stats: { jobs_done: "1" } });
    expect(exported.events).toHaveLength(2);
    expect(exported.jobPlaces?.seq).toBe(2);
  });

  it("cut inside jobs:events: the keys from there on are n/a (null), not an empty stream, no stats and ids issued 0", () => {
    const cut = whole.slice(0, whole.indexOf('"reject_packed_tokens"'));
    const exported = parseExport(cut, keys);
    expect(exported.badLines).toBe(1);
    // Before the cut: whole.
    expect(exported.done).toHaveLength(1);
    // On and after it: unknown.
    expect(exported.events).toBeNull();
    expect(exported.stats).toBeNull();
    expect(exported.queueLen).toBeNull();
    expect(exported.drainLen).toBeNull();
    expect(exported.jobPlaces).toBeNull();
    const report = buildReport(
      reportInputs({ source: { kind: "export", file: "final.jsonl", atMs: NOW }, events: exported.events, done: exported.done, stats: exported.stats, queueLen: exported.queueLen, drainLen: exported.drainLen, jobPlaces: exported.jobPlaces, unfinished: exported.unfinished }),
      NOW,
      10 * 60_000,
    );
    expect(report.decisions).toBeNull();
    expect(report.totals).toBeNull();
    expect(report.jobs_where).toBeNull();
  });
});

describe("the OOM kills row names the counter as watch records it, not v2's file", () => {
  it("a legacy-v1 or hybrid host (memory.oom_control): cg_oom_kill=1, not 'memory.events oom_kill=1', a file its cgroup has not", () => {
    const samples = [watchSample(NOW - 60_000, { cg_oom_kill: 0 }), watchSample(NOW - 30_000, { cg_oom_kill: 1 })];
    const cgroupNow = { tsMs: NOW, file: "/sys/fs/cgroup/memory/infer/memory.oom_control", oomKill: 1, reason: null };
    const report = buildReport(reportInputs({ recording: { file: "watch.jsonl", samples, badLines: 0 }, cgroupNow }), NOW, 10 * 60_000);
    const text = renderText(report, new Chalk({ level: 0 }));
    const row = text.split("\n").find((l) => l.trimStart().startsWith("OOM kills"))!;
    expect(row).toMatch(/1 in window \(cg_oom_kill=1\)$/);
    expect(text).not.toContain("memory.events");
  });
});

describe("cost_proxy over a long recording and many finished jobs", () => {
  it("each job's stall is integrated over the samples of its own slot, not the whole recording per job (50 000 x 50 000 took about a minute)", () => {
    const samples = Array.from({ length: MANY / 4 }, (_, k) => watchSample(NOW - 6 * H + k * 100, { cg_psi_mem_some_rate: 10 }));
    const done: DoneEntry[] = Array.from({ length: MANY / 4 }, (_, k) => {
      const enqueueTs = NOW - 6 * H + 1000 + k * 100;
      return { id: String(k + 1), firstTokenMs: 100, deadlineMs: 8000, late: false, tokensOut: 8, promptTokens: 100, completionTokens: 8, attempt: 0, enqueueTs, firstTokenTs: enqueueTs + 100, doneTs: enqueueTs + 1000 };
    });
    const report = buildReport(reportInputs({ done, recording: { file: "big.jsonl", samples, badLines: 0 } }), NOW, 7 * H, { sinceGiven: true });
    // 1000 ms of slot at a 10 % stall, every sample covering it.
    expect(report.cost_proxy?.jobs.find((j) => j.job === "1")).toMatchObject({ stall_ms: 100, stall_coverage: 1 });
  }, 10_000);
});
