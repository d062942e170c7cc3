import os from "node:os";
import { Command } from "commander";
import { hostRoots, type GlobalOptions } from "../context.js";
import { InterruptedError, RefusedError, UsageError } from "../errors.js";
import { readHostPsi } from "../host/psi.js";
import { runGate, type GateOptions } from "../gate/loop.js";
import { onInterrupt } from "../interrupt.js";
import { defaultAdmissionConfig, formatPsi, type AdmissionConfig, type GateMode } from "../gate/policy.js";
import type { WorkerCgroupProbe } from "../gate/signals.js";
import { resolveWorkerProbe } from "../gate/workerCgroup.js";
import { validateKeyPart } from "../queue/keys.js";
import { DrillQueue } from "../queue/queue.js";
import { closeRedis, connectRedis, DEFAULT_REDIS_URL } from "../queue/redis.js";
import { parseDuration, parseNumber, parsePositiveInt } from "../units.js";
import type { CommandFactory } from "./index.js";

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

interface RawGateOptions {
  queue: string;
  name: string;
  parent?: string;
  cgroupPressure?: string;
  psiLimit: string;
  psiRateLimit: string;
  slackLimit: string;
  packedTokenLimit: string;
  interval: string;
  pressureClear: string;
  retryHostClass: string;
  retryBudget: string;
  gateId?: string;
  dryRun: boolean;
  maxJobs?: string;
  idleExit?: string;
  duration?: string;
}

