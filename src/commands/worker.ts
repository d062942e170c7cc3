import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import net from "node:net";
import { Command } from "commander";
import { spawnInCgroup, verifyJoined, JOIN_FAILED_EXIT } from "../cgroup/join.js";
import { readOomKillCount } from "../cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { addCgroupTargetOptions, resolveCgroupTarget } from "../cgroup/target.js";
import { markedWorkerCgroup } from "../cgroup/teardown.js";
import { hostRoots, type GlobalOptions } from "../context.js";
import { DrillError, InterruptedError, UsageError } from "../errors.js";
import { onInterrupt } from "../interrupt.js";
import type { HostRoots } from "../host/kernelFile.js";
import { validateKeyPart } from "../queue/keys.js";
import { DEFAULT_REDIS_URL } from "../queue/redis.js";
import { formatBytes, parseDuration, parseNumber, parsePositiveInt, parseSize } from "../units.js";
import { defaultWorkerId, type WorkerConfig } from "../worker/plan.js";
import { runWorker, type WorkerOptions, type WorkerSummary } from "../worker/run.js";
import type { CommandFactory } from "./index.js";

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
  weightsDir: string;
  kvBytesPerToken: string;
  decodeTokensPerS: string;
  prefillTokensPerPass: string;
  concurrency: string;
  workerId?: string;
  maxJobs?: string;
  idleExit?: string;
  duration?: string;
}

