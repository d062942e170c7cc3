import { readFileSync } from "node:fs";
import { isPair, isScalar, isSeq, parseDocument, visit, YAMLParseError, type Document } from "yaml";
import { z } from "zod";
import { cgroupNameProblem, validateParent } from "../cgroup/names.js";
import { UsageError } from "../errors.js";
import { HostRoots } from "../host/kernelFile.js";
import { readHostMemoryBytes } from "../host/meminfo.js";
import { MIN_GATE_INTERVAL_MS } from "../gate/policy.js";
import { JOB_FIELD_RULES, MAX_DEADLINE_MS, MAX_JOBS_PER_PACK, type FieldRule } from "../queue/job.js";
import { isValidKeyPart } from "../queue/keys.js";
import { drillDurationProblem, formatDuration, isPlainDecimal, mapSizeProblem, NO_DURATION_CAP, memoryMaxProblem, parseDuration, parsePercent, parseSize } from "../units.js";
import { defaultWorkerConfig } from "../worker/plan.js";

/**
 * A drill file declares one rehearsal: the cgroup, the workload, the gate's
 * thresholds and a schedule of packs and injects. Every number in it is a lab
 * expectation ("rewrite the thresholds, not the story"), and flags override it.
 */

/**
 * A flag's parser on a drill-file field: its UsageError becomes the field's
 * issue, without the flag's name (the error names the file and the field).
 */
const byFlagParser =
  <T>(parse: (value: string) => T) =>
  (value: string, ctx: z.RefinementCtx): T => {
    try {
      return parse(value);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^[^:]*: /, "") });
      return z.NEVER;
    }
  };

const size = (what: string) => {
  const parse = byFlagParser((v) => parseSize(v, what));
  // A YAML number is read as the flag would read its digits: `134217728.5` or `-1` gets the flag's reason, not zod's "Invalid input".
  return z
    .union([z.string(), z.number()], { error: (issue) => `${shown(issue.input)} is not a size (use e.g. 0, 512M, 2G)` })
    .transform((value, ctx) => parse(String(value), ctx));
};

/** maxMs: a job field passes none, and the job schema's own rule (job.ts) says what is too long. */
// A YAML number too, read as the flag reads its digits: `duration: 20` gets the flag's "use e.g. 8s", not zod's "expected string".
const duration = (what: string, maxMs?: number) => {
  const parse = byFlagParser((v) => parseDuration(v, what, maxMs));
  return z
    .union([z.string(), z.number()], { error: (issue) => `${shown(issue.input)} is not a duration (use e.g. 8s, 1500ms, 10m)` })
    .transform((value, ctx) => parse(String(value), ctx));
};

const count = z.number().int().positive();

/**
 * The limits of the flags `up` hands these values to (gate, watch, worker,
 * pack): a value the child would refuse with exit 2 must stop `up` here,
 * before it starts Redis and the cgroup, not leave a drill without its gate.
 */
/** PSI avg10 and stall rates are percentages: a limit over 100 never trips. */
const percent = z.number().nonnegative().max(100);
/** A stall-rate percentage as --psi-rate-limit takes it: `10` or `10%` (YAML reads `10%` as text). */
const ratePercent = (what: string) => {
  const parse = byFlagParser((v) => parsePercent(v, what));
  return z
    .union([percent, z.string()], { error: (issue) => `${shown(issue.input)} is not a percentage (use e.g. 10 or 10%)` })
    .transform((value, ctx) => (typeof value === "number" ? value : parse(value, ctx)));
};
/** A name inside Redis keys (`<q>:retry:<class>`), as validateKeyPart checks it. */
const keyPart = z.string().refine(isValidKeyPart, { message: "letters, digits, '_', '.', '-' (at most 100), starting with a letter or digit" });
/** The check of cgroup setup and up --memory-max (units.ts), on cgroup.memory_max. */
const memoryMax = size("memory_max").superRefine((bytes, ctx) => {
  const problem = memoryMaxProblem(bytes);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});
