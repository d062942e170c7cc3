import { describe, expect, it } from "vitest";
import { decodeJob, type Job } from "../../src/queue/job.js";
import {
  addPass,
  decodePaceMs,
  defaultWorkerConfig,
  defaultWorkerId,
  doneRecord,
  emptyPassStats,
  formatDoneLine,
  jobOutcome,
  markFirstToken,
  planJob,
  planSlots,
  prefillKvSlice,
  strayPayloads,
  unmarkFirstToken,
  givenBackPayload,
} from "../../src/worker/plan.js";
import { parseWeightsFileName, weightsFileName } from "../../src/worker/weightsFile.js";

const job: Job = { id: "7", prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: 1764480000123, deadline_ms: 8000, attempt: 0, host_class: "shared-free" };

describe("planJob", () => {
  it.each([
    // prompt, completion, prefill passes, decode passes, kv bytes (4096/token)
    [24000, 256, 12, 255, 24000 * 4096],
    [2048, 1, 1, 0, 2048 * 4096],
    [2049, 2, 2, 1, 2049 * 4096],
    [0, 0, 1, 0, 0],
    [1, 10, 1, 9, 4096],
  ])("prompt %i completion %i → %i prefill passes, %i decode passes", (prompt, completion, prefill, decode, kv) => {
    const plan = planJob({ prompt_tokens: prompt, completion_tokens: completion }, defaultWorkerConfig);
    expect(plan).toMatchObject({ prefillPasses: prefill, decodePasses: decode, tokensOut: completion, kvBytes: kv });
  });

  it("turns the decode rate cap into a per-token interval; 0 means no cap", () => {
    expect(planJob(job, { ...defaultWorkerConfig, decodeTokensPerS: 30 }).decodeIntervalMs).toBeCloseTo(33.33, 2);
    expect(planJob(job, { ...defaultWorkerConfig, decodeTokensPerS: 0 }).decodeIntervalMs).toBe(0);
  });

  it("pace: waits out the rest of the interval, never when the pass itself was slower", () => {
    expect(decodePaceMs(1000, 1010, 33)).toBe(23);
    expect(decodePaceMs(1000, 1200, 33)).toBe(0); // reclaim made the pass slow: no extra wait hides or adds to it
    expect(decodePaceMs(1000, 1010, 0)).toBe(0);
  });

  it("prefill writes the KV cache slice by slice, ending at its full size", () => {
    const plan = planJob({ prompt_tokens: 5000, completion_tokens: 1 }, { ...defaultWorkerConfig, kvBytesPerToken: 100 });
    const slices = Array.from({ length: plan.prefillPasses }, (_, i) => prefillKvSlice(i, plan, 5000, 2048));
    expect(slices).toEqual([
      { start: 0, end: 204800 },
      { start: 204800, end: 409600 },
      { start: 409600, end: 500000 },
    ]);
    expect(prefillKvSlice(0, planJob({ prompt_tokens: 0, completion_tokens: 1 }, defaultWorkerConfig), 0, 2048)).toEqual({ start: 0, end: 0 });
  });
});

describe("jobOutcome", () => {
  it("first token against the deadline, from enqueue_ts", () => {
    expect(jobOutcome(job, job.enqueue_ts + 812, job.enqueue_ts + 9000)).toEqual({ firstTokenMs: 812, late: false, slackAtFirstTokenMs: 7188, totalMs: 9000 });
    expect(jobOutcome(job, job.enqueue_ts + 8000, job.enqueue_ts + 8000).late).toBe(false); // on the deadline is in time
    expect(jobOutcome(job, job.enqueue_ts + 8230, job.enqueue_ts + 9000)).toMatchObject({ late: true, slackAtFirstTokenMs: -230 });
  });

  it("done record and line", () => {
    const passes = emptyPassStats();
    addPass(passes, 10_000);
    addPass(passes, 30_000);
    const record = doneRecord(job, "infer", job.enqueue_ts + 812, job.enqueue_ts + 9000, 256, passes, 1024);
    expect(record).toMatchObject({ id: "7", worker: "infer", first_token_ms: 812, deadline_ms: 8000, late: false, tokens_out: 256, passes: 2, pass_us_total: 40_000, pass_us_max: 30_000, done_ts: job.enqueue_ts + 9000 });
    expect(formatDoneLine(record)).toBe("done job=7 first_token_ms=812 deadline_ms=8000 late=0 tokens=256 pass_ms_avg=20.0 pass_ms_max=30.0 passes=2 attempt=0");
  });

  // QA X 1: a job given back after its first token (a rollback, a worker stopped or killed) and finished by the
  // next run was recorded late, with the second run's first token.
  it("a job given back after its first token keeps that first token: on time, not late", () => {
    const givenBack = { ...job, attempt: 1, given_back_first_token_ts: job.enqueue_ts + 778 };
    const record = doneRecord(givenBack, "infer", job.enqueue_ts + 10_761, job.enqueue_ts + 12_000, 256, emptyPassStats(), 1024);
    expect(record).toMatchObject({ first_token_ms: 778, first_token_ts: job.enqueue_ts + 778, late: false, slack_ms: 8000 - 778, total_ms: 12_000 });
    // Not a number, or none: the run's own first token.
    for (const other of [{ ...job, given_back_first_token_ts: "x" }, job]) {
      expect(doneRecord(other, "infer", job.enqueue_ts + 8230, job.enqueue_ts + 9000, 1, emptyPassStats(), 1)).toMatchObject({ first_token_ms: 8230, late: true });
    }
  });
});

