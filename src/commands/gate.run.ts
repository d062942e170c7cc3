import os from "node:os";
import { writeDocument, writeErr, writeOut } from "../closedStdout.js";
import { commandRedisUrl, hostRoots, type GlobalOptions } from "../context.js";
import { validateCgroupName, validateParent } from "../cgroup/names.js";
import { InterruptedError, RefusedError, UsageError } from "../errors.js";
import { readHostPsi } from "../host/psi.js";
import { gateStartLine, gateStoppedLine, runGate, type GateOptions } from "../gate/loop.js";
import { onInterrupt } from "../interrupt.js";
import { defaultAdmissionConfig, formatPsi, MIN_GATE_INTERVAL_MS, previousModeText, leverAction, type AdmissionConfig, type GateMode } from "../gate/policy.js";
import type { WorkerCgroupProbe } from "../gate/signals.js";
import { gateSignalsHint, resolveWorkerProbe } from "../gate/workerCgroup.js";
import { MAX_JOB_ATTEMPT } from "../queue/job.js";
import { validateKeyPart, validateQueueName } from "../queue/keys.js";
import { gateModeOf, modeValueField, modeWarning } from "../queue/mode.js";
import { DrillQueue } from "../queue/queue.js";
import { closeRedis, connectRedis } from "../queue/redis.js";
import { parseDuration, parsePositiveDuration, parsePsiLimit, parsePercent, parsePositiveInt, parseWholeNumber } from "../units.js";
import type { GateModeFlags, RawGateOptions } from "./gate.js";

/**
 * A nack carries attempt + 1, and a job's attempt is at most MAX_JOB_ATTEMPT:
 * a larger budget would nack attempt 1001, a job any later gate sends to dead
 * as invalid (QA). At most that, a job past it goes to dead as past the budget.
 */
function parseRetryBudget(text: string): number {
  const budget = parseWholeNumber(text, "--retry-budget");
  if (budget > MAX_JOB_ATTEMPT) {
    throw new UsageError(`--retry-budget: "${text}" must be at most ${MAX_JOB_ATTEMPT} (a job's attempt is at most ${MAX_JOB_ATTEMPT}, and each retry adds one to it)`);
  }
  return budget;
}

/** Which worker cgroup the gate should watch, as the user named it. */
export interface WorkerCgroupTarget {
  name: string;
  /** `self`, a path, or undefined for the hierarchy's root. */
  parent: string | undefined;
  /** An explicit memory.pressure file (--cgroup-pressure), when given. */
  pressureFile: string | undefined;
}

/**
 * Seam for the cgroup module: turns the target into a probe of the worker
 * cgroup's PSI and swap. Returning null means "no worker cgroup": the gate
 * then decides on host signals alone (absence is not a reason to fail closed).
 */
export type WorkerCgroupResolver = (target: WorkerCgroupTarget, globals: GlobalOptions) => WorkerCgroupProbe | null;

/** --cgroup-pressure if given, else the cgroup --name/--parent name (drill's record of it first). */
export const cgroupModuleResolver: WorkerCgroupResolver = (target, globals) => resolveWorkerProbe(hostRoots(globals), globals.stateDir, target);