/** The bound inject --size applies (units.ts), on an inject size and worker.weights. */
const mapSize = (what: string, hostMemoryBytes: number | null) =>
  size(what).superRefine((bytes, ctx) => {
    const problem = mapSizeProblem(bytes, hostMemoryBytes);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });

/** The --parent rules, here so a bad value stops `up` before it starts anything. Kept as written. */
const parent = z.string().superRefine((value, ctx) => {
  try {
    validateParent(value, "parent");
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^[^:]*: /, "") });
  }
});

/** A number under a job field's rule (job.ts), in that rule's words. */
const jobRule = (rule: FieldRule) =>
  z.number().superRefine((value, ctx) => {
    const why = rule(value);
    if (why !== null) ctx.addIssue({ code: "custom", message: why });
  });

const packStep = z.strictObject({
  jobs: count.max(MAX_JOBS_PER_PACK, { message: `more than one pack pushes (at most ${MAX_JOBS_PER_PACK})` }),
  // At least 1 (as pack's flags), then the job's own rule (job.ts; pack checks the same):
  // over its cap, every job of the pack goes to dead.
  files: count.pipe(jobRule(JOB_FIELD_RULES.files)).default(8),
  prompt_tokens: count.pipe(jobRule(JOB_FIELD_RULES.prompt_tokens)),
  // The job's own rule (job.ts; pack --completion-tokens checks the same): 0 is a job that only needs its first token.
  completion_tokens: jobRule(JOB_FIELD_RULES.completion_tokens).default(256),
  // A job's deadline_ms is 1 ms to 7 days (job.ts): outside it, every job goes to dead.
  deadline: duration("deadline", NO_DURATION_CAP)
    .refine((ms) => ms > 0, { message: "must be more than 0" })
    .refine((ms) => ms <= MAX_DEADLINE_MS, { message: `must be at most ${MAX_DEADLINE_MS / 3_600_000}h` })
    .prefault("8s"),
  // A job's enqueue_ts is now − upstream_age, and the job's own rule (job.ts; pack --upstream-age checks
  // the same) takes only a positive one. Checked now: the drill packs later, when it is only larger.
  upstream_age: duration("upstream_age", NO_DURATION_CAP)
    .superRefine((ms, ctx) => {
      const enqueueTs = Date.now() - ms;
      const why = JOB_FIELD_RULES.enqueue_ts(enqueueTs);
      if (why !== null) {
        ctx.addIssue({ code: "custom", message: `reaches back to 1970 or earlier: every job's enqueue_ts (now − upstream_age) would be ${enqueueTs}, which the gate sends to dead (${why})` });
      }
    })
    .prefault("0s"),
  rate: z.number().positive().optional(),
  host_class: keyPart.default("shared-free"),
  label: z.string().optional(),
});

const injectStep = (hostMemoryBytes: number | null) =>
  z.strictObject({
    mode: z.enum(["anon", "thrash"]),
    size: mapSize("size", hostMemoryBytes),
    hold: duration("hold"),
    label: z.string().optional(),
  });

const phase = (hostMemoryBytes: number | null) =>
  z
    .strictObject({
      at: duration("at"),
      pack: packStep.optional(),
      inject: injectStep(hostMemoryBytes).optional(),
    })
    .refine((p) => (p.pack ? 1 : 0) + (p.inject ? 1 : 0) === 1, { message: "a phase has exactly one of pack or inject" });

/**
 * The name, with the value and what is wrong with it: "tasks" and "memory.max"
 * are in the alphabet, and the alphabet alone read as a contradiction (QA).
 * The alphabet first: a cgroup name's "use --parent for nesting" is no advice for a drill.
 */
const drillName = z.string().superRefine((name, ctx) => {
  const problem = !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(name)
    ? "is not letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit)"
    : cgroupNameProblem(name);
  if (problem !== null) ctx.addIssue({ code: "custom", message: `${shown(name)} ${problem} (a drill's name must be usable as a cgroup and queue name)` });
});