describe("first-token mark", () => {
  it("appends first_token_ts before the closing brace and strips it back to the same bytes", () => {
    const payload = Buffer.from('{"id":"7","prompt_tokens":24000}\n');
    const marked = markFirstToken(payload, 1764480000935)!;
    expect(marked.toString()).toBe('{"id":"7","prompt_tokens":24000,"first_token_ts":1764480000935}\n');
    expect(JSON.parse(marked.toString())).toMatchObject({ id: "7", first_token_ts: 1764480000935 });
    expect(unmarkFirstToken(marked).equals(payload)).toBe(true);
  });

  it("keeps bytes that are not UTF-8, leaves unmarked payloads alone, refuses what is not an object", () => {
    const payload = Buffer.concat([Buffer.from('{"id":"7","x":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    expect(unmarkFirstToken(markFirstToken(payload, 5)!).equals(payload)).toBe(true);
    expect(unmarkFirstToken(payload)).toBe(payload);
    expect(markFirstToken(Buffer.from("[1,2]"), 5)).toBeNull();
    expect(markFirstToken(Buffer.from('{"a":1} trailing'), 5)).toBeNull();
  });
});

describe("givenBackPayload (a job a give-back returns to admitted)", () => {
  const payload = Buffer.from(`${JSON.stringify({ id: "7", prompt_tokens: 24000, completion_tokens: 16, files: 1, enqueue_ts: 1764480000000, deadline_ms: 8000, attempt: 0, host_class: "shared-free" })}\n`);
  it("renames the mark given_back_first_token_ts: the job waits for a first token again, the one it had stays readable", () => {
    const back = givenBackPayload(markFirstToken(payload, 1764480000935)!);
    expect(back.toString()).toBe(payload.toString().replace("}\n", ',"given_back_first_token_ts":1764480000935}\n'));
    expect(decodeJob(back, 1764480001000)).toMatchObject({ ok: true, job: { id: "7" } });
    expect(givenBackPayload(payload)).toBe(payload);
  });

  it("given back twice: the first time is kept, one key (a repeated key would send the job to dead)", () => {
    const once = givenBackPayload(markFirstToken(payload, 1764480000935)!);
    const twice = givenBackPayload(markFirstToken(once, 1764480005000)!);
    expect(twice.equals(once)).toBe(true);
    expect(decodeJob(twice, 1764480006000)).toMatchObject({ ok: true });
  });
});

describe("strayPayloads (after an outage: what a lost BLMOVE reply left in the working list)", () => {
  const a = Buffer.from('{"id":"a","prompt_tokens":10}');
  const b = Buffer.from('{"id":"b","prompt_tokens":20}');
  const c = Buffer.from('{"id":"c","prompt_tokens":30}');
  const ids = (payloads: Buffer[]): string[] => payloads.map((p) => p.toString());

  it("the job just taken is listed but not running yet: held, not a stray (else it runs twice)", () => {
    expect(strayPayloads([a, b], [a, b])).toEqual([]);
    // Without it among the held, it would be started as a stray and again as the taken job.
    expect(ids(strayPayloads([a, b], [a]))).toEqual([b.toString()]);
  });

  it("a job listed with no job holding it is a stray, in list order", () => {
    expect(ids(strayPayloads([c, a, b], [a]))).toEqual([c.toString(), b.toString()]);
  });

  it("matches marked and unmarked forms of the same payload, either way round", () => {
    const aMarked = markFirstToken(a, 1764480000935)!;
    // The mark applied with its reply lost: listed marked, the job still holds the plain bytes.
    expect(strayPayloads([aMarked, b], [a, b])).toEqual([]);
    // The mark applied and acknowledged.
    expect(strayPayloads([aMarked, b], [aMarked, b])).toEqual([]);
    expect(strayPayloads([a], [aMarked])).toEqual([]);
  });

  it("each held payload accounts for one entry: the same bytes listed twice with one job is one stray", () => {
    expect(ids(strayPayloads([a, a], [a]))).toEqual([a.toString()]);
    expect(ids(strayPayloads([markFirstToken(a, 5)!, a], [a]))).toEqual([a.toString()]);
    expect(strayPayloads([a, a], [a, a])).toEqual([]);
  });

  it("a held job no longer listed (done meanwhile, or recovered elsewhere) changes nothing", () => {
    expect(ids(strayPayloads([b], [a, c]))).toEqual([b.toString()]);
    expect(strayPayloads([], [a])).toEqual([]);
  });
});

describe("worker identity and files", () => {
  it("default worker id is the cgroup name, made key-safe", () => {
    expect(defaultWorkerId("infer")).toBe("infer");
    expect(defaultWorkerId("my infer:1")).toBe("my-infer-1");
    expect(defaultWorkerId("é")).toBe("worker");
  });

  it("weights file names carry the owner's pid and start time", () => {
    const name = weightsFileName("in-fer.1", 4242, 123456);
    expect(name).toBe("drill-weights-in-fer.1-4242-123456.bin");
    expect(parseWeightsFileName(name)).toEqual({ workerId: "in-fer.1", pid: 4242, startTime: 123456 });
    expect(parseWeightsFileName("drill-hog-x.bin")).toBeNull();
  });
});

describe("planSlots (jobs already ours wait for a slot, then new work is taken)", () => {
  const limits = (concurrency: number, maxJobs: number | null = null) => ({ concurrency, maxJobs });

  it.each([
    // waiting, in flight, started, concurrency, max jobs → start, then
    [0, 0, 0, 8, null, 0, "take"],
    [0, 7, 7, 8, null, 0, "take"],
    [0, 8, 8, 8, null, 0, "wait"],
    // Two strays and the job taken with them, --concurrency 1: one at a time.
    [3, 0, 0, 1, null, 1, "wait"],
    [2, 1, 1, 1, null, 0, "wait"],
    [2, 0, 1, 1, null, 1, "wait"],
    [1, 0, 2, 1, 3, 1, "wait"],
    // Room for all of them, and one more: take.
    [3, 2, 2, 8, null, 3, "take"],
    // Strays fill the free slots before anything new is taken.
    [3, 6, 6, 8, null, 2, "wait"],
  ] as const)("waiting %i, in flight %i, started %i, concurrency %i, max %s → start %i, then %s", (waiting, inFlight, started, concurrency, maxJobs, start, then) => {
    expect(planSlots({ waiting, inFlight, started }, limits(concurrency, maxJobs))).toEqual({ start, then });
  });

  it("never starts past --concurrency, whatever waits", () => {
    for (let inFlight = 0; inFlight <= 4; inFlight++) {
      for (let waiting = 0; waiting <= 6; waiting++) {
        const plan = planSlots({ waiting, inFlight, started: inFlight }, limits(4));
        expect(inFlight + plan.start).toBeLessThanOrEqual(Math.max(4, inFlight));
        expect(plan.start).toBeLessThanOrEqual(waiting);
      }
    }
  });

  it("--max-jobs counts strays: starts only what it leaves, waits for the running ones, then stops (the rest go back with the stop)", () => {
    // Strays alone exceed it: two start, the third waits and is never started.
    expect(planSlots({ waiting: 3, inFlight: 0, started: 0 }, limits(8, 2))).toEqual({ start: 2, then: "wait" });
    expect(planSlots({ waiting: 1, inFlight: 2, started: 2 }, limits(8, 2))).toEqual({ start: 0, then: "wait" });
    expect(planSlots({ waiting: 1, inFlight: 0, started: 2 }, limits(8, 2))).toEqual({ start: 0, then: "stop" });
    // Reached exactly with nothing waiting: finish, then stop; no new take.
    expect(planSlots({ waiting: 0, inFlight: 1, started: 3 }, limits(8, 3))).toEqual({ start: 0, then: "wait" });
    expect(planSlots({ waiting: 0, inFlight: 0, started: 3 }, limits(8, 3))).toEqual({ start: 0, then: "stop" });
    // Below it: take until started reaches it.
    expect(planSlots({ waiting: 0, inFlight: 1, started: 1 }, limits(8, 3))).toEqual({ start: 0, then: "take" });
    for (let started = 0; started <= 5; started++) {
      const plan = planSlots({ waiting: 5, inFlight: 0, started }, limits(8, 3));
      expect(started + plan.start).toBeLessThanOrEqual(Math.max(3, started));
    }
  });
});
