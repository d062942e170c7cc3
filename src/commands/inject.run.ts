import { closeSync, openSync, readSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { createInterface } from "node:readline";
import type { ChildProcess } from "node:child_process";
import { DrillError, InterruptedError, RefusedError, UsageError, type StopSignal } from "../errors.js";
import { hostRoots, type GlobalOptions } from "../context.js";
import { readKernelText } from "../host/kernelFile.js";
import { parsePsi, stallRatePct } from "../host/psi.js";
import { consoleOutput, snakeCaseKeys, type Output } from "../output.js";
import { formatBytes, formatDuration, mapSizeProblem, parseDuration, parseSize } from "../units.js";
import { checkThrashDir, classifyHogExit, thrashFitsNote, oomKillRose, samplePhase, summarizeStall, type HogMode, type HogOutcome, type StallSample, type StallSummary } from "../cgroup/hog.js";
import { joinedUnlessGone, spawnInCgroup, HOG_OOM_SCORE_ADJ, JOIN_FAILED_EXIT } from "../cgroup/join.js";
import { parseCounter, readCgroupMemory, readOomKillCount } from "../cgroup/memoryFiles.js";
import type { CgroupDir, WorkerCgroup } from "../cgroup/paths.js";
import type { HostRoots } from "../host/kernelFile.js";
import { cgroupKey, newHogRecordFile, removeHogRecord, writeHogRecord, type HogRecord } from "../cgroup/stateFiles.js";
import { resolveCgroupTarget } from "../cgroup/target.js";
import { signalVerified } from "../cgroup/tasks.js";
import { onStopSignals } from "../interrupt.js";
import { TERM_GRACE_MS } from "../cgroup/teardown.js";
import { readHostMemoryBytes } from "../host/meminfo.js";
import { absoluteDir } from "../host/filesystem.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";
import { readProcessStat } from "../host/process.js";
import { forcedJoinWarning, refuseForeignJoin, refuseFrozen, refuseOomKillDisabled, requireSetUpCgroup, setupAdvice } from "../cgroup/ready.js";
import type { UpHolder } from "../cgroup/setup.js";
import { anonCommand, describePageToucherExit, locatePageToucher, parsePageToucherLine, thrashCommand, type PageToucherImpl, type PageToucherLine } from "../native/pagetoucher.js";
import { followLines } from "../drill/tail.js";
import { openOwnFile } from "../util/ownFiles.js";
import type { InjectFlags } from "./inject.js";

/** The outcome document (`--json` prints it as is). */
export interface InjectReport {
  outcome: HogOutcome;
  name: string;
  mode: HogMode;
  /** What faults the pages: the C helper, or the python fallback (slower per page) when it is not built. */
  page_toucher: "c" | "python-fallback";
  size_bytes: number;
  hold_ms: number;
  /** ms from the packed line to the hog's exit: the hold it had, which a SIGSTOP or a stalled host stretches; null if it never packed or still holds. */
  held_ms: number | null;
  detached: boolean;
  pid: number | null;
  start_time: number | null;
  /** The hog's first output line came from inside every dir of the cgroup (checked in /proc/<pid>/cgroup). */
  joined: boolean | null;
  /** The hog's /proc/<pid>/oom_score_adj at its first line (HOG_OOM_SCORE_ADJ: the OOM killer's first pick); null: not read. */
  oom_score_adj: number | null;
  /** The hog's last progress figure; null before its first progress line (QA: an OOM kill within ms said 0). */
  touched_bytes: number | null;
  packed_bytes: number | null;
  /** ms from the hog's start to its packed line: how long the fill took (null: it never packed). */
  fill_ms: number | null;
  passes: number;
  cgroup: string;
  cg_mem_max: number | "max" | null;
  /** The tightest limit over the cgroup and its ancestors when the hog started: what it ran into. */
  cg_mem_max_effective: number | "max" | null;
  /** The cgroup's lifetime peak (memory.peak / memory.max_usage_in_bytes), earlier runs included. */
  cg_mem_peak: number | null;
  /** The cgroup's peak during this run; see run_peak_basis for how it is known (null: not known). */
  run_peak_bytes: number | null;
  run_peak_basis: RunPeakBasis | null;
  cg_oom_kill_before: number | null;
  cg_oom_kill_after: number | null;
  /** Per-second stall % from the cgroup's own memory.pressure `some total` deltas. */
  stall_rates_pct: Array<number | null>;
  samples: StallSample[];
  stall: StallSummary;
  pressure_file: string | null;
  file: string | null;
  /** Why the hog's file could not be unlinked after it exited (its record then kept, in state_file); null when it is gone. */
  file_left: string | null;
  state_file: string | null;
  exit: { code: number | null; signal: NodeJS.Signals | null; description: string } | null;
  message: string;
}

interface InjectSettings {
  mode: HogMode;
  sizeBytes: number;
  holdMs: number;
  detach: boolean;
  fileDir: string;
}

/** hostMemoryBytes: RAM + swap (readHostMemoryBytes), the bound a drill file's inject size gets too. */
export function parseInjectFlags(flags: InjectFlags, hostMemoryBytes: number | null): InjectSettings {
  if (flags.mode !== "anon" && flags.mode !== "thrash") throw new UsageError(`--mode: "${flags.mode}" is not anon or thrash`);
  const sizeBytes = parseSize(flags.size, "--size");
  const problem = mapSizeProblem(sizeBytes, hostMemoryBytes);
  if (problem) throw new UsageError(`--size: "${flags.size}" ${problem}`);
  return { mode: flags.mode, sizeBytes, holdMs: parseDuration(flags.hold, "--hold"), detach: flags.detach === true, fileDir: absoluteDir(flags.fileDir, "--file-dir") };
}

/**
 * The cgroup inject may use: drill's dirs (marker first), all present, with a
 * limit, the hog's to join (refuseForeignJoin), or a refusal naming why.
 * `forced`: the drill that is up with it, joined anyway (--force).
 */
function requireReadyCgroup(roots: HostRoots, computed: WorkerCgroup, stateDir: string, flags: InjectFlags, env: NodeJS.ProcessEnv): { cgroup: WorkerCgroup; forced: UpHolder | null } {
  const parent = flags.parent;
  const cgroup = requireSetUpCgroup(roots, computed, stateDir, parent);
  const memory = readCgroupMemory(cgroup.limits);
  if (memory.effectiveLimit === null) {
    throw new DrillError(`cannot read the memory limit of ${cgroup.limits.dir}: ${memory.missing.map((m) => `${m.file} ${m.reason}`).join("; ")}`);
  }
  if (memory.effectiveLimit === "max") {
    throw new RefusedError(`${cgroup.limits.dir} has no memory limit (nor has any ancestor): the hog would pressure the whole host; ${setupAdvice(roots, computed, stateDir, parent, " --memory-max <size>")}`);
  }
  const forced = refuseForeignJoin(roots, computed, cgroup, stateDir, { command: "inject", force: flags.force === true, runId: env.DRILL_RUN_ID });
  refuseFrozen(cgroup, { command: "inject", runId: env.DRILL_RUN_ID });
  return { cgroup, forced };
}

/** How this run's peak is known: memory.peak reset for our fd (exact), the lifetime peak rising during the run (exact), or the highest usage sampled (a lower bound). */
export type RunPeakBasis = "reset" | "lifetime_peak_rose" | "sampled";

export interface RunPeakFacts {
  /** memory.peak read through the fd we reset before the spawn (v2, Linux ≥ 6.12), else null. */
  resetPeak: number | null;
  lifetimeBefore: number | null;
  lifetimeAfter: number | null;
  /** Highest memory usage read during the run (1 s samples and the moment it packed). */
  sampledMax: number | null;
}

/**
 * Pure: the cgroup's peak during this run, not its lifetime one. A 32M run
 * after a 128M one was OOM-killed at 64M must not report "peak 64M". v1 can
 * only reset max_usage_in_bytes for every reader (status, watch), so it is
 * never reset: a lifetime peak that rose during the run is this run's; one
 * that did not leaves only the sampled usage, a lower bound.
 */
export function runPeak(f: RunPeakFacts): { bytes: number | null; basis: RunPeakBasis | null } {
  if (f.resetPeak !== null) return { bytes: f.resetPeak, basis: "reset" };
  if (f.lifetimeBefore !== null && f.lifetimeAfter !== null && f.lifetimeAfter > f.lifetimeBefore) return { bytes: f.lifetimeAfter, basis: "lifetime_peak_rose" };
  if (f.sampledMax !== null) return { bytes: f.sampledMax, basis: "sampled" };
  return { bytes: null, basis: null };
}

/**
 * An fd on v2 memory.peak reset for this run: since Linux 6.12 a write resets
 * the peak seen through that fd only, so no other reader loses the lifetime
 * value. Null on v1 and on older kernels (read-only file).
 */
function openResetPeak(limits: CgroupDir): number | null {
  if (limits.version !== 2) return null;
  let fd: number | null = null;
  try {
    fd = openSync(path.join(limits.dir, "memory.peak"), "r+");
    writeSync(fd, "reset\n");
    return fd;
  } catch {
    if (fd !== null) closeSync(fd);
    return null;
  }
}

function readResetPeak(fd: number | null, limits: CgroupDir): number | null {
  if (fd === null) return null;
  try {
    const buffer = Buffer.alloc(64);
    const n = readSync(fd, buffer, 0, buffer.length, 0);
    const parsed = parseCounter(buffer.subarray(0, n).toString("utf8"), path.join(limits.dir, "memory.peak"));
    return parsed.ok ? parsed.value : null;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

function readPsiSomeTotal(file: string | null): number | null {
  if (!file) return null;
  const text = readKernelText(file);
  if (!text.ok) return null;
  const psi = parsePsi(text.value, file);
  return psi.ok ? psi.value.some.total : null;
}

function readUsage(cgroup: WorkerCgroup): number | null {
  const file = path.join(cgroup.limits.dir, cgroup.limits.version === 2 ? "memory.current" : "memory.usage_in_bytes");
  const text = readKernelText(file);
  const parsed = text.ok ? parseCounter(text.value, file) : null;
  return parsed?.ok ? parsed.value : null;
}

/** True when `exited` settles within graceMs. Its timer goes with it: a hog that stops at once must not keep inject alive for the rest of the grace. */
export async function exitsWithin(exited: Promise<unknown>, graceMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([exited.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs)))]);
  } finally {
    clearTimeout(timer);
  }
}