export function defaultGateId(): string {
  const host = os.hostname().replace(/[^A-Za-z0-9_.-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 60) || "host";
  return `${host}-${process.pid}`;
}

export function resolveGateOptions(raw: RawGateOptions, json: boolean): { options: GateOptions; target: WorkerCgroupTarget } {
  const intervalMs = parseDuration(raw.interval, "--interval");
  if (intervalMs < 50) throw new UsageError(`--interval: "${raw.interval}" is too short (at least 50ms)`);
  const config: AdmissionConfig = {
    ...defaultAdmissionConfig,
    psiLimit: parseNumber(raw.psiLimit, "--psi-limit"),
    psiRateLimit: parseNumber(raw.psiRateLimit, "--psi-rate-limit"),
    slackLimitMs: parseDuration(raw.slackLimit, "--slack-limit"),
    packedTokenLimit: parsePositiveInt(raw.packedTokenLimit, "--packed-token-limit"),
    intervalMs,
    pressureClearMs: parseDuration(raw.pressureClear, "--pressure-clear"),
  };
  if (config.psiRateLimit > 100) throw new UsageError(`--psi-rate-limit: "${raw.psiRateLimit}" is a percentage (0-100)`);
  const options: GateOptions = {
    queue: validateKeyPart(raw.queue, "--queue"),
    gateId: validateKeyPart(raw.gateId ?? defaultGateId(), "--gate-id"),
    config,
    retryHostClass: validateKeyPart(raw.retryHostClass, "--retry-host-class"),
    retryBudget: parsePositiveInt(raw.retryBudget, "--retry-budget"),
    dryRun: raw.dryRun,
    maxJobs: raw.maxJobs === undefined ? null : parsePositiveInt(raw.maxJobs, "--max-jobs"),
    idleExitMs: raw.idleExit === undefined ? null : parseDuration(raw.idleExit, "--idle-exit"),
    json,
  };
  return { options, target: { name: raw.name, parent: raw.parent, pressureFile: raw.cgroupPressure } };
}

export function gateCommandWith(resolveWorkerCgroup: WorkerCgroupResolver): CommandFactory {
  return (globals) => {
    const gate = new Command("gate")
      .description("the admission daemon (admitd): admit or reject each job before reclaim steals its deadline; `gate mode admit|reject_all` flips the lever")
      .option("--queue <name>", "Redis queue name", "jobs")
      .option("--name <cgroup>", "worker cgroup name", "infer")
      .option("--parent <path>", "parent of the worker cgroup: a path or `self` (default: the hierarchy's root)")
      .option("--cgroup-pressure <file>", "the worker cgroup's memory.pressure file (missing: host signals only)")
      .option("--psi-limit <n>", "reject when psi_mem_some_avg10 is over this", "10")
      .option("--psi-rate-limit <pct>", "reject when the stall rate over 3 s is over this %", "10")
      .option("--slack-limit <duration>", "reject when deadline slack is under this", "1500ms")
      .option("--packed-token-limit <n>", "cap on in-flight packed prompt tokens", "32000")
      .option("--interval <duration>", "the gate's own sampling interval", "1s")
      .option("--pressure-clear <duration>", "host pressure clears only after this long below half the limits", "5s")
      .option("--retry-host-class <class>", "where nacked jobs go (never back to the queue)", "dedicated")
      .option("--retry-budget <n>", "attempts before a job goes to the dead list", "3")
      .option("--gate-id <id>", "this gate's id (default: <hostname>-<pid>)")
      .option("--dry-run", "decide and log the queue as it stands, move nothing", false)
      .option("--max-jobs <n>", "stop after deciding this many jobs")
      .option("--idle-exit <duration>", "stop after this long without a job")
      .option("--duration <duration>", "stop after this long, whatever happens (detached gates exit by themselves)")
      .action(async (raw: RawGateOptions) => {
        const g = globals();
        const { options, target } = resolveGateOptions(raw, g.json);
        const lifetimeMs = raw.duration === undefined ? null : parseDuration(raw.duration, "--duration");
        const interrupt = onInterrupt();
        // A detached gate stops by itself: a forgotten drill must not admit forever.
        // An explicit timer, not AbortSignal.timeout(): inside AbortSignal.any()
        // Node holds that signal weakly, and once collected it never fires.
        const lifetime = new AbortController();
        const lifetimeTimer = lifetimeMs === null ? null : setTimeout(() => lifetime.abort(), lifetimeMs);
        const signal = AbortSignal.any([interrupt.signal, lifetime.signal]);
        try {
          await runGate(options, {
            redisUrl: g.redisUrl ?? DEFAULT_REDIS_URL,
            roots: hostRoots(g),
            workerCgroup: resolveWorkerCgroup(target, g),
            out: (line) => process.stdout.write(`${line}\n`),
            err: (line) => process.stderr.write(`${line}\n`),
            signal,
            crashAt: process.env.DRILL_CRASH_AT,
          });
        } finally {
          interrupt.dispose();
          if (lifetimeTimer) clearTimeout(lifetimeTimer);
        }
        const received = interrupt.received();
        if (received) throw new InterruptedError(received);
      });

    gate.addCommand(
      new Command("mode")
        .description("flip the lever: reject_all denies every job; admit refuses unless host PSI avg10 and avg60 are under 1.00")
        .argument("<mode>", "admit | reject_all")
        .option("--force", "re-admit even under pressure (says so)", false)
        .option("--queue <name>", "Redis queue name", "jobs")
        .action(async (modeText: string, raw: { force: boolean; queue: string }) => {
          if (modeText !== "admit" && modeText !== "reject_all") throw new UsageError(`mode: "${modeText}" is not admit or reject_all`);
          const g = globals();
          const mode: GateMode = modeText;
          // The root program does not use positional options, so `gate mode x --queue q`
          // hands --queue to `gate`: take whichever of the two the user actually gave.
          const own = gate.commands.find((c) => c.name() === "mode")?.getOptionValueSource("queue") === "cli";
          const queueName = validateKeyPart(own ? raw.queue : (gate.opts() as { queue: string }).queue, "--queue");
          const psi = readHostPsi(hostRoots(g), "memory");
          const psiText = psi.ok ? `avg10=${formatPsi(psi.value.some.avg10)} avg60=${formatPsi(psi.value.some.avg60)}` : `missing (${psi.file}: ${psi.reason})`;
          const calm = psi.ok && psi.value.some.avg10 < 1 && psi.value.some.avg60 < 1;
          if (mode === "admit" && !calm && !raw.force) {
            throw new RefusedError(`refusing to re-admit: host memory PSI ${psiText}; re-admit only after avg10 and avg60 stay under 1.00 (--force overrides)`);
          }
          const redis = await connectRedis(g.redisUrl ?? DEFAULT_REDIS_URL, { name: "drill-gate-mode" });
          try {
            const queue = new DrillQueue(redis, queueName);
            const forced = mode === "admit" && !calm;
            const previous = await queue.setMode(mode, { forced, psi: psi.ok ? formatPsi(psi.value.some.avg10) : "missing" });
            if (forced) process.stderr.write(`drill: forced re-admit while host memory PSI is ${psiText} (over 1.00)\n`);
            const line = `mode ${mode} queue=${queueName} previous=${previous} psi ${psiText}${forced ? " forced=1" : ""}`;
            process.stdout.write(g.json ? `${JSON.stringify({ mode, queue: queueName, previous, forced, psi: psi.ok ? psi.value.some : null })}\n` : `${line}\n`);
          } finally {
            await closeRedis(redis);
          }
        }),
    );
    return gate;
  };
}

export const gateCommand: CommandFactory = gateCommandWith(cgroupModuleResolver);