/** hostMemoryBytes: RAM + swap, the most an inject size or the weights may be (null: not checked). */
export const buildDrillFileSchema = (hostMemoryBytes: number | null) => z.strictObject({
  name: drillName,
  description: z.string().default(""),
  host: z
    .strictObject({ vcpus: count.optional(), note: z.string().optional() })
    .prefault({}),
  duration: duration("duration").refine((ms) => ms > 0, { message: "must be more than 0 (every phase starts inside it)" }),
  cgroup: z.strictObject({
    memory_max: memoryMax,
    swap_max: size("swap_max").prefault(0),
    parent: parent.optional(),
  }),
  worker: z.strictObject({
    weights: mapSize("weights", hostMemoryBytes),
    // The worker command's own defaults: a drill file that leaves them out runs the worker an operator would get.
    // The flag's parser (a size: 4K, 4096): the file refused the `4K` --kv-bytes-per-token takes.
    kv_bytes_per_token: size("kv_bytes_per_token").prefault(defaultWorkerConfig.kvBytesPerToken),
    decode_tokens_per_s: z.number().nonnegative().default(defaultWorkerConfig.decodeTokensPerS),
    prefill_tokens_per_pass: count.default(defaultWorkerConfig.prefillTokensPerPass),
  }),
  gate: z
    .strictObject({
      psi_limit: percent.default(10),
      psi_rate_limit: ratePercent("psi_rate_limit").default(10),
      slack_limit: duration("slack_limit").prefault("1500ms"),
      packed_token_limit: count.default(32000),
      interval: duration("interval")
        .refine((ms) => ms >= MIN_GATE_INTERVAL_MS, { message: `must be at least ${MIN_GATE_INTERVAL_MS}ms (the gate's shortest interval)` })
        .prefault("1s"),
      retry_host_class: keyPart.default("dedicated"),
    })
    .prefault({}),
  phases: z.array(phase(hostMemoryBytes)).min(1, { message: "at least one phase (a pack or an inject)" }),
});

export const drillFileSchema = buildDrillFileSchema(null);
export type DrillFile = z.output<typeof drillFileSchema>;
export type PackStep = z.output<typeof packStep>;
export type InjectStep = z.output<ReturnType<typeof injectStep>>;

export interface DrillFileLimits {
  /** This host's RAM + swap (readHostMemoryBytes); null or left out: sizes are not bounded by the host. */
  hostMemoryBytes?: number | null;
}

interface Problem {
  field: string;
  message: string;
}

/** A value as the file has it, in an error: `null`, `2.5`, `"ten"`, `binary data` (a `!!binary` tag). */
function shown(input: unknown): string {
  if (input === null || input === undefined) return "null";
  if (input instanceof Uint8Array) return "binary data";
  if (typeof input === "string") return JSON.stringify(input.length > 40 ? `${input.slice(0, 40)}…` : input);
  if (typeof input === "number" || typeof input === "boolean") return String(input);
  return Array.isArray(input) ? "a list" : "a mapping";
}

const TYPE_WORDS: Record<string, string> = { string: "text", number: "a number", boolean: "true or false", object: "a mapping", array: "a list" };

/**
 * zod's issues in the file's words, in one place: what the key takes and the
 * value it got (`2.5 is not a whole number`, `must be at least 0, not -1`),
 * not zod's "Invalid input: expected int, received number". A field left out
 * reads "missing (required)". A schema's own message (a size, a duration, a
 * key name) goes first: this map only words what zod would.
 */