/** Flags → checked options (exit 2 naming the flag), before anything is touched. The worker id defaults from the cgroup name. */
export function resolveWorkerFlags(raw: RawWorkerFlags, json: boolean): Omit<WorkerOptions, "workerId"> & { workerId: string | null } {
  const weightsBytes = parseSize(raw.weights, "--weights");
  if (weightsBytes < 4096) throw new UsageError(`--weights: ${raw.weights} is less than one page`);
  const prefillTokensPerPass = parsePositiveInt(raw.prefillTokensPerPass, "--prefill-tokens-per-pass");
  if (prefillTokensPerPass < 1) throw new UsageError("--prefill-tokens-per-pass: must be at least 1");
  const concurrency = parsePositiveInt(raw.concurrency, "--concurrency");
  if (concurrency < 1) throw new UsageError("--concurrency: must be at least 1");
  const config: WorkerConfig = {
    weightsBytes,
    kvBytesPerToken: parseSize(raw.kvBytesPerToken, "--kv-bytes-per-token"),
    decodeTokensPerS: parseNumber(raw.decodeTokensPerS, "--decode-tokens-per-s"),
    prefillTokensPerPass,
    concurrency,
  };
  const maxJobs = raw.maxJobs === undefined ? null : parsePositiveInt(raw.maxJobs, "--max-jobs");
  if (maxJobs === 0) throw new UsageError("--max-jobs: must be at least 1");
  const durationMs = raw.duration === undefined ? null : parseDuration(raw.duration, "--duration");
  if (durationMs === 0) throw new UsageError("--duration: must be more than 0");
  return {
    queue: validateKeyPart(raw.queue, "--queue"),
    workerId: raw.workerId === undefined ? null : validateKeyPart(raw.workerId, "--worker-id"),
    config,
    weightsDir: raw.weightsDir,
    maxJobs,
    idleExitMs: raw.idleExit === undefined ? null : parseDuration(raw.idleExit, "--idle-exit"),
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

/** The cgroup as drill set it up (marker first), every dir present, or an error naming the missing dir. */
export function requireWorkerCgroup(globals: Pick<GlobalOptions, "procfs" | "sysfs" | "stateDir">, raw: { name?: string; parent?: string }): { roots: HostRoots; cgroup: WorkerCgroup } {
  const { roots, cgroup: computed } = resolveCgroupTarget(globals, raw);
  const cgroup = markedWorkerCgroup(computed, globals.stateDir) ?? computed;
  const absent = cgroup.dirs.filter((d) => !existsSync(d.dir)).map((d) => d.dir);
  if (absent.length > 0) {
    const parent = raw.parent === undefined ? "" : ` --parent ${raw.parent}`;
    throw new DrillError(`cgroup ${cgroup.name} does not exist: no ${absent.join(", no ")}; create it first with drill cgroup setup --name ${cgroup.name}${parent}`);
  }
  return { roots, cgroup };
}

export interface SelfCommand {
  command: string;
  args: string[];
}

/** How to run this same `drill worker …` again: node, its flags, bin/drill.js and every argument. */
export function selfCommand(): SelfCommand {
  return { command: process.execPath, args: [...process.execArgv, ...process.argv.slice(1)] };
}

/**
 * Outside the cgroup: run the same command inside it and wait. Signals are
 * forwarded (a second one SIGKILLs); the inner worker gets a lifeline pipe
 * so it stops when this process dies; its exit code becomes ours.
 */
export async function launchInCgroup(cgroup: WorkerCgroup, self: SelfCommand, err: (line: string) => void): Promise<number> {
  const oomBefore = readOomKillCount(cgroup.limits);
  const child: ChildProcess = spawnInCgroup(cgroup, self.command, self.args, {
    // Own process group: a terminal's Ctrl-C reaches us, and we forward it once.
    detached: true,
    stdio: ["ignore", "inherit", "inherit", "pipe"],
    env: { ...process.env, [WORKER_CGROUP_ENV]: JSON.stringify(cgroup), [WORKER_LIFELINE_ENV]: "3" },
  });
  const lifeline = child.stdio[3];
  lifeline?.on("error", () => {});
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error: Error | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal, error: null }));
    child.once("error", (error) => resolve({ code: null, signal: null, error }));
  });
  let forwarded = 0;
  const forward = (signal: NodeJS.Signals) => () => {
    forwarded++;
    child.kill(forwarded > 1 ? "SIGKILL" : signal);
  };
  const onInt = forward("SIGINT");
  const onTerm = forward("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  let result: Awaited<typeof exited>;
  try {
    result = await exited;
  } finally {
    process.off("SIGINT", onInt);
    process.off("SIGTERM", onTerm);
    lifeline?.destroy();
  }
  if (result.error) throw new DrillError(`cannot start the worker inside ${cgroup.limits.dir}: ${result.error.message}`, undefined, { cause: result.error });
  if (result.code === JOIN_FAILED_EXIT) throw new DrillError(`the worker could not join ${cgroup.procsFiles.join(", ")} (exit ${JOIN_FAILED_EXIT}); it never ran`);
  if (result.code !== null) return result.code;
  const oomAfter = readOomKillCount(cgroup.limits);
  const oom = oomBefore.ok && oomAfter.ok ? ` (cgroup oom_kill ${oomBefore.value} → ${oomAfter.value})` : "";
  const likely = result.signal === "SIGKILL" ? (oomBefore.ok && oomAfter.ok && oomAfter.value > oomBefore.value ? ": the OOM killer" : ": likely the OOM killer, or someone's kill -9") : "";
  err(`drill: worker pid ${child.pid ?? "?"} was killed by ${result.signal}${likely}${oom}; its working list is given back by the next worker with the same --worker-id, or drained by rollback`);
  return 1;
}

function printSummary(s: WorkerSummary, err: (line: string) => void): void {
  const avg = s.passes > 0 ? (s.passUsTotal / s.passes / 1000).toFixed(1) : "n/a";
  err(
    `worker ${s.workerId} stopped (${s.stoppedBy}): taken=${s.taken} done=${s.done} late=${s.late} dead=${s.dead} tokens=${s.tokensOut}` +
      ` passes=${s.passes} pass_ms_avg=${avg} given_back=${s.givenBackAtStop} recovered_at_start=${s.givenBackAtStart} recovered_from_peers=${s.recoveredFromPeers}`,
  );
}

