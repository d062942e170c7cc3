import { createHash } from "node:crypto";
import { MAX_DURATION_MS } from "../units.js";
import { shownValue } from "../util/shownValue.js";

/** A payload over this is a bad payload, before it is parsed. */
export const MAX_PAYLOAD_BYTES = 64 * 1024;
/**
 * What an admitted payload may carry over MAX_PAYLOAD_BYTES: the worker's own
 * marks (worker/plan.ts), `,"first_token_ts":<ms>` and, given back,
 * `,"given_back_first_token_ts":<ms>`, 16 digits at most each. Readers of the
 * admitted and working lists allow them (QA: a 64 KiB job the gate admitted
 * went dead as too_large at the next worker once given back, its packed
 * tokens held for good); the gate, taking from the ready list, does not.
 */
export const MAX_MARKED_PAYLOAD_BYTES = MAX_PAYLOAD_BYTES + 96;
export const MAX_JSON_DEPTH = 8;
/** A producer clock ahead of ours by more than this is a bad payload, not a long deadline. */
export const MAX_FUTURE_SKEW_MS = 60_000;

/** The longest deadline a job may carry (7 days, as any drill duration): a longer one is a bad payload. */
export const MAX_DEADLINE_MS = MAX_DURATION_MS;

/**
 * The most jobs one pack (pack --jobs, a drill file's phase) pushes: a
 * rehearsal needs thousands at most, and a typo of a few zeros would push for
 * hours into a Redis nobody sized for it.
 */
export const MAX_JOBS_PER_PACK = 1_000_000;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;
const ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
/** The most prompt or completion tokens one job may carry. */
export const MAX_JOB_TOKENS = 10_000_000;
export const MAX_JOB_FILES = 1_000_000;
export const MAX_JOB_ATTEMPT = 1_000;
const MAX_REASON_CHARS = 200;

/** What is wrong with one field's value, or null when the job's rule takes it. */
export type FieldRule = (value: unknown) => string | null;

const integerIn =
  (min: number, max: number): FieldRule =>
  (value) => {
    if (value === undefined) return "missing";
    if (typeof value !== "number" || !Number.isInteger(value)) return `must be an integer, not ${shownValue(value)}`;
    // Past 2^53 JSON.parse has already rounded it: "not 9007199254740992" would name an integer.
    if (!Number.isSafeInteger(value)) return `must be at most ${max} (and under 2^53), not ${shownValue(value)}`;
    if (value < min) return `must be at least ${min}, not ${value}`;
    if (value > max) return `must be at most ${max}, not ${value}`;
    return null;
  };
const matching =
  (pattern: RegExp, what: string): FieldRule =>
  (value) => {
    if (value === undefined) return "missing";
    return typeof value === "string" && pattern.test(value) ? null : what;
  };

/**
 * The job's rule, field by field, in the order a decode reports them. The
 * gate's decode, pack's flags and the drill file's pack steps all check these,
 * so a job is refused before its push for the same reason the gate would
 * send it to dead.
 */
export const JOB_FIELD_RULES = {
  id: matching(ID, "id must be 1-64 of [A-Za-z0-9_.-]"),
  prompt_tokens: integerIn(0, MAX_JOB_TOKENS),
  completion_tokens: integerIn(0, MAX_JOB_TOKENS),
  files: integerIn(0, MAX_JOB_FILES),
  enqueue_ts: integerIn(1, Number.MAX_SAFE_INTEGER),
  deadline_ms: integerIn(1, MAX_DEADLINE_MS),
  attempt: integerIn(0, MAX_JOB_ATTEMPT),
  host_class: matching(NAME, "host_class must be 1-100 of [A-Za-z0-9_.-]"),
  // Counted as JavaScript counts (UTF-16 units): an emoji is 2 of them.
  reason: (value) => (value === undefined || (typeof value === "string" && value.length <= MAX_REASON_CHARS) ? null : `must be text of at most ${MAX_REASON_CHARS} UTF-16 units`),
} satisfies Record<string, FieldRule>;

/**
 * One packed job as the packer pushes it:
 *   {"id":"7","prompt_tokens":24000,"completion_tokens":256,"files":8,
 *    "enqueue_ts":1764480000123,"deadline_ms":8000,"attempt":0,"host_class":"shared-free"}
 * A nack adds `reason`. Unknown fields are kept (a producer may know more than
 * we do) but never trusted.
 */
export interface Job {
  id: string;
  prompt_tokens: number;
  completion_tokens: number;
  files: number;
  enqueue_ts: number;
  deadline_ms: number;
  attempt: number;
  host_class: string;
  reason?: string | undefined;
  [field: string]: unknown;
}

export interface JobProblem {
  field: keyof typeof JOB_FIELD_RULES;
  message: string;
}

// Listed once: jobProblems runs on every job the gate decodes.
const RULES_IN_ORDER = Object.entries(JOB_FIELD_RULES) as [keyof typeof JOB_FIELD_RULES, FieldRule][];

/** Every field the job's rule refuses, in JOB_FIELD_RULES order (empty: a valid job). */
export function jobProblems(value: Record<string, unknown>): JobProblem[] {
  const problems: JobProblem[] = [];
  for (const [field, rule] of RULES_IN_ORDER) {
    const message = rule(value[field]);
    if (message !== null) problems.push({ field, message });
  }
  return problems;
}

export type DecodedJob =
  | { ok: true; job: Job; fingerprint: string }
  /** `id` is a best-effort hint from a payload that parsed but failed validation. */
  | { ok: false; reason: string; id: string | null };