const drillFileErrors: z.core.$ZodErrorMap = (issue) => {
  const got = shown(issue.input);
  switch (issue.code) {
    case "invalid_type":
      if (issue.input === undefined) return "missing (required)";
      if (issue.expected === "int") return `${got} is not a whole number`;
      return `takes ${TYPE_WORDS[issue.expected] ?? issue.expected}, not ${got}`;
    case "too_small":
      if (issue.origin === "array") return `needs at least ${String(issue.minimum)} item${issue.minimum === 1 ? "" : "s"}`;
      return `must be ${issue.inclusive ? "at least" : "more than"} ${String(issue.minimum)}, not ${got}`;
    case "too_big":
      return `must be ${issue.inclusive ? "at most" : "less than"} ${String(issue.maximum)}, not ${got}`;
    case "invalid_value":
      return `takes ${issue.values.map((v) => JSON.stringify(v)).join(" or ")}, not ${got}`;
    default:
      return undefined;
  }
};

/** zod's definition of a schema, as far as keysAt walks it. */
interface WalkableDef {
  type: string;
  innerType?: z.ZodType;
  in?: z.ZodType;
  element?: z.ZodType;
  shape?: Record<string, z.ZodType>;
}

const defOf = (schema: z.ZodType): WalkableDef => schema._zod.def as unknown as WalkableDef;

/** The keys the object schema at `path` knows (for "did you mean"), [] if none is there. */
function keysAt(schema: z.ZodType, path: readonly PropertyKey[]): string[] {
  const unwrap = (s: z.ZodType): z.ZodType => {
    for (;;) {
      const def = defOf(s);
      const next = def.type === "pipe" ? def.in : def.innerType;
      if (!next) return s;
      s = next;
    }
  };
  let current: z.ZodType | undefined = unwrap(schema);
  for (const segment of path) {
    const def = defOf(current);
    current = def.type === "object" ? def.shape?.[String(segment)] : def.type === "array" ? def.element : undefined;
    if (!current) return [];
    current = unwrap(current);
  }
  const def = defOf(current);
  return def.type === "object" && def.shape ? Object.keys(def.shape) : [];
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length]!;
}

/** The known key a typo most likely meant: one not given already, at most 2 edits away. */
function didYouMean(key: string, known: readonly string[], given: readonly string[]): string | null {
  let best: { key: string; distance: number } | null = null;
  for (const candidate of known) {
    if (given.includes(candidate)) continue;
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance <= 2 && (!best || distance < best.distance)) best = { key: candidate, distance };
  }
  return best?.key ?? null;
}

function valueAt(raw: unknown, path: readonly PropertyKey[]): unknown {
  let value = raw;
  for (const segment of path) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<PropertyKey, unknown>)[segment];
  }
  return value;
}

/** Every issue, as field and message; an unknown key is named at its own path. */
function describeIssues(schema: z.ZodType, raw: unknown, issues: readonly z.core.$ZodIssue[]): Problem[] {
  return issues.flatMap((issue): Problem[] => {
    const where = issue.path.map(String);
    if (issue.code === "unrecognized_keys") {
      const parent = valueAt(raw, issue.path);
      const given = parent !== null && typeof parent === "object" ? Object.keys(parent) : [];
      const known = keysAt(schema, issue.path);
      return issue.keys.map((key) => {
        const guess = didYouMean(key, known, given);
        return { field: [...where, key].join("."), message: `unknown key${guess ? ` (did you mean ${guess}?)` : ""}` };
      });
    }
    return [{ field: where.length > 0 ? where.join(".") : "(top level)", message: issue.message }];
  });
}

function problemsError(file: string, problems: readonly Problem[]): UsageError {
  if (problems.length === 1) return new UsageError(`${file}: ${problems[0]!.field}: ${problems[0]!.message}`);
  return new UsageError(`${file}: ${problems.length} problems:${problems.map((p) => `\n  ${p.field}: ${p.message}`).join("")}`);
}

/**
 * Numbers YAML reads that an operator would not have meant as written:
 * `0x10` (16), `0o17`, `1e1`, `.inf` and `12.` are numbers to YAML 1.2. A
 * drill-file number follows the flags' rule (isPlainDecimal); a sign is left
 * to the schema, which says what range the field takes.
 */