export interface InjectDeps {
  /** Registers the stop signals' handling; returns the unregister function. Injectable for tests. */
  onSignal?: (handler: (signal: StopSignal) => void) => () => void;
  /** Finds the page toucher (default locatePageToucher); tests pick the python fallback. */
  locate?: () => PageToucherImpl;
}

export async function injectAction(globals: GlobalOptions, flags: InjectFlags, output: Output = consoleOutput(globals.color), deps: InjectDeps = {}): Promise<InjectReport> {
  const settings = parseInjectFlags(flags, readHostMemoryBytes(hostRoots(globals)));
  // The flag first: a bad --file-dir is wrong whatever state the cgroup is in.
  if (settings.mode === "thrash") checkThrashDir(settings.fileDir, settings.sizeBytes);
  const { roots, cgroup: computed } = resolveCgroupTarget(globals, flags);
  const { cgroup, forced } = requireReadyCgroup(roots, computed, globals.stateDir, flags, process.env);
  if (settings.mode === "anon") refuseOomKillDisabled(cgroup, "inject");
  if (forced) output.err(`drill inject: ${forcedJoinWarning(forced, cgroup, "inject")}`);
  const impl = (deps.locate ?? locatePageToucher)();
  // DESIGN: a marked weak fallback (the worker says it too).
  if (impl.kind === "python") output.err(`drill inject: pages faulted by the python fallback (${impl.script}; the C helper native/build/pagetoucher is not built: \`npm run build\` on a host with a C compiler): slower per page than the C helper, so the fill takes longer`);

  let file: string | null = null;
  if (settings.mode === "thrash") {
    file = path.join(settings.fileDir, `drill-hog-${cgroup.name}-${randomBytes(4).toString("hex")}.bin`);
  }
  const cmd = settings.mode === "anon"
    ? anonCommand(impl, { sizeBytes: settings.sizeBytes, holdMs: settings.holdMs })
    : thrashCommand(impl, { file: file!, sizeBytes: settings.sizeBytes, holdMs: settings.holdMs, order: "random" });

  const stateFile = newHogRecordFile(globals.stateDir, computed);
  const logFile = settings.detach ? stateFile.replace(/\.json$/, ".log") : null;
  const record: HogRecord = {
    kind: "drill-hog",
    cgroupKey: cgroupKey(computed),
    name: cgroup.name,
    mode: settings.mode,
    pid: null,
    startTime: null,
    file,
    logFile,
    sizeBytes: settings.sizeBytes,
    holdMs: settings.holdMs,
    detached: settings.detach,
    startedAt: new Date().toISOString(),
  };
  // Intent before the spawn: a crash right after still names the file to unlink.
  writeHogRecord(stateFile, record);

  const oomBefore = readOomKillCount(cgroup.limits);
  const memoryBefore = readCgroupMemory(cgroup.limits);
  const limit = memoryBefore.effectiveLimit;
  const fits = settings.mode === "thrash" ? thrashFitsNote(settings.sizeBytes, memoryBefore.usage, limit) : null;
  if (fits !== null) output.err(`drill inject: ${fits}`);
  const resetPeakFd = openResetPeak(cgroup.limits);
  let logFd: number | null = null;
  let child: ChildProcess;
  try {
    if (logFile) logFd = openOwnFile(logFile, "a");
    child = spawnInCgroup(cgroup, cmd.file, cmd.args, {
      // Own process group: a terminal's Ctrl-C reaches inject, which stops the hog itself.
      detached: true,
      stdio: logFd === null ? ["ignore", "pipe", "pipe"] : ["ignore", logFd, logFd],
    }, HOG_OOM_SCORE_ADJ);
  } catch (err) {
    removeHogRecord(stateFile);
    if (resetPeakFd !== null) closeSync(resetPeakFd);
    throw new DrillError(`cannot start the hog: ${(err as Error).message}`, undefined, { cause: err });
  } finally {
    if (logFd !== null) closeSync(logFd);
  }
  const pid = child.pid ?? null;
  const identity = pid === null ? null : readProcessStat(roots, pid);
  const startTime = identity?.ok ? identity.value.startTime : null;
  if (pid !== null) writeHogRecord(stateFile, { ...record, pid, startTime });

  const state = {
    touched: null as number | null,
    packed: null as number | null,
    passes: 0,
    joined: null as boolean | null,
    oomScoreAdj: null as number | null,
    interrupted: false,
    exitLine: null as string | null,
    packedAtMs: null as number | null,
    /** Highest cgroup usage read while the hog ran: a lower bound of this run's peak. */
    usageMax: null as number | null,
  };
  const noteUsage = (usage: number | null): void => {
    if (usage !== null && (state.usageMax === null || usage > state.usageMax)) state.usageMax = usage;
  };
  const startedAt = Date.now();
  let stderrTail = "";

  let resolvePacked: () => void = () => undefined;
  const packedPromise = new Promise<void>((resolve) => (resolvePacked = resolve));
  const onLine = (text: string): void => {
    const line: PageToucherLine = parsePageToucherLine(text);
    if (line.kind === "hello" && pid !== null) {
      // exec has happened, so the join has: the program is where it should be before its first page.
      state.joined = joinedUnlessGone(roots, { pid, startTime }, cgroup);
      const adj = readKernelText(roots.proc(String(pid), "oom_score_adj"));
      state.oomScoreAdj = adj.ok && /^-?\d+$/.test(adj.value.trim()) ? Number(adj.value.trim()) : null;
    } else if (line.kind === "touched") state.touched = line.bytes;
    else if (line.kind === "packed") {
      state.touched = line.bytes;
      state.packed = line.bytes;
      state.packedAtMs = Date.now() - startedAt;
      // Every page is touched now: usage is as high as the fill takes it.
      noteUsage(readUsage(cgroup));
      resolvePacked();
    } else if (line.kind === "pass") state.passes = line.passes;
    else if (line.kind === "exit") state.exitLine = line.reason;
  };
  let stopTail: () => void = () => undefined;
  if (logFile) {
    // Its log file, not a pipe: a detached hog's stdout must not die with us.
    stopTail = followLines(logFile, onLine);
  } else {
    createInterface({ input: child.stdout! }).on("line", onLine);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => (stderrTail = (stderrTail + chunk).slice(-2000)));
  }
  let exitedAtMs: number | null = null;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => {
      exitedAtMs = Date.now() - startedAt;
      resolve({ code, signal });
    });
    child.once("error", () => resolve({ code: null, signal: null }));
  });

  // One sample a second: touched, cgroup usage, stall % from the cgroup's own PSI total.
  const samples: StallSample[] = [];
  let prevTotal = readPsiSomeTotal(cgroup.pressureFile);
  let prevAt = Date.now();
  const sampler = setInterval(() => {
    const now = Date.now();
    const total = readPsiSomeTotal(cgroup.pressureFile);
    const stallPct = prevTotal !== null && total !== null ? stallRatePct(prevTotal, total, now - prevAt) : null;
    const prevAtBefore = prevAt;
    prevTotal = total;
    prevAt = now;
    const sample: StallSample = {
      tMs: now - startedAt,
      phase: samplePhase(state.packedAtMs, prevAtBefore - startedAt),
      touchedBytes: state.touched,
      cgUsageBytes: readUsage(cgroup),
      stallPct: stallPct === null ? null : Math.round(stallPct * 100) / 100,
    };
    samples.push(sample);
    noteUsage(sample.cgUsageBytes);
    output.err(
      `inject ${cgroup.name} ${settings.mode}: ${sample.phase} touched ${sample.touchedBytes === null ? "n/a" : formatBytes(sample.touchedBytes)}/${formatBytes(settings.sizeBytes)}` +
        `  cg ${formatBytes(sample.cgUsageBytes)}/${limit === null ? "n/a" : limit === "max" ? "max" : formatBytes(limit)}` +
        `  stall ${sample.stallPct === null ? "n/a" : `${sample.stallPct.toFixed(1)}%`}` +
        (settings.mode === "thrash" && state.passes > 0 ? `  pass ${state.passes}` : ""),
    );
  }, 1000);

  const stopHog = async (signal: StopSignal): Promise<void> => {
    state.interrupted = true;
    if (pid === null || startTime === null) return;
    // The hog stops on each as it would on the operator's own (HOG_STOP_SIGNALS), unlinking its file.
    signalVerified(roots, { pid, startTime }, signal);
    if (!(await exitsWithin(exited, TERM_GRACE_MS))) signalVerified(roots, { pid, startTime }, "SIGKILL");
  };
  let interruptedBy: StopSignal | null = null;
  const unregister = (deps.onSignal ?? onStopSignals)((signal) => {
    if (interruptedBy) return;
    interruptedBy = signal;
    void stopHog(signal);
  });

  let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  try {
    if (settings.detach) {
      const first = await Promise.race([packedPromise.then(() => "packed" as const), exited.then(() => "exited" as const)]);
      if (first === "exited") exit = await exited;
    } else {
      exit = await exited;
    }
  } finally {
    clearInterval(sampler);
    unregister();
    stopTail();
  }

  const oomAfter = readOomKillCount(cgroup.limits);
  const memory = readCgroupMemory(cgroup.limits);
  // A detached hog is still holding: what it reached so far is what it packed.
  const peak = runPeak({ resetPeak: readResetPeak(resetPeakFd, cgroup.limits), lifetimeBefore: memoryBefore.peak, lifetimeAfter: memory.peak, sampledMax: state.usageMax });
  let outcome: HogOutcome;
  let fileLeft: string | null = null;
  let recordLeft: string | null = null;
  if (exit === null) {
    // Detached and packed: the hog holds on by itself and exits after --hold.
    outcome = "packed";
    child.unref();
  } else {
    outcome = classifyHogExit({
      code: exit.code,
      signal: exit.signal,
      packedSeen: state.packed !== null,
      interrupted: state.interrupted,
      oomKillBefore: oomBefore.ok ? oomBefore.value : null,
      oomKillAfter: oomAfter.ok ? oomAfter.value : null,
    });
    // The hog unlinks its file on every exit but SIGKILL: finish its job.
    fileLeft = file === null ? null : unlinkLeftover(file);
    if (logFile) unlinkLeftover(logFile);
    // A file left keeps its record: teardown or rollback unlinks it once it can.
    if (fileLeft === null) recordLeft = removeHogRecord(stateFile);
  }

  const stall = summarizeStall(samples);
  // The counts read around this run say whether a SIGKILL was the OOM killer's (or a rollback's, a teardown's, a kill -9).
  const rose = oomKillRose(oomBefore.ok ? oomBefore.value : null, oomAfter.ok ? oomAfter.value : null);
  const exitInfo = exit ? { ...exit, description: describePageToucherExit(exit.code, exit.signal, rose) } : null;
  const report: InjectReport = {
    outcome,
    name: cgroup.name,
    mode: settings.mode,
    page_toucher: impl.kind === "native" ? "c" : "python-fallback",
    size_bytes: settings.sizeBytes,
    hold_ms: settings.holdMs,
    held_ms: exit !== null && state.packedAtMs !== null && exitedAtMs !== null ? Math.max(0, exitedAtMs - state.packedAtMs) : null,
    detached: settings.detach && exit === null,
    pid,
    start_time: startTime,
    joined: state.joined,
    oom_score_adj: state.oomScoreAdj,
    touched_bytes: state.touched,
    packed_bytes: state.packed,
    fill_ms: state.packedAtMs,
    passes: state.passes,
    cgroup: cgroup.limits.dir,
    cg_mem_max: memory.limit,
    cg_mem_max_effective: limit,
    cg_mem_peak: memory.peak,
    run_peak_bytes: peak.bytes,
    run_peak_basis: peak.basis,
    cg_oom_kill_before: oomBefore.ok ? oomBefore.value : null,
    cg_oom_kill_after: oomAfter.ok ? oomAfter.value : null,
    stall_rates_pct: samples.map((s) => s.stallPct),
    samples,
    stall,
    pressure_file: cgroup.pressureFile,
    file,
    file_left: fileLeft,
    state_file: exit === null || fileLeft !== null ? stateFile : null,
    exit: exitInfo,
    message: "",
  };
  report.message = describeOutcome(report, stderrTail);
  if (globals.json) output.json(snakeCaseKeys(report));
  else output.out(report.message);
  if (fileLeft !== null) output.err(`drill inject: could not unlink the hog's file ${file}: ${fileLeft}; its record ${stateFile} is kept: drill cgroup teardown unlinks it once it can be removed, or remove it yourself`);
  if (recordLeft !== null) output.err(`drill inject: the hog is done, but could not remove its record ${stateFile}: ${recordLeft}; drill cgroup teardown removes it once it can, or remove it yourself`);

  if (outcome === "interrupted") throw new InterruptedError(interruptedBy ?? "SIGINT");
  if (outcome === "failed") throw new DrillError(`hog failed: ${exitInfo?.description ?? "unknown"}`);
  // Not what was asked (exit 1), but not the hog's fault: said as a stop.
  if (outcome === "stopped") throw new DrillError(`hog stopped from outside: ${exitInfo?.description ?? "unknown"}`);
  return report;
}

