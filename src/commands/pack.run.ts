import { writeDocument, writeErr, writeOut } from "../closedStdout.js";
import { DrillError, ExitCode, InterruptedError, UsageError } from "../errors.js";
import { commandRedisUrl, drillCommandAt, type GlobalOptions } from "../context.js";
import { onInterrupt } from "../interrupt.js";
import { validateKeyPart, validateQueueName } from "../queue/keys.js";
import { jobProblems, MAX_JOBS_PER_PACK, type Job } from "../queue/job.js";
import { DrillQueue, isKeyRefusal, PUSH_FAILURE_TEXT, pushFailure, pushScope, pushUntilTaken, unnumberedJob } from "../queue/queue.js";
import { closeRedis, connectRedis, hurryOnStop, redisErrorText } from "../queue/redis.js";
import { NO_DURATION_CAP, PLAIN_DECIMAL, parseDuration, parsePositiveDuration, parsePositiveInt, parseWholeNumber } from "../units.js";
import type { RawPackOptions } from "./pack.js";

export interface PackOptions {
  queue: string;
  jobs: number;
  files: number;
  promptTokens: number;
  completionTokens: number;
  deadlineMs: number;
  /** Jobs per second; null pushes them all at once (the packer's burst). */
  rate: number | null;
  upstreamAgeMs: number;
  hostClass: string;
}

const RATE = new RegExp(`^(${PLAIN_DECIMAL})(?:/s)?$`);

/** `4/s`, `0.5/s` or `4` → jobs per second. */
export function parseRate(text: string, flag: string): number {
  const match = RATE.exec(text);
  const rate = match ? Number(match[1]) : NaN;
  if (!Number.isFinite(rate) || rate <= 0) throw new UsageError(`${flag}: "${text}" is not a rate (use e.g. 4/s)`);
  return rate;
}

export function resolvePackOptions(raw: RawPackOptions, nowMs: number = Date.now()): PackOptions {
  const jobs = parsePositiveInt(raw.jobs, "--jobs");
  if (jobs > MAX_JOBS_PER_PACK) throw new UsageError(`--jobs: ${jobs} is more than one pack pushes (at most ${MAX_JOBS_PER_PACK})`);
  // Job fields, not timers: the job schema (checkAgainstJobSchema) says what is too long, with every other offending flag.
  const deadlineMs = parsePositiveDuration(raw.deadline, "--deadline", NO_DURATION_CAP);
  const options: PackOptions = {
    queue: validateQueueName(raw.queue),
    jobs,
    files: parsePositiveInt(raw.files, "--files"),
    promptTokens: parsePositiveInt(raw.promptTokens, "--prompt-tokens"),
    completionTokens: parseWholeNumber(raw.completionTokens, "--completion-tokens"),
    deadlineMs,
    rate: raw.rate === undefined ? null : parseRate(raw.rate, "--rate"),
    upstreamAgeMs: parseDuration(raw.upstreamAge, "--upstream-age", NO_DURATION_CAP),
    hostClass: validateKeyPart(raw.hostClass, "--host-class"),
  };
  checkAgainstJobSchema(options, raw, nowMs);
  return options;
}

/** The job field each pack flag sets, and where that flag's raw text is. */
const FLAG_OF_FIELD: Record<string, { flag: string; raw: keyof RawPackOptions }> = {
  prompt_tokens: { flag: "--prompt-tokens", raw: "promptTokens" },
  completion_tokens: { flag: "--completion-tokens", raw: "completionTokens" },
  files: { flag: "--files", raw: "files" },
  enqueue_ts: { flag: "--upstream-age", raw: "upstreamAge" },
  deadline_ms: { flag: "--deadline", raw: "deadline" },
  host_class: { flag: "--host-class", raw: "hostClass" },
};

/**
 * A job the gate would send straight to dead must not be pushed at all: run
 * the gate's own rule (JOB_FIELD_RULES) on a sample job, so the limits live in one place.
 * enqueue_ts only grows after now, so checking it now covers a slow --rate too.
 */
