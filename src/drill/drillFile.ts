import { readFileSync } from "node:fs";
import { parse as parseYaml, YAMLParseError } from "yaml";
import { z } from "zod";
import { cgroupNameProblem, validateParent } from "../cgroup/names.js";
import { UsageError } from "../errors.js";
import { MIN_GATE_INTERVAL_MS } from "../gate/policy.js";
import { MAX_DEADLINE_MS } from "../queue/job.js";
import { isValidKeyPart } from "../queue/keys.js";
import { parseDuration, parseSize } from "../units.js";
import { defaultWorkerConfig } from "../worker/plan.js";

/**
 * A drill file declares one rehearsal: the cgroup, the workload, the gate's
 * thresholds and a schedule of packs and injects. Every number in it is a lab
 * expectation ("rewrite the thresholds, not the story"), and flags override it.
 */

const size = (what: string) =>
  z.union([z.string(), z.number().int().nonnegative()]).transform((value, ctx) => {
    try {
      return typeof value === "number" ? value : parseSize(value, what);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^[^:]*: /, "") });
      return z.NEVER;
    }
  });

const duration = (what: string) =>
  z.string().transform((value, ctx) => {
    try {
      return parseDuration(value, what);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^[^:]*: /, "") });
      return z.NEVER;
    }
  });

const count = z.number().int().positive();

/**
 * The limits of the flags `up` hands these values to (gate, watch, worker,
 * pack): a value the child would refuse with exit 2 must stop `up` here,
 * before it starts Redis and the cgroup, not leave a drill without its gate.
 */
/** PSI avg10 and stall rates are percentages: a limit over 100 never trips. */
const percent = z.number().nonnegative().max(100);
/** A name inside Redis keys (`<q>:retry:<class>`), as validateKeyPart checks it. */
const keyPart = z.string().refine(isValidKeyPart, { message: "letters, digits, '_', '.', '-' (at most 100), starting with a letter or digit" });
const PAGE = 4096;
const atLeastAPage = (what: string) => size(what).refine((bytes) => bytes >= PAGE, { message: "is less than one page (4096 bytes)" });

/** The --parent rules, here so a bad value stops `up` before it starts anything. Kept as written. */
const parent = z.string().superRefine((value, ctx) => {
  try {
    validateParent(value, "parent");
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message.replace(/^[^:]*: /, "") });
  }
});

const packStep = z.strictObject({
  jobs: count,
  files: count.default(8),
  prompt_tokens: count,
  completion_tokens: count.default(256),
  // A job's deadline_ms is 1 ms to 7 days (job.ts): outside it, every job goes to dead.
  deadline: duration("deadline")
    .refine((ms) => ms > 0, { message: "must be more than 0" })
    .refine((ms) => ms <= MAX_DEADLINE_MS, { message: `must be at most ${MAX_DEADLINE_MS / 3_600_000}h` })
    .prefault("8s"),
  upstream_age: duration("upstream_age").prefault("0s"),
  rate: z.number().positive().optional(),
  host_class: keyPart.default("shared-free"),
  label: z.string().optional(),
});

const injectStep = z.strictObject({
  mode: z.enum(["anon", "thrash"]),
  size: atLeastAPage("size"),
  hold: duration("hold"),
  label: z.string().optional(),
});

const phase = z
  .strictObject({
    at: duration("at"),
    pack: packStep.optional(),
    inject: injectStep.optional(),
  })
  .refine((p) => (p.pack ? 1 : 0) + (p.inject ? 1 : 0) === 1, { message: "a phase has exactly one of pack or inject" });

export const drillFileSchema = z.strictObject({
  name: z.string().refine((n) => cgroupNameProblem(n) === null && /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(n), {
    message: "letters, digits, '_', '.', '-' (at most 64), usable as a cgroup and queue name",
  }),
  description: z.string().default(""),
  host: z
    .strictObject({ vcpus: count.optional(), note: z.string().optional() })
    .prefault({}),
  duration: duration("duration").refine((ms) => ms > 0, { message: "must be more than 0 (every phase starts inside it)" }),
  cgroup: z.strictObject({
    memory_max: size("memory_max"),
    swap_max: size("swap_max").prefault(0),
    parent: parent.optional(),
  }),
  worker: z.strictObject({
    weights: atLeastAPage("weights"),
    // The worker command's own defaults: a drill file that leaves them out runs the worker an operator would get.
    kv_bytes_per_token: z.number().int().nonnegative().default(defaultWorkerConfig.kvBytesPerToken),
    decode_tokens_per_s: z.number().nonnegative().default(defaultWorkerConfig.decodeTokensPerS),
    prefill_tokens_per_pass: count.default(defaultWorkerConfig.prefillTokensPerPass),
  }),
  gate: z
    .strictObject({
      psi_limit: percent.default(10),
      psi_rate_limit: percent.default(10),
      slack_limit: duration("slack_limit").prefault("1500ms"),
      packed_token_limit: count.default(32000),
      interval: duration("interval")
        .refine((ms) => ms >= MIN_GATE_INTERVAL_MS, { message: `must be at least ${MIN_GATE_INTERVAL_MS}ms (the gate's shortest interval)` })
        .prefault("1s"),
      retry_host_class: keyPart.default("dedicated"),
    })
    .prefault({}),
  phases: z.array(phase).min(1),
});

export type DrillFile = z.output<typeof drillFileSchema>;
export type PackStep = z.output<typeof packStep>;
export type InjectStep = z.output<typeof injectStep>;

/** Parses and validates; every error names the file and the field. */
export function parseDrillFile(text: string, file: string): DrillFile {
  let raw: unknown;
  try {
    raw = parseYaml(text, { maxAliasCount: 10 });
  } catch (err) {
    const where = err instanceof YAMLParseError && err.linePos ? `:${err.linePos[0].line}` : "";
    throw new UsageError(`${file}${where}: not valid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  const result = drillFileSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    const field = issue.path.length > 0 ? issue.path.join(".") : "(top level)";
    throw new UsageError(`${file}: ${field}: ${issue.message}`);
  }
  const drill = result.data;
  const lastAt = Math.max(...drill.phases.map((p) => p.at));
  if (lastAt >= drill.duration) {
    throw new UsageError(`${file}: phases: a phase starts at ${lastAt}ms, at or after the drill's duration (${drill.duration}ms)`);
  }
  return drill;
}

export function loadDrillFile(file: string): DrillFile {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`--drill: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseDrillFile(text, file);
}