/** "cgroup peak 32.2MiB this run", saying how it is known and never passing off the lifetime peak as this run's. */
export function describeRunPeak(r: Pick<InjectReport, "run_peak_bytes" | "run_peak_basis" | "cg_mem_peak">): string {
  if (r.run_peak_bytes === null) return `this run's peak unknown (cgroup lifetime peak ${formatBytes(r.cg_mem_peak)})`;
  if (r.run_peak_basis === "sampled") {
    return `cgroup peak ≥${formatBytes(r.run_peak_bytes)} this run (sampled; its lifetime peak ${formatBytes(r.cg_mem_peak)} is from before)`;
  }
  return `cgroup peak ${formatBytes(r.run_peak_bytes)} this run`;
}

/**
 * The hold as it was: a hog SIGSTOPped for 21 s of a 25 s hold held 46 s (QA:
 * "held 25s"). Up to a second over what was asked, the asked figure.
 */
function heldText(r: InjectReport): string {
  if (r.held_ms === null || r.held_ms - r.hold_ms < 1000) return formatDuration(r.hold_ms);
  return `${(r.held_ms / 1000).toFixed(1)} s (asked ${formatDuration(r.hold_ms)}: the hog was stopped or starved meanwhile)`;
}

/** A touched figure for the text: unknown before the hog's first progress line, never "0B". */
const touchedText = (bytes: number | null): string => (bytes === null ? "an unknown size" : formatBytes(bytes));