function checkAgainstJobSchema(options: PackOptions, raw: RawPackOptions, nowMs: number): void {
  // The job the push makes; the id is INCR's first value.
  const sample: Job = { id: "1", ...unnumberedJob(options, nowMs) };
  const found = jobProblems(sample);
  if (found.length === 0) return;
  const problems = found.map(({ field, message }) => {
    const source = FLAG_OF_FIELD[field];
    const head = source ? `${source.flag}: "${raw[source.raw] ?? ""}"` : "pack";
    return `${head} gives ${field}=${String(sample[field])}, which the gate would send to dead (${message})`;
  });
  throw new UsageError(problems.join("; "));
}

export async function packAction(g: GlobalOptions, raw: RawPackOptions): Promise<void> {
  const options = resolvePackOptions(raw);
  // Allowed (a rehearsal of jobs that arrive late), but said: each job is late before the gate sees it (QA).
  if (options.upstreamAgeMs >= options.deadlineMs) {
    writeErr(
      `pack: --upstream-age ${raw.upstreamAge} is not under --deadline ${raw.deadline}: every job is pushed with its deadline already passed, and the gate rejects it on deadline slack\n`,
    );
  }
  const redisUrl = await commandRedisUrl(g, { queue: options.queue });
  const interrupt = onInterrupt();
  const redis = await connectRedis(redisUrl, { name: "drill-pack" });
  // A Ctrl-C with Redis paused gives the push in flight up in about a second, not the command timeout.
  hurryOnStop(redis, interrupt.signal);
  const run: PushRun = { index: 0, signal: interrupt.signal, unanswered: false };
  try {
    const queue = new DrillQueue(redis, options.queue);
    const ids: string[] = [];
    const started = Date.now();
    // One token per job of this run: a re-sent push takes no second id (pushUntilTaken).
    const scope = pushScope("pack");
    // A push pack gave up on: said after the summary of what was packed before it (QA: only the error was).
    let gaveUp: DrillError | null = null;
    for (let i = 0; i < options.jobs; i++) {
      if (interrupt.signal.aborted) break;
      if (options.rate !== null && i > 0) await sleepUntil(started + (i * 1000) / options.rate, interrupt.signal);
      if (interrupt.signal.aborted) break;
      run.index = i;
      const job = await pushWithRetry(queue, options, `${scope}.${i}`, run);
      if (job === null) break; // interrupted while sending it again
      if (job instanceof DrillError) {
        gaveUp = job;
        break;
      }
      ids.push(job.id);
      // Said once the first job waits, not after the last: a paced pack (--rate) filled an ungated queue for minutes
      // without a word, and one interrupted never said it (QA). Before its line, so the push lines stay one step behind.
      if (ids.length === 1) await sayIfUngated(queue, `${drillCommandAt(g)} gate --queue ${options.queue}`);
      const line = `push job=${job.id} prompt_tokens=${job.prompt_tokens} completion_tokens=${job.completion_tokens} files=${job.files} deadline_ms=${job.deadline_ms} enqueue_ts=${job.enqueue_ts} host_class=${job.host_class}`;
      if (g.json) writeDocument(`${JSON.stringify({ event: "push", queue: options.queue, ...job })}\n`);
      else writeOut(`${line}\n`);
    }
    const total = ids.length * options.promptTokens;
    // Interrupted or given up: how many of those asked for were not pushed (QA: the summary read as if all were).
    const notPacked = options.jobs - ids.length;
    const summary = packedSummary(options.queue, ids, total, notPacked);
    if (g.json) writeDocument(`${JSON.stringify({ event: "packed", queue: options.queue, jobs: ids, prompt_tokens_total: total, not_packed: notPacked })}\n`);
    else writeOut(`${summary}\n`);
    if (gaveUp) throw gaveUp;
    const received = interrupt.received();
    if (received) throw new InterruptedError(received);
  } finally {
    interrupt.dispose();
    // A server that did not answer the push will not answer QUIT either: no grace for it.
    await closeRedis(redis, run.unanswered ? 0 : undefined);
  }
}

/** `packed 8 job(s) onto jobs (job=1..8), ...`; one job is `(job=8)`, not `(job=8..8)`; a pack interrupted or given up adds `; 5 of 8 not packed`. */
export function packedSummary(queue: string, ids: readonly string[], promptTokensTotal: number, notPacked = 0): string {
  const first = ids[0];
  const last = ids[ids.length - 1];
  const range = first === undefined ? "" : first === last ? ` (job=${first})` : ` (job=${first}..${last})`;
  const short = notPacked > 0 ? `; ${notPacked} of ${ids.length + notPacked} not packed` : "";
  return `packed ${ids.length} job(s) onto ${queue}${range}, ${promptTokensTotal} prompt tokens${short}`;
}