export function defaultGateId(): string {
  const host = os.hostname().replace(/[^A-Za-z0-9_.-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 60) || "host";
  return `${host}-${process.pid}`;
}

export function resolveGateOptions(raw: RawGateOptions, json: boolean): { options: GateOptions; target: WorkerCgroupTarget } {
  const intervalMs = parseDuration(raw.interval, "--interval");
  if (intervalMs < MIN_GATE_INTERVAL_MS) throw new UsageError(`--interval: "${raw.interval}" is too short (at least ${MIN_GATE_INTERVAL_MS}ms)`);
  const config: AdmissionConfig = {
    ...defaultAdmissionConfig,
    psiLimit: parsePsiLimit(raw.psiLimit, "--psi-limit"),
    psiRateLimit: parsePercent(raw.psiRateLimit, "--psi-rate-limit"),
    slackLimitMs: parseDuration(raw.slackLimit, "--slack-limit"),
    packedTokenLimit: parsePositiveInt(raw.packedTokenLimit, "--packed-token-limit"),
    intervalMs,
    pressureClearMs: parseDuration(raw.pressureClear, "--pressure-clear"),
  };
  const options: GateOptions = {
    queue: validateQueueName(raw.queue),
    gateId: validateKeyPart(raw.gateId ?? defaultGateId(), "--gate-id"),
    config,
    retryHostClass: validateKeyPart(raw.retryHostClass, "--retry-host-class"),
    retryBudget: parseRetryBudget(raw.retryBudget),
    dryRun: raw.dryRun,
    maxJobs: raw.maxJobs === undefined ? null : parsePositiveInt(raw.maxJobs, "--max-jobs"),
    idleExitMs: raw.idleExit === undefined ? null : parsePositiveDuration(raw.idleExit, "--idle-exit"),
    json,
  };
  // A typo here must not leave the gate deciding on host signals alone: exit 2 naming the flag.
  validateCgroupName(raw.name);
  validateParent(raw.parent);
  return { options, target: { name: raw.name, parent: raw.parent, pressureFile: raw.cgroupPressure } };
}

export async function gateAction(g: GlobalOptions, raw: RawGateOptions, resolveWorkerCgroup: WorkerCgroupResolver = cgroupModuleResolver): Promise<void> {
  const { options, target } = resolveGateOptions(raw, g.json);
  const lifetimeMs = raw.duration === undefined ? null : parsePositiveDuration(raw.duration, "--duration");
  // Listening before the first await: a stop while the URL is chosen is the gate's stop, said as such.
  const interrupt = onInterrupt();
  const redisUrl = await commandRedisUrl(g, { queue: options.queue, cgroupName: target.name });
  // A detached gate stops by itself: a forgotten drill must not admit forever.
  // An explicit timer, not AbortSignal.timeout(): inside AbortSignal.any()
  // Node holds that signal weakly, and once collected it never fires.
  const lifetime = new AbortController();
  const lifetimeTimer = lifetimeMs === null ? null : setTimeout(() => lifetime.abort(), lifetimeMs);
  const signal = AbortSignal.any([interrupt.signal, lifetime.signal]);
  const hint = gateSignalsHint(hostRoots(g), g.stateDir, target);
  if (hint !== null) writeErr(`${hint}\n`);
  try {
    const summary = await runGate(options, {
      redisUrl,
      roots: hostRoots(g),
      workerCgroup: resolveWorkerCgroup(target, g),
      // Under --json each line is a decision's JSON document.
      out: (line) => (options.json ? writeDocument : writeOut)(`${line}\n`),
      err: (line) => writeErr(`${line}\n`),
      signal,
      crashAt: process.env.DRILL_CRASH_AT,
      onConnected: () => writeErr(`${gateStartLine(options, redisUrl)}\n`),
    });
    // The signal by name (QA: SIGINT and SIGTERM both read "signal"); --duration is the gate's own end.
    const why = summary.stoppedBy !== "signal" ? summary.stoppedBy : (interrupt.received() ?? (lifetime.signal.aborted ? "duration" : "signal"));
    writeErr(`${gateStoppedLine(options.gateId, summary, why)}\n`);
  } finally {
    interrupt.dispose();
    if (lifetimeTimer) clearTimeout(lifetimeTimer);
  }
  const received = interrupt.received();
  if (received) throw new InterruptedError(received);
}

export async function gateModeAction(g: GlobalOptions, modeText: string, flags: GateModeFlags): Promise<void> {
  if (modeText !== "admit" && modeText !== "reject_all") throw new UsageError(`mode: "${modeText}" is not admit or reject_all`);
  const mode: GateMode = modeText;
  const queueName = validateQueueName(flags.queue);
  // The lever must move the drill's own queue: never a guess at the default Redis while a drill is up.
  const redisUrl = await commandRedisUrl(g, { queue: queueName });
  const psi = readHostPsi(hostRoots(g), "memory");
  const psiText = psi.ok ? `avg10=${formatPsi(psi.value.some.avg10)} avg60=${formatPsi(psi.value.some.avg60)}` : `missing (${psi.file}: ${psi.reason})`;
  const calm = psi.ok && psi.value.some.avg10 < 1 && psi.value.some.avg60 < 1;
  const refusal = `refusing to re-admit: host memory PSI ${psiText}; re-admit only after avg10 and avg60 stay under 1.00 (--force overrides)`;
  const redis = await connectRedis(redisUrl, { name: "drill-gate-mode" });
  try {
    const queue = new DrillQueue(redis, queueName);
    // Under pressure the lever is read first: one already admitting is said, not refused.
    if (mode === "admit" && !calm && !flags.force) {
      const stored = await queue.readMode();
      const current = stored.type === "none" ? null : gateModeOf(stored);
      const action = leverAction(mode, { calm, force: false, current });
      if (action === "refuse") throw new RefusedError(refusal);
      if (action === "already_admit") {
        const line = `mode admit queue=${queueName} previous=${previousModeText(current)} unchanged: already admit; psi ${psiText} (over 1.00: a flip from reject_all would be refused)`;
        const json = { mode, queue: queueName, previous: current, unchanged: true, forced: false, psi: psi.ok ? psi.value.some : null };
        if (g.json) writeDocument(`${JSON.stringify(json)}\n`);
        else writeOut(`${line}\n`);
        return;
      }
    }
    const forced = mode === "admit" && !calm;
    const psiAvg60 = forced && psi.ok ? formatPsi(psi.value.some.avg60) : undefined;
    const flip = await queue.flipMode(mode, { forced, psi: psi.ok ? formatPsi(psi.value.some.avg10) : "missing", psiAvg60, by: "gate_mode" });
    const previous = flip.previous.type === "none" ? null : gateModeOf(flip.previous);
    if (forced) writeErr(`drill: forced re-admit while host memory PSI is ${psiText} (over 1.00)\n`);
    // The lever moved whatever the key held; say what that was when it was no mode (the gate read it as reject_all).
    const mistake = modeWarning(queue.keys.mode, flip.previous, "the gate read it as reject_all; overwritten");
    if (mistake !== null) writeErr(`drill: ${mistake}\n`);
    if (!flip.recorded) writeErr(`drill: ${queue.keys.events} is not a stream: this flip is not recorded there\n`);
    const field = modeValueField(flip.previous);
    const line = `mode ${mode} queue=${queueName} previous=${previousModeText(previous)}${field === null ? "" : ` previous_${field}`} psi ${psiText}${forced ? " forced=1" : ""}`;
    const json = { mode, queue: queueName, previous, ...(mistake === null ? {} : { previous_stored: flip.previous }), forced, psi: psi.ok ? psi.value.some : null };
    if (g.json) writeDocument(`${JSON.stringify(json)}\n`);
        else writeOut(`${line}\n`);
  } finally {
    await closeRedis(redis);
  }
}