export function describeOutcome(r: InjectReport, stderrTail = ""): string {
  const oom = `cgroup oom_kill ${r.cg_oom_kill_before ?? "n/a"} → ${r.cg_oom_kill_after ?? "n/a"}`;
  const stall = r.stall.holdMedianPct === null
    ? ""
    : `; cgroup stall during the hold: median ${r.stall.holdMedianPct.toFixed(1)}%, ≥${r.stall.thresholdPct}% in ${r.stall.holdSecondsOver}/${r.stall.holdSeconds} whole s of it`;
  // The second the fill ended in counts as fill: a hold of N s has N - 1 whole seconds of its own.
  const filled = r.fill_ms === null ? "" : ` in ${(r.fill_ms / 1000).toFixed(1)} s`;
  switch (r.outcome) {
    case "packed":
      return r.detached
        ? `packed: ${formatBytes(r.packed_bytes)} touched in ${r.cgroup}; hog pid ${r.pid} holds for ${formatDuration(r.hold_ms)} and exits by itself (record ${r.state_file})`
        : `packed: ${formatBytes(r.packed_bytes)} touched${filled} and held ${heldText(r)}; ${describeRunPeak(r)}; ${oom}${stall}`;
    case "oom_killed": {
      // Progress lines come every 100 ms; an anonymous fill can hit the limit before the first.
      const exactPeak = r.run_peak_bytes !== null && r.run_peak_basis !== "sampled";
      const at = r.touched_bytes !== null && r.touched_bytes > 0
        ? formatBytes(r.touched_bytes)
        : exactPeak ? `about ${formatBytes(r.run_peak_bytes)} (this run's cgroup peak)` : "an unknown size (before its first progress line)";
      const limit = r.cg_mem_max_effective === null ? "n/a" : r.cg_mem_max_effective === "max" ? "max" : formatBytes(r.cg_mem_max_effective);
      // Exit 0 all the same: RELIABILITY 4, the anon drill's expected outcome, not a tool failure.
      return `oom_killed: OOM-killed at ${at} of ${formatBytes(r.size_bytes)} (cgroup limit ${limit}); pid ${r.pid}; ${oom}. Admission was already late.`;
    }
    case "interrupted":
      return `interrupted: hog pid ${r.pid} stopped after ${touchedText(r.touched_bytes)}${r.file ? `; ${r.file} unlinked` : ""}`;
    case "stopped":
      return `stopped: hog pid ${r.pid} stopped from outside after ${touchedText(r.touched_bytes)} touched (${r.exit?.description ?? "no exit status"}): a rollback or cgroup teardown stops the cgroup's processes, or a kill by hand`;
    case "failed": {
      const join = r.exit?.code === JOIN_FAILED_EXIT ? " (the hog never ran: it could not join the cgroup)" : "";
      const err = stderrTail.trim() === "" ? "" : ` — ${stderrTail.trim().split("\n").slice(-2).join(" | ")}`;
      return `failed: hog ${r.exit?.description ?? "did not start"}${join}${err}`;
    }
  }
}