/**
 * The pack's jobs wait in the queue until a gate decides them: with no live
 * gate heartbeat they wait, their slack running out, and nothing says so
 * (QA: a pack onto a queue with no gate looked like a stuck drill). A
 * <q>:gates drill cannot read says nothing here: the gate names it when it runs.
 */
async function sayIfUngated(queue: DrillQueue, gateCommand: string): Promise<void> {
  const live = await queue.liveGateCount().catch(() => null);
  if (live !== 0) return;
  writeErr(
    `pack: no gate decides ${queue.keys.queue} now (no live gate heartbeat ${queue.keys.gates}:<id>): its jobs wait, their deadline slack running out, until \`${gateCommand}\` runs (with the --name and --parent of its worker's cgroup)\n`,
  );
}

/** The push under way: its index, the interrupt, and whether an interrupted send was left unanswered. */
interface PushRun {
  index: number;
  signal: AbortSignal;
  unanswered: boolean;
}

/** Sends of one push before pack gives up on a Redis that does not take it. */
const PACK_SENDS = 10;

/**
 * The push of `drill up` (pushUntilTaken): the same job under the same token
 * sent again until Redis takes it, at most PACK_SENDS times; a re-send of a
 * push that did run takes no second id and queues no second copy. Null when
 * interrupted before Redis took it; the error to exit with when pack gives up.
 */
async function pushWithRetry(queue: DrillQueue, options: PackOptions, token: string, run: PushRun): Promise<Job | null | DrillError> {
  // Its place in the pack: a job not pushed has no id yet (QA: "job 3 of 10" read as job=3).
  const jobOf = `the ${ordinal(run.index + 1)} of ${options.jobs} jobs`;
  // Said on stderr when a push first fails and when Redis takes it: the pushes stall meanwhile, silent otherwise.
  let failed = false;
  // The outage counts from the first send: a paused Redis is said only when that send times out.
  const firstSentAt = Date.now();
  const outcome = await pushUntilTaken(queue, unnumberedJob(options), token, {
    signal: run.signal,
    delayMs: (failures) => Math.min(100 * failures, 1000),
    sendAgain: (failures) => failures < PACK_SENDS,
    onFailure: (err) => {
      if (failed || run.signal.aborted || isKeyRefusal(err)) return;
      failed = true;
      writeErr(`pack: push of ${jobOf} failed: ${PUSH_FAILURE_TEXT[pushFailure(err)]} (${redisErrorText(err, queue.redis)}); sending it again, up to ${PACK_SENDS} sends\n`);
    },
  });
  if (outcome.ok) {
    if (failed) writeErr(`pack: Redis answers again; job=${outcome.job.id} pushed ${((Date.now() - firstSentAt) / 1000).toFixed(1)} s after its first send\n`);
    return outcome.job;
  }
  if (run.signal.aborted) {
    // The send may run when Redis answers: the summary, written before that, cannot count it.
    if (pushFailure(outcome.error) === "no_reply") {
      run.unanswered = true;
      writeErr(`pack: interrupted with the push of ${jobOf} unanswered (${redisErrorText(outcome.error, queue.redis)}): if Redis runs it when it answers, that job is queued under the next id, though not counted below\n`);
    }
    return null;
  }
  const why = redisErrorText(outcome.error, queue.redis);
  // A key holding what drill never writes, or a seq with no id left: the operator's to fix, not Redis's to recover from.
  if (isKeyRefusal(outcome.error)) return new DrillError(`pack: could not push ${jobOf}: ${why}`, ExitCode.usage);
  const pending = pushFailure(outcome.error) === "no_reply" ? "; Redis may still run the last send when it answers: that job is then queued under the next id" : "";
  return new DrillError(`pack: could not push ${jobOf} in ${outcome.failures} send(s): ${why}${pending}`);
}

/** 1st, 2nd, 3rd, 4th … 11th, 12th, 13th … 21st. */
export function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teen ? "th" : ({ 1: "st", 2: "nd", 3: "rd" } as Record<number, string>)[n % 10] ?? "th";
  return `${n}${suffix}`;
}

function sleepUntil(atMs: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, Math.max(0, atMs - Date.now()));
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
