import { describe, expect, it } from "vitest";
import { decodeJob, deadlineSlackMs, jobFingerprint, jobProblems, MAX_PAYLOAD_BYTES } from "../../src/queue/job.js";
import { fuzzPayloads } from "../fuzzPayloads.js";
import { jobIdOf, jobTimingOf } from "../../src/report/inputs.js";

const NOW = 1_764_480_010_000;
const good = { id: "7", prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: 1_764_480_000_123, deadline_ms: 8000, attempt: 0, host_class: "shared-free" };
const json = (value: unknown) => Buffer.from(JSON.stringify(value));
const withField = (field: string, value: unknown) => json({ ...good, [field]: value });
const without = (field: keyof typeof good) => {
  const copy: Record<string, unknown> = { ...good };
  delete copy[field];
  return json(copy);
};

describe("decodeJob", () => {
  it("accepts the DESIGN.md payload", () => {
    const decoded = decodeJob(json(good), NOW);
    expect(decoded.ok).toBe(true);
    if (decoded.ok) expect(decoded.job).toMatchObject(good);
  });

  it("keeps unknown fields and a nack reason", () => {
    const decoded = decodeJob(json({ ...good, reason: "host_pressure", tenant: "a" }), NOW);
    expect(decoded.ok && decoded.job.reason).toBe("host_pressure");
  });

  it("a deadline already past is not malformed", () => {
    const decoded = decodeJob(withField("enqueue_ts", NOW - 60_000), NOW);
    expect(decoded.ok).toBe(true);
    if (decoded.ok) expect(deadlineSlackMs(decoded.job, NOW)).toBe(-52_000);
  });

  // QA: a job over 64 KiB went dead with id null, out of reach of the no-job-lost count.
  it("a payload too large to parse keeps its id when the id comes first (read from its first bytes only)", () => {
    const big = (head: string) => Buffer.from(`${head}${"x".repeat(MAX_PAYLOAD_BYTES)}"}`);
    expect(decodeJob(big(' { "id" : "big-7", "pad":"'), NOW)).toMatchObject({ ok: false, reason: expect.stringMatching(/^too_large/), id: "big-7" });
    expect(decodeJob(big('{"pad":"1","id":"big-7","more":"'), NOW)).toMatchObject({ ok: false, id: null });
    expect(decodeJob(big('{"id":"7*","pad":"'), NOW)).toMatchObject({ ok: false, id: null });
  });

  // QA: a job with one bad byte (a host_class of 0xff), cut short, or nested too deep went dead with
  // id null too, though its id comes first as pack writes it: not counted by the no-job-lost check.
  it("a payload that does not parse keeps its id when the id comes first: invalid UTF-8, cut short, nested too deep", () => {
    const head = JSON.stringify(good).slice(0, -1);
    expect(decodeJob(Buffer.concat([Buffer.from(`${head},"x":"`), Buffer.from([0xff]), Buffer.from('"}')]), NOW)).toEqual({ ok: false, reason: "invalid_utf8", id: good.id });
    expect(decodeJob(Buffer.from(head.slice(0, 40)), NOW)).toEqual({ ok: false, reason: "not_json", id: good.id });
    expect(decodeJob(Buffer.from(`${head},"x":${"[".repeat(20)}${"]".repeat(20)}}`), NOW)).toMatchObject({ ok: false, reason: expect.stringMatching(/^too_deep/), id: good.id });
    // No id first, or no JSON at all: none.
    expect(decodeJob(Buffer.concat([Buffer.from('{"x":"'), Buffer.from([0xff]), Buffer.from(`",${head.slice(1)}}`)]), NOW)).toMatchObject({ ok: false, id: null });
    expect(decodeJob(Buffer.from("id=7 prompt_tokens=24000"), NOW)).toMatchObject({ ok: false, id: null });
  });

  // JSON.parse keeps a repeated key's last value, a prefix read its first: the payload names two jobs.
  it("a payload with a top-level key twice is dead with duplicate_key, its id only when id is not the key repeated", () => {
    const body = JSON.stringify(good).slice(1);
    expect(decodeJob(Buffer.from(`{"id":"other",${body}`), NOW)).toEqual({ ok: false, reason: "duplicate_key id", id: null });
    expect(decodeJob(Buffer.from(`{ "\\u0069d" : "other" , ${body}`), NOW)).toEqual({ ok: false, reason: "duplicate_key id", id: null });
    expect(decodeJob(Buffer.from(`{"prompt_tokens":1,${body}`), NOW)).toEqual({ ok: false, reason: "duplicate_key prompt_tokens", id: good.id });
    expect(decodeJob(Buffer.from(`{"a\\nb":1,"a\\nb":2,${body}`), NOW)).toMatchObject({ ok: false, reason: "duplicate_key a\\nb" });
    // The same key in a nested object, or a key-like string among the values, is no repeat.
    expect(decodeJob(json({ ...good, reason: '{"id":"x","id":"y"}', meta: { id: "inner" } }), NOW)).toMatchObject({ ok: true });
    expect(decodeJob(json({ ...good, meta: [{ a: 1 }, { a: 2 }] }), NOW)).toMatchObject({ ok: true });
  });

  const deep = Buffer.from(`{"id":"1","x":${"[".repeat(20_000)}${"]".repeat(20_000)}}`);
  const malformed: [string, Buffer, RegExp][] = [
    ["not JSON", Buffer.from("id=7 prompt_tokens=24000"), /^not_json/],
    ["truncated JSON", Buffer.from(JSON.stringify(good).slice(0, 40)), /^not_json/],
    ["JSON but not an object", Buffer.from("[1,2,3]"), /^not_an_object/],
    ["null", Buffer.from("null"), /^not_an_object/],
    ["10 MB", Buffer.alloc(10 * 1024 * 1024, 0x61), /^too_large/],
    ["just over the cap", Buffer.alloc(MAX_PAYLOAD_BYTES + 1, 0x20), /^too_large/],
    ["deep nesting", deep, /^too_deep/],
    ["__proto__ key", Buffer.from(`{"__proto__":{"admin":true},${JSON.stringify(good).slice(1)}`), /^forbidden_key __proto__/],
    ["nested constructor key", json({ ...good, meta: { constructor: { prototype: 1 } } }), /^forbidden_key/],
    ["tokens NaN (not JSON)", Buffer.from(JSON.stringify(good).replace("24000", "NaN")), /^not_json/],
    ["tokens as the string NaN", withField("prompt_tokens", "NaN"), /^invalid_field prompt_tokens/],
    ["tokens -1", withField("prompt_tokens", -1), /^invalid_field prompt_tokens/],
    ["tokens 1e309", Buffer.from(JSON.stringify(good).replace("24000", "1e309")), /^invalid_field prompt_tokens/],
    ["tokens fractional", withField("prompt_tokens", 1.5), /^invalid_field prompt_tokens/],
    ["completion tokens missing", without("completion_tokens"), /^invalid_field completion_tokens/],
    ["deadline_ms 0", withField("deadline_ms", 0), /^invalid_field deadline_ms/],
    ["deadline_ms negative", withField("deadline_ms", -8000), /^invalid_field deadline_ms/],
    ["enqueue_ts far in the future", withField("enqueue_ts", NOW + 3_600_000), /^enqueue_ts_in_future/],
    ["enqueue_ts a string", withField("enqueue_ts", "2025-11-30"), /^invalid_field enqueue_ts/],
    ["missing id", without("id"), /^invalid_field id/],
    ["empty id", withField("id", ""), /^invalid_field id/],
    ["id with a glob", withField("id", "7*"), /^invalid_field id/],
    ["numeric id", withField("id", 7), /^invalid_field id/],
    ["host_class with a colon", withField("host_class", "a:b"), /^invalid_field host_class/],
    ["invalid UTF-8", Buffer.concat([Buffer.from('{"id":"7","x":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]), /^invalid_utf8/],
    ["lone continuation byte", Buffer.from([0x80]), /^invalid_utf8/],
    ["empty", Buffer.alloc(0), /^not_json/],
    ["tokens over the cap", withField("prompt_tokens", 10_000_001), /^invalid_field prompt_tokens: must be at most 10000000, not 10000001$/],
    ["tokens past a safe integer", withField("completion_tokens", 2 ** 53), /^invalid_field completion_tokens: must be at most 10000000 \(and under 2\^53\), not 9007199254740992$/],
    ["enqueue_ts past 2^53 (rounded by JSON.parse)", Buffer.from(JSON.stringify(good).replace("1764480000123", "9007199254740993")), /^invalid_field enqueue_ts: must be at most 9007199254740991 \(and under 2\^53\)/],
    ["tokens 1e309 (Infinity)", Buffer.from(JSON.stringify(good).replace("24000", "1e309")), /^invalid_field prompt_tokens: must be an integer, not Infinity$/],
    ["tokens as a list", withField("completion_tokens", [1]), /^invalid_field completion_tokens: must be an integer, not a list$/],
    ["enqueue_ts 0", withField("enqueue_ts", 0), /^invalid_field enqueue_ts: must be at least 1, not 0$/],
    ["deadline_ms over 7 days", withField("deadline_ms", 7 * 24 * 3_600_000 + 1), /^invalid_field deadline_ms: must be at most 604800000/],
    ["attempt over 1000", withField("attempt", 1001), /^invalid_field attempt: must be at most 1000/],
    ["attempt missing", without("attempt"), /^invalid_field attempt: missing$/],
    ["a reason of 201 characters", withField("reason", "r".repeat(201)), /^invalid_field reason: must be text of at most 200 UTF-16 units$/],
    ["a reason that is not text", withField("reason", 5), /^invalid_field reason:/],
  ];
  for (const [name, payload, reason] of malformed) {
    it(`refuses ${name}`, () => {
      const decoded = decodeJob(payload, NOW);
      expect(decoded.ok).toBe(false);
      if (!decoded.ok) expect(decoded.reason).toMatch(reason);
    });
  }

  it("jobProblems lists every field the rule refuses, in the rule's field order, none for a good job", () => {
    expect(jobProblems(good)).toEqual([]);
    expect(jobProblems({ ...good, reason: "r".repeat(200), tenant: { any: "thing" } })).toEqual([]);
    expect(jobProblems({ host_class: "a:b", id: "7", prompt_tokens: -1, files: 1.5 }).map((p) => p.field)).toEqual([
      "prompt_tokens",
      "completion_tokens",
      "files",
      "enqueue_ts",
      "deadline_ms",
      "attempt",
      "host_class",
    ]);
  });

  it("keeps an id hint from a payload that parsed", () => {
    const decoded = decodeJob(withField("prompt_tokens", -1), NOW);
    expect(decoded.ok === false && decoded.id).toBe("7");
  });

  it("fingerprint ignores delivery bookkeeping, not the work", () => {
    const base = decodeJob(json(good), NOW);
    const retried = decodeJob(json({ ...good, attempt: 2, reason: "host_pressure", host_class: "dedicated" }), NOW);
    const changed = decodeJob(withField("prompt_tokens", 24001), NOW);
    if (!base.ok || !retried.ok || !changed.ok) throw new Error("fixture");
    expect(retried.fingerprint).toBe(base.fingerprint);
    expect(changed.fingerprint).not.toBe(base.fingerprint);
    expect(jobFingerprint(base.job)).toBe(base.fingerprint);
  });
});

describe("decodeJob fuzz: thousands of generated payloads never throw", () => {
  it("mutated, truncated and random payloads", () => {
    let accepted = 0;
    let refused = 0;
    for (const payload of fuzzPayloads(20251130, 5000, good)) {
      const decoded = decodeJob(payload, NOW);
      expect(typeof decoded.ok).toBe("boolean");
      if (decoded.ok) {
        accepted++;
        expect(Number.isSafeInteger(decoded.job.prompt_tokens) && decoded.job.prompt_tokens >= 0).toBe(true);
        expect(decoded.job.deadline_ms).toBeGreaterThan(0);
      } else {
        refused++;
        expect(decoded.reason.length).toBeGreaterThan(0);
      }
    }
    // Both ways out are taken: a generator that made only garbage (or only good jobs) would test little.
    expect(accepted).toBeGreaterThan(300);
    expect(refused).toBeGreaterThan(4000);
  });
});

// A producer that writes a UTF-8 byte order mark: the gate reads the job (TextDecoder drops the mark);
// the report's readers dropped it not, so the admitted job had no id or deadline in the report's lists.
describe("a payload after a UTF-8 byte order mark", () => {
  const withMark = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), json(good)]);

  it("is the same job to the gate and to the report's readers", () => {
    expect(decodeJob(withMark, NOW)).toMatchObject({ ok: true, job: { id: good.id } });
    expect(jobIdOf(withMark)).toBe(good.id);
    expect(jobTimingOf(withMark, "admitted")).toMatchObject({ id: good.id, enqueueTs: good.enqueue_ts, deadlineMs: good.deadline_ms });
    // A dead entry wraps the payload as a string.
    expect(jobIdOf(JSON.stringify({ reason: "x", payload: withMark.toString("utf8") }))).toBe(good.id);
  });
});

// QA: a dead entry the gate wrote with id null (it refused "a|b\nc") was counted as job "a|b\nc" by the report,
// whose text output then broke its line at the newline.
describe("an id the gate refused", () => {
  it("is no job id to the report, on a dead entry or on a list", () => {
    const refused = JSON.stringify({ ...good, id: "a|b\nc" });
    expect(jobIdOf(JSON.stringify({ reason: "invalid_field id", id: null, gate: "g", ts: NOW, payload_bytes: refused.length, payload: refused }))).toBeNull();
    expect(jobIdOf(refused)).toBeNull();
    expect(jobIdOf(JSON.stringify({ reason: "x", payload: refused }))).toBeNull();
    // The gate's own id on a dead entry stays the entry's id, and a number is the id it reads as.
    expect(jobIdOf(JSON.stringify({ reason: "invalid_field prompt_tokens", id: good.id, gate: "g", ts: NOW, payload_bytes: 2, payload: "{}" }))).toBe(good.id);
    expect(jobIdOf(JSON.stringify({ ...good, id: 7 }))).toBe("7");
  });
});