const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Bytes from Redis → a validated job, or the reason it goes to the dead list.
 * Never throws: a poison payload must not take the gate down.
 */
export function decodeJob(payload: Buffer, nowMs: number = Date.now(), maxBytes: number = MAX_PAYLOAD_BYTES): DecodedJob {
  try {
    return decodeUnsafe(payload, nowMs, maxBytes);
  } catch (err) {
    return { ok: false, reason: `undecodable: ${err instanceof Error ? err.name : "error"}`, id: null };
  }
}

function decodeUnsafe(payload: Buffer, nowMs: number, maxBytes: number): DecodedJob {
  if (payload.length > maxBytes) return bad(`too_large bytes=${payload.length} max=${maxBytes}`, leadingIdHint(payload));
  let text: string;
  try {
    text = utf8.decode(payload);
  } catch {
    return bad("invalid_utf8", leadingIdHint(payload));
  }
  const shape = scanJson(text);
  if (shape.depth > MAX_JSON_DEPTH) return bad(`too_deep depth>${MAX_JSON_DEPTH}`, leadingIdHint(payload));

  let forbidden: string | null = null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text, (key, value: unknown) => {
      if (FORBIDDEN_KEYS.has(key)) forbidden ??= key;
      return value;
    });
  } catch {
    return bad("not_json", leadingIdHint(payload));
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return bad("not_an_object");
  // JSON.parse keeps the last of a repeated key, a prefix read (leadingIdHint) the first: which job it is depends on who reads it.
  const repeated = shape.topKeys.length === Object.keys(parsed).length ? null : repeatedKey(text, shape.topKeys);
  if (repeated !== null) return bad(`duplicate_key ${JSON.stringify(repeated).slice(1, -1).slice(0, 40)}`, repeated === "id" ? null : idHint(parsed));
  const id = idHint(parsed);
  if (forbidden !== null) return bad(`forbidden_key ${forbidden}`, id);

  const [problem] = jobProblems(parsed as Record<string, unknown>);
  if (problem) return bad(`invalid_field ${problem.field}: ${problem.message}`, id);
  const job = parsed as Job;
  if (job.enqueue_ts > nowMs + MAX_FUTURE_SKEW_MS) {
    return bad(`enqueue_ts_in_future ahead_ms=${job.enqueue_ts - nowMs}`, job.id);
  }
  return { ok: true, job, fingerprint: jobFingerprint(job) };
}

function bad(reason: string, id: string | null = null): DecodedJob {
  return { ok: false, reason, id };
}

/**
 * The id of a payload that is not parsed (too large, not UTF-8, too deep, not
 * JSON), when it comes first (as pack and encodeJob write it): read from its
 * first bytes only, so a 10 MB blob is not parsed. QA: such a job went dead
 * with id null, out of reach of the no-job-lost count.
 */
function leadingIdHint(payload: Buffer): string | null {
  const match = /^\s*\{\s*"id"\s*:\s*"([^"\\]*)"/.exec(payload.subarray(0, 512).toString("latin1"));
  return match && ID.test(match[1]!) ? match[1]! : null;
}

function idHint(value: object): string | null {
  const id = (value as { id?: unknown }).id;
  return typeof id === "string" && ID.test(id) ? id : null;
}

/**
 * What a scan before JSON.parse sees: the bracket depth outside strings, so
 * deep nesting is refused before JSON.parse sees it, and where each key of the
 * top-level object starts (a string at depth 1 right after `{` or `,`).
 */
function scanJson(text: string): { depth: number; topKeys: number[] } {
  let depth = 0;
  let max = 0;
  let inString = false;
  let last = 0; // the last char outside strings and whitespace
  const topKeys: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped char
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
    if (c === 0x22) {
      inString = true;
      if (depth === 1 && (last === 0x7b || last === 0x2c)) topKeys.push(i);
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (depth > max) max = depth;
      if (max > MAX_JSON_DEPTH) return { depth: max, topKeys };
    } else if (c === 0x7d || c === 0x5d) depth--;
    last = c;
  }
  return { depth: max, topKeys };
}

/** The first top-level key that comes twice, decoded (`"\u0069d"` is `id`); only called when there is one. */
function repeatedKey(text: string, starts: number[]): string | null {
  const seen = new Set<string>();
  for (const start of starts) {
    let end = start + 1;
    while (text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c ? 2 : 1;
    const key = JSON.parse(text.slice(start, end + 1)) as string;
    if (seen.has(key)) return key;
    seen.add(key);
  }
  return null;
}

/**
 * What makes two payloads "the same job": the work itself, not the delivery
 * bookkeeping (attempt, reason, and host_class, which a nack rewrites).
 * Same id + different fingerprint = dead.
 */
export function jobFingerprint(job: Job): string {
  const canonical = [job.id, job.prompt_tokens, job.completion_tokens, job.files, job.enqueue_ts, job.deadline_ms].join("|");
  return createHash("sha1").update(canonical).digest("hex");
}

export function encodeJob(job: Job): Buffer {
  return Buffer.from(JSON.stringify(job), "utf8");
}

/** deadline slack: enqueue_ts + deadline_ms − now (negative once the deadline passed). */
export function deadlineSlackMs(job: Pick<Job, "enqueue_ts" | "deadline_ms">, nowMs: number): number {
  return job.enqueue_ts + job.deadline_ms - nowMs;
}
