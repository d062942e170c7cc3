import { closeSync, existsSync, openSync, readSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { createInterface } from "node:readline";
import type { ChildProcess } from "node:child_process";
import { DrillError, InterruptedError, RefusedError, UsageError } from "../errors.js";
import type { GlobalOptions } from "../context.js";
import { readKernelText } from "../host/kernelFile.js";
import { parsePsi, stallRatePct } from "../host/psi.js";
import { consoleOutput, type Output } from "../output.js";
import { formatBytes, formatDuration, parseDuration, parseSize } from "../units.js";
import { checkThrashDir, classifyHogExit, summarizeStall, type HogMode, type HogOutcome, type StallSample, type StallSummary } from "../cgroup/hog.js";
import { spawnInCgroup, verifyJoined, JOIN_FAILED_EXIT } from "../cgroup/join.js";
import { parseCounter, readCgroupMemory, readOomKillCount } from "../cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { cgroupKey, newHogRecordFile, removeHogRecord, writeHogRecord, type HogRecord } from "../cgroup/stateFiles.js";
import { resolveCgroupTarget } from "../cgroup/target.js";
import { signalVerified } from "../cgroup/tasks.js";
import { readProcessStat } from "../host/process.js";
import { markedWorkerCgroup } from "../cgroup/teardown.js";
import { anonCommand, describePageToucherExit, locatePageToucher, parsePageToucherLine, thrashCommand, type PageToucherLine } from "../native/pagetoucher.js";
import type { InjectFlags } from "./inject.js";

/** The outcome document (`--json` prints it as is). */
export interface InjectReport {
  outcome: HogOutcome;
  name: string;
  mode: HogMode;
  size_bytes: number;
  hold_ms: number;
  detached: boolean;
  pid: number | null;
  start_time: number | null;
  /** The hog's first output line came from inside every dir of the cgroup (checked in /proc/<pid>/cgroup). */
  joined: boolean | null;
  touched_bytes: number;
  packed_bytes: number | null;
  passes: number;
  cgroup: string;
  cg_mem_max: number | "max" | null;
  cg_mem_peak: number | null;
  cg_oom_kill_before: number | null;
  cg_oom_kill_after: number | null;
  /** Per-second stall % from the cgroup's own memory.pressure `some total` deltas. */
  stall_rates_pct: Array<number | null>;
  samples: StallSample[];
  stall: StallSummary;
  pressure_file: string | null;
  file: string | null;
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

export function parseInjectFlags(flags: InjectFlags): InjectSettings {
  if (flags.mode !== "anon" && flags.mode !== "thrash") throw new UsageError(`--mode: "${flags.mode}" is not anon or thrash`);
  const sizeBytes = parseSize(flags.size, "--size");
  if (sizeBytes < 4096) throw new UsageError(`--size: ${flags.size} is less than one page`);
  return { mode: flags.mode, sizeBytes, holdMs: parseDuration(flags.hold, "--hold"), detach: flags.detach === true, fileDir: flags.fileDir };
}

/** The cgroup inject may use: drill's dirs (marker first), all present, with a limit, or a refusal naming why. */
function requireReadyCgroup(computed: WorkerCgroup, stateDir: string): WorkerCgroup {
  const cgroup = markedWorkerCgroup(computed, stateDir) ?? computed;
  const absent = cgroup.dirs.filter((d) => !existsSync(d.dir)).map((d) => d.dir);
  if (absent.length > 0) {
    throw new DrillError(`cgroup ${cgroup.name} is not set up: no ${absent.join(", no ")}; run drill cgroup setup --name ${cgroup.name} first`);
  }
  const memory = readCgroupMemory(cgroup.limits);
  if (memory.effectiveLimit === null) {
    throw new DrillError(`cannot read the memory limit of ${cgroup.limits.dir}: ${memory.missing.map((m) => `${m.file} ${m.reason}`).join("; ")}`);
  }
  if (memory.effectiveLimit === "max") {
    throw new RefusedError(`${cgroup.limits.dir} has no memory limit (nor has any ancestor): the hog would pressure the whole host; run drill cgroup setup --memory-max first`);
  }
  return cgroup;
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

/** Follows a detached hog's log file line by line (its stdout must not be a pipe that dies with us). */
function tailLines(file: string, onLine: (line: string) => void): () => void {
  let offset = 0;
  let partial = "";
  const buffer = Buffer.alloc(64 * 1024);
  const poll = (): void => {
    let fd: number;
    try {
      fd = openSync(file, "r");
    } catch {
      return;
    }
    try {
      for (;;) {
        const n = readSync(fd, buffer, 0, buffer.length, offset);
        if (n <= 0) break;
        offset += n;
        partial += buffer.subarray(0, n).toString("utf8");
        const lines = partial.split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) onLine(line);
      }
    } finally {
      closeSync(fd);
    }
  };
  const timer = setInterval(poll, 100);
  return () => {
    clearInterval(timer);
    poll();
  };
}

export interface InjectDeps {
  /** Registers SIGINT/SIGTERM handling; returns the unregister function. Injectable for tests. */
  onSignal?: (handler: (signal: "SIGINT" | "SIGTERM") => void) => () => void;
}

const processSignals = (handler: (signal: "SIGINT" | "SIGTERM") => void): (() => void) => {
  const onInt = (): void => handler("SIGINT");
  const onTerm = (): void => handler("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  return () => {
    process.off("SIGINT", onInt);
    process.off("SIGTERM", onTerm);
  };
};

export async function injectAction(globals: GlobalOptions, flags: InjectFlags, output: Output = consoleOutput(globals.color), deps: InjectDeps = {}): Promise<InjectReport> {
  const settings = parseInjectFlags(flags);
  const { roots, cgroup: computed } = resolveCgroupTarget(globals, flags);
  const cgroup = requireReadyCgroup(computed, globals.stateDir);
  const impl = locatePageToucher();

  let file: string | null = null;
  if (settings.mode === "thrash") {
    checkThrashDir(settings.fileDir, settings.sizeBytes);
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
  const limit = readCgroupMemory(cgroup.limits).effectiveLimit;
  let logFd: number | null = null;
  let child: ChildProcess;
  try {
    if (logFile) logFd = openSync(logFile, "a", 0o600);
    child = spawnInCgroup(cgroup, cmd.file, cmd.args, {
      // Own process group: a terminal's Ctrl-C reaches inject, which stops the hog itself.
      detached: true,
      stdio: logFd === null ? ["ignore", "pipe", "pipe"] : ["ignore", logFd, logFd],
    });
  } catch (err) {
    removeHogRecord(stateFile);
    throw new DrillError(`cannot start the hog: ${(err as Error).message}`, undefined, { cause: err });
  } finally {
    if (logFd !== null) closeSync(logFd);
  }
  const pid = child.pid ?? null;
  const identity = pid === null ? null : readProcessStat(roots, pid);
  const startTime = identity?.ok ? identity.value.startTime : null;
  if (pid !== null) writeHogRecord(stateFile, { ...record, pid, startTime });

  const state = {
    touched: 0,
    packed: null as number | null,
    passes: 0,
    joined: null as boolean | null,
    interrupted: false,
    exitLine: null as string | null,
    packedAtMs: null as number | null,
  };
  const startedAt = Date.now();
  let stderrTail = "";

  let resolvePacked: () => void = () => undefined;
  const packedPromise = new Promise<void>((resolve) => (resolvePacked = resolve));
  const onLine = (text: string): void => {
    const line: PageToucherLine = parsePageToucherLine(text);
    if (line.kind === "hello" && pid !== null) {
      // exec has happened, so the join has: the program is where it should be before its first page.
      state.joined = verifyJoined(roots, pid, cgroup).joined;
    } else if (line.kind === "touched") state.touched = line.bytes;
    else if (line.kind === "packed") {
      state.touched = line.bytes;
      state.packed = line.bytes;
      state.packedAtMs = Date.now() - startedAt;
      resolvePacked();
    } else if (line.kind === "pass") state.passes = line.passes;
    else if (line.kind === "exit") state.exitLine = line.reason;
  };
  let stopTail: () => void = () => undefined;
  if (logFile) {
    stopTail = tailLines(logFile, onLine);
  } else {
    createInterface({ input: child.stdout! }).on("line", onLine);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => (stderrTail = (stderrTail + chunk).slice(-2000)));
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
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
    prevTotal = total;
    prevAt = now;
    const sample: StallSample = {
      tMs: now - startedAt,
      phase: state.packed === null ? "fill" : "hold",
      touchedBytes: state.touched,
      cgUsageBytes: readUsage(cgroup),
      stallPct: stallPct === null ? null : Math.round(stallPct * 100) / 100,
    };
    samples.push(sample);
    output.err(
      `inject ${cgroup.name} ${settings.mode}: ${sample.phase} touched ${formatBytes(sample.touchedBytes)}/${formatBytes(settings.sizeBytes)}` +
        `  cg ${formatBytes(sample.cgUsageBytes)}/${limit === null ? "n/a" : limit === "max" ? "max" : formatBytes(limit)}` +
        `  stall ${sample.stallPct === null ? "n/a" : `${sample.stallPct.toFixed(1)}%`}` +
        (settings.mode === "thrash" && state.passes > 0 ? `  pass ${state.passes}` : ""),
    );
  }, 1000);

  const stopHog = async (signal: "SIGINT" | "SIGTERM"): Promise<void> => {
    state.interrupted = true;
    if (pid === null || startTime === null) return;
    signalVerified(roots, { pid, startTime }, signal === "SIGINT" ? "SIGINT" : "SIGTERM");
    const graceful = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 3000))]);
    if (!graceful) signalVerified(roots, { pid, startTime }, "SIGKILL");
  };
  let interruptedBy: "SIGINT" | "SIGTERM" | null = null;
  const unregister = (deps.onSignal ?? processSignals)((signal) => {
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
  let outcome: HogOutcome;
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
    if (file) rmSync(file, { force: true });
    if (logFile) rmSync(logFile, { force: true });
    removeHogRecord(stateFile);
  }

  const stall = summarizeStall(samples);
  const exitInfo = exit ? { ...exit, description: describePageToucherExit(exit.code, exit.signal) } : null;
  const report: InjectReport = {
    outcome,
    name: cgroup.name,
    mode: settings.mode,
    size_bytes: settings.sizeBytes,
    hold_ms: settings.holdMs,
    detached: settings.detach && exit === null,
    pid,
    start_time: startTime,
    joined: state.joined,
    touched_bytes: state.touched,
    packed_bytes: state.packed,
    passes: state.passes,
    cgroup: cgroup.limits.dir,
    cg_mem_max: memory.limit,
    cg_mem_peak: memory.peak,
    cg_oom_kill_before: oomBefore.ok ? oomBefore.value : null,
    cg_oom_kill_after: oomAfter.ok ? oomAfter.value : null,
    stall_rates_pct: samples.map((s) => s.stallPct),
    samples,
    stall,
    pressure_file: cgroup.pressureFile,
    file,
    state_file: exit === null ? stateFile : null,
    exit: exitInfo,
    message: "",
  };
  report.message = describeOutcome(report, stderrTail);
  if (globals.json) output.json(report);
  else output.out(report.message);

  if (outcome === "interrupted") throw new InterruptedError(interruptedBy ?? "SIGINT");
  if (outcome === "failed") throw new DrillError(`hog failed: ${exitInfo?.description ?? "unknown"}`);
  return report;
}