function nonDecimalNumbers(doc: Document): Problem[] {
  const problems: Problem[] = [];
  visit(doc, {
    Scalar(key, node, path) {
      if (key === "key" || typeof node.value !== "number" || node.source === undefined) return;
      if (isPlainDecimal(node.source.replace(/^-/, ""))) return;
      const field = path.flatMap((ancestor, i) => {
        if (isPair(ancestor)) return [String(isScalar(ancestor.key) ? ancestor.key.value : ancestor.key)];
        if (isSeq(ancestor)) return [String(ancestor.items.indexOf(path[i + 1] ?? node))];
        return [];
      });
      problems.push({ field: field.join(".") || "(top level)", message: `"${node.source}" is not a plain decimal number (write e.g. 10 or 2.5; a size or a duration takes its unit: 512M, 8s)` });
    },
  });
  return problems;
}

/**
 * Where a YAML error is, and its message's first line. yaml reports an error
 * at the end of the input (an unclosed `[`, say) on the line after the last
 * one when the file ends with a newline, or on a trailing blank line: there
 * the last line with text is the one to look at. Other errors keep the
 * library's line and message.
 */
function yamlErrorAt(text: string, err: YAMLParseError): { line: number | null; message: string } {
  // (the library ends its first line with ":" before the excerpt it prints below)
  const message = err.message.split("\n")[0]!.replace(/:$/, "");
  if (!err.linePos) return { line: null, message };
  const lastLine = text.trimEnd().split("\n").length; // yaml counts lines by \n, as here
  const { line } = err.linePos[0];
  if (line <= lastLine) return { line, message };
  return { line: lastLine, message: message.replace(/ at line \d+, column \d+:?$/, ` at the end of the file (line ${lastLine})`) };
}

/** Parses and validates; the error names the file and every field that is wrong. */
export function parseDrillFile(text: string, file: string, limits: DrillFileLimits = {}): DrillFile {
  let raw: unknown;
  let doc: Document;
  try {
    doc = parseDocument(text);
    for (const warning of doc.warnings) process.emitWarning(warning); // as yaml's parse() does
    if (doc.errors.length > 0) throw doc.errors[0]!;
    raw = doc.toJS({ maxAliasCount: 10 });
  } catch (err) {
    const at = err instanceof YAMLParseError ? yamlErrorAt(text, err) : { line: null, message: (err as Error).message.split("\n")[0] };
    throw new UsageError(`${file}${at.line === null ? "" : `:${at.line}`}: not valid YAML: ${at.message}`);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new UsageError(`${file}: not a drill: a YAML mapping with name, duration, cgroup, worker and phases`);
  }
  const schema = buildDrillFileSchema(limits.hostMemoryBytes ?? null);
  const result = schema.safeParse(raw, { error: drillFileErrors });
  const literal = nonDecimalNumbers(doc);
  // The field's literal is the problem: not also "expected number, received Infinity".
  const schemaProblems = result.success ? [] : describeIssues(schema, raw, result.error.issues).filter((p) => !literal.some((l) => l.field === p.field));
  const problems = [...literal, ...schemaProblems];
  if (!result.success || problems.length > 0) throw problemsError(file, problems);
  const drill = result.data;
  const lastAt = Math.max(...drill.phases.map((p) => p.at));
  if (lastAt >= drill.duration) {
    throw new UsageError(`${file}: phases: a phase starts at ${lastAt}ms, at or after the drill's duration (${drill.duration}ms)`);
  }
  const short = drillDurationProblem(drill.duration);
  if (short !== null) throw new UsageError(`${file}: duration: ${formatDuration(drill.duration)} ${short}`);
  return drill;
}

/** Reads and parses a drill file; its sizes are bounded by this host's RAM + swap (read under roots). */
export function loadDrillFile(file: string, roots: HostRoots = new HostRoots()): DrillFile {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`--drill: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseDrillFile(text, file, { hostMemoryBytes: readHostMemoryBytes(roots) });
}