/** Inside the cgroup: the loop itself. */
async function runInside(g: GlobalOptions, roots: HostRoots, cgroup: WorkerCgroup, options: ReturnType<typeof resolveWorkerFlags>): Promise<void> {
  const err = (line: string): void => void process.stderr.write(`${line}\n`);
  const interrupt = onInterrupt();
  const supervisor = new AbortController();
  let lifeline: net.Socket | null = null;
  const lifelineFd = Number(process.env[WORKER_LIFELINE_ENV]);
  if (Number.isInteger(lifelineFd) && lifelineFd > 2) {
    try {
      lifeline = new net.Socket({ fd: lifelineFd, readable: true, writable: false });
      const gone = (): void => supervisor.abort();
      lifeline.on("end", gone).on("close", gone).on("error", gone);
      lifeline.resume();
    } catch {
      lifeline = null; // not a pipe (run by hand with the variable set): no supervisor to watch
    }
  }
  let summary: WorkerSummary;
  try {
    summary = await runWorker(
      { ...options, workerId: options.workerId ?? defaultWorkerId(cgroup.name) },
      {
        redisUrl: g.redisUrl ?? DEFAULT_REDIS_URL,
        roots,
        where: cgroup.limits.dir,
        out: (line) => void process.stdout.write(`${line}\n`),
        err,
        signal: interrupt.signal,
        supervisorGone: supervisor.signal,
      },
    );
  } finally {
    interrupt.dispose();
    lifeline?.destroy();
  }
  printSummary(summary, err);
  const received = interrupt.received();
  if (received) throw new InterruptedError(received);
  if (summary.stoppedBy === "supervisor_gone") throw new InterruptedError("SIGTERM");
}

export const workerCommand: CommandFactory = (globals) =>
  addCgroupTargetOptions(
    new Command("worker")
      .description("the simulated inference worker, inside the cgroup: mmapped weights touched per pass, KV memory per prompt token, first token against the deadline")
      .option("--queue <name>", "Redis queue name", "jobs")
      .option("--weights <size>", "weights file, mapped and faulted once per pass", "1G")
      .option("--weights-dir <dir>", "directory for the weights file (a disk filesystem, not tmpfs)", "/var/tmp")
      .option("--kv-bytes-per-token <size>", "anonymous KV memory held per admitted prompt token", "4096")
      .option("--decode-tokens-per-s <n>", "cap on each job's decode rate (GPU compute time; 0: none)", "30")
      .option("--prefill-tokens-per-pass <n>", "prompt tokens per prefill pass", "2048")
      .option("--concurrency <n>", "jobs in flight at once", "8")
      .option("--worker-id <id>", "worker id for <queue>:working:<id> (default: the cgroup name, so a restart finds its list)")
      .option("--max-jobs <n>", "stop after taking this many jobs (and finishing them)")
      .option("--idle-exit <duration>", "stop after this long with no job")
      .option("--duration <duration>", "stop after this long; unfinished jobs go back to the head of admitted"),
  ).action(async (raw: RawWorkerFlags) => {
    const g = globals();
    const options = resolveWorkerFlags(raw, g.json);
    const passed = cgroupFromEnv(process.env[WORKER_CGROUP_ENV]);
    const { roots, cgroup } = passed ? { roots: hostRoots(g), cgroup: passed } : requireWorkerCgroup(g, raw);
    const joined = verifyJoined(roots, process.pid, cgroup);
    if (joined.joined) {
      await runInside(g, roots, cgroup, options);
      return;
    }
    if (passed) throw new DrillError(`${WORKER_CGROUP_ENV} is set but this process is not in ${joined.outside.join(", ")}: refusing to run outside the cgroup`);
    process.stderr.write(`drill worker: joining ${cgroup.limits.dir} (weights ${formatBytes(options.config.weightsBytes)} in ${options.weightsDir})\n`);
    const code = await launchInCgroup(cgroup, selfCommand(), (line) => void process.stderr.write(`${line}\n`));
    if (code !== 0) process.exitCode = code;
  });