function describeOutcome(r: InjectReport, stderrTail: string): string {
  const oom = `cgroup oom_kill ${r.cg_oom_kill_before ?? "n/a"} → ${r.cg_oom_kill_after ?? "n/a"}`;
  const stall = r.stall.holdMedianPct === null
    ? ""
    : `; cgroup stall during the hold: median ${r.stall.holdMedianPct.toFixed(1)}%, ≥${r.stall.thresholdPct}% in ${r.stall.holdSecondsOver}/${r.stall.holdSeconds} s`;
  switch (r.outcome) {
    case "packed":
      return r.detached
        ? `packed: ${formatBytes(r.packed_bytes)} touched in ${r.cgroup}; hog pid ${r.pid} holds for ${formatDuration(r.hold_ms)} and exits by itself (record ${r.state_file})`
        : `packed: ${formatBytes(r.packed_bytes)} touched and held ${formatDuration(r.hold_ms)}; peak ${formatBytes(r.cg_mem_peak)}; ${oom}${stall}`;
    case "oom_killed":
      // Progress lines come every 100 ms; an anonymous fill can hit the limit before the first.
      return `oom_killed: pid ${r.pid} killed by the OOM killer after ${r.touched_bytes > 0 ? formatBytes(r.touched_bytes) : `about ${formatBytes(r.cg_mem_peak)} (cgroup peak)`} of ${formatBytes(r.size_bytes)}; ${oom}. Admission was already late.`;
    case "interrupted":
      return `interrupted: hog pid ${r.pid} stopped after ${formatBytes(r.touched_bytes)}${r.file ? `; ${r.file} unlinked` : ""}`;
    case "failed": {
      const join = r.exit?.code === JOIN_FAILED_EXIT ? " (the hog never ran: it could not join the cgroup)" : "";
      const err = stderrTail.trim() === "" ? "" : ` — ${stderrTail.trim().split("\n").slice(-2).join(" | ")}`;
      return `failed: hog ${r.exit?.description ?? "did not start"}${join}${err}`;
    }
  }
}
