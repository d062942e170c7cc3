import path from "node:path";
import { Command } from "commander";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { addCgroupTargetOptions } from "../cgroup/target.js";
import { DrillError, UsageError } from "../errors.js";
import { validateKeyPart, validateQueueName } from "../queue/keys.js";
import { mapSizeProblem, parseNumber, parsePositiveDuration, parsePositiveInt, parseSize } from "../units.js";
import { defaultWorkerConfig, type WorkerConfig } from "../worker/plan.js";
import type { WorkerOptions } from "../worker/run.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";
import { absoluteDir, DEFAULT_FILE_DIR } from "../host/filesystem.js";

/**
 * `drill worker`: the simulated inference worker, inside the cgroup. Started
 * outside it, the command re-executes itself through the join shim (so every
 * page it and its weights coprocess touch, Node's own heap included, is
 * charged inside), forwards SIGINT/SIGTERM and returns the inner exit code.
 */

/** Set for the inner run: the cgroup as the launcher resolved it (JSON WorkerCgroup). */
export const WORKER_CGROUP_ENV = "DRILL_WORKER_CGROUP";
/** Set for the inner run: the fd of a pipe whose other end the launcher holds; EOF = launcher gone. */
export const WORKER_LIFELINE_ENV = "DRILL_WORKER_LIFELINE";

export interface RawWorkerFlags {
  queue: string;
  name: string;
  parent?: string;
  weights: string;
  /** The weights file's directory, as inject, doctor and up name it. */
  fileDir?: string;
  /** --file-dir's older name, kept for command lines that still give it. */
  weightsDir?: string;
  kvBytesPerToken: string;
  decodeTokensPerS: string;
  prefillTokensPerPass: string;
  concurrency: string;
  workerId?: string;
  maxJobs?: string;
  idleExit?: string;
  duration?: string;
  force?: boolean;
}

/** --file-dir, or its older name --weights-dir: both, naming two directories, is a usage error. */
export function weightsDirOf(raw: Pick<RawWorkerFlags, "fileDir" | "weightsDir">): { dir: string; flag: "--file-dir" | "--weights-dir" } {
  const { fileDir, weightsDir } = raw;
  // The same directory written two ways (a trailing slash, a `..`) is one directory (QA).
  if (fileDir !== undefined && weightsDir !== undefined && path.resolve(fileDir) !== path.resolve(weightsDir)) {
    throw new UsageError(`--file-dir "${fileDir}" and --weights-dir "${weightsDir}" are the same option (--weights-dir is its older name): give one`);
  }
  if (fileDir === undefined && weightsDir !== undefined) return { dir: absoluteDir(weightsDir, "--weights-dir"), flag: "--weights-dir" };
  return { dir: absoluteDir(fileDir ?? DEFAULT_FILE_DIR, "--file-dir"), flag: "--file-dir" };
}

/**
 * Flags → checked options (exit 2 naming the flag), before anything is touched. The worker id defaults from the cgroup name.
 * hostMemoryBytes: RAM + swap (readHostMemoryBytes), the bound a drill file's weights get too.
 */
export function resolveWorkerFlags(raw: RawWorkerFlags, json: boolean, hostMemoryBytes: number | null): Omit<WorkerOptions, "workerId"> & { workerId: string | null } {
  const weightsBytes = parseSize(raw.weights, "--weights");
  const problem = mapSizeProblem(weightsBytes, hostMemoryBytes);
  if (problem) throw new UsageError(`--weights: "${raw.weights}" ${problem}`);
  const prefillTokensPerPass = parsePositiveInt(raw.prefillTokensPerPass, "--prefill-tokens-per-pass");
  const concurrency = parsePositiveInt(raw.concurrency, "--concurrency");
  const config: WorkerConfig = {
    weightsBytes,
    kvBytesPerToken: parseSize(raw.kvBytesPerToken, "--kv-bytes-per-token"),
    decodeTokensPerS: parseNumber(raw.decodeTokensPerS, "--decode-tokens-per-s"),
    prefillTokensPerPass,
    concurrency,
  };
  const maxJobs = raw.maxJobs === undefined ? null : parsePositiveInt(raw.maxJobs, "--max-jobs");
  const durationMs = raw.duration === undefined ? null : parsePositiveDuration(raw.duration, "--duration");
  return {
    queue: validateQueueName(raw.queue),
    workerId: raw.workerId === undefined ? null : validateKeyPart(raw.workerId, "--worker-id"),
    config,
    weightsDir: weightsDirOf(raw).dir,
    maxJobs,
    idleExitMs: raw.idleExit === undefined ? null : parsePositiveDuration(raw.idleExit, "--idle-exit"),
    durationMs,
    json,
  };
}

/** The cgroup passed down by the launcher, or null when not set; a malformed value is an error, not a silent re-resolve. */
export function cgroupFromEnv(value: string | undefined): WorkerCgroup | null {
  if (value === undefined || value === "") return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new DrillError(`${WORKER_CGROUP_ENV} is not JSON`);
  }
  const cg = parsed as Partial<WorkerCgroup> | null;
  const okDir = (d: unknown): boolean => typeof d === "object" && d !== null && typeof (d as { dir?: unknown }).dir === "string" && typeof (d as { cgroupPath?: unknown }).cgroupPath === "string";
  if (
    !cg ||
    typeof cg.name !== "string" ||
    !Array.isArray(cg.procsFiles) ||
    !cg.procsFiles.every((f) => typeof f === "string") ||
    !Array.isArray(cg.dirs) ||
    !cg.dirs.every(okDir) ||
    !okDir(cg.limits)
  ) {
    throw new DrillError(`${WORKER_CGROUP_ENV} does not describe a worker cgroup`);
  }
  return cg as WorkerCgroup;
}

export const workerCommand: CommandFactory = (globals) =>
  addCgroupTargetOptions(
    new Command("worker")
      .description("the simulated inference worker, inside the cgroup: mmapped weights touched per pass, KV memory per prompt token, first token against the deadline")
      .option("--queue <name>", "Redis queue name", "jobs")
      .option("--weights <size>", "weights file, mapped and faulted once per pass", "1G")
      // No commander defaults: one of them given must be told from both given.
      .option("--file-dir <dir>", `directory for the weights file (a disk filesystem, not tmpfs) (default: "${DEFAULT_FILE_DIR}")`)
      .option("--weights-dir <dir>", "the older name of --file-dir")
      .option("--kv-bytes-per-token <size>", "anonymous KV memory held per admitted prompt token", String(defaultWorkerConfig.kvBytesPerToken))
      .option("--decode-tokens-per-s <n>", "cap on each job's decode rate (GPU compute time; 0: none)", String(defaultWorkerConfig.decodeTokensPerS))
      .option("--prefill-tokens-per-pass <n>", "prompt tokens per prefill pass", String(defaultWorkerConfig.prefillTokensPerPass))
      .option("--concurrency <n>", "jobs in flight at once", String(defaultWorkerConfig.concurrency))
      .option("--worker-id <id>", "worker id for <queue>:working:<id> (default: the cgroup name, so a restart finds its list)")
      .option("--max-jobs <n>", "stop after starting this many jobs and finishing them (jobs found in its working list after a Redis outage count too)")
      .option("--idle-exit <duration>", "stop after this long with no job")
      .option("--duration <duration>", "stop after this long; unfinished jobs go back to the head of admitted")
      .option("--force", "join even the worker cgroup of a drill that is up (says so; its rollback kills this worker too)", false),
  ).action(async (raw: RawWorkerFlags) => {
    const { workerAction } = await import("./worker.run.js");
    began();
    await workerAction(globals(), raw);
  });
