import { spawn } from "node:child_process";
import { closeSync, existsSync, openSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Command } from "commander";
import { validateCgroupName } from "../cgroup/names.js";
import { hostRoots } from "../context.js";
import { loadDrillFile, type DrillFile } from "../drill/drillFile.js";
import { drillDir, readState } from "../drill/state.js";
import { runUp } from "../drill/up.js";
import { DrillError, InterruptedError } from "../errors.js";
import { onInterrupt } from "../interrupt.js";
import { findPackageRoot } from "../native/pagetoucher.js";
import { buildReport } from "../report/build.js";
import { gatherReport } from "../report/gather.js";
import { renderReport } from "../report/render.js";
import { consoleOutput } from "../output.js";
import { validateKeyPart } from "../queue/keys.js";
import { parseDuration, parseNumber, parsePositiveInt, parseSize } from "../units.js";
import type { CommandFactory } from "./index.js";

interface UpFlags {
  drill?: string;
  detach: boolean;
  name: string;
  parent?: string;
  queue: string;
  fileDir: string;
  duration?: string;
  memoryMax?: string;
  psiLimit?: string;
  psiRateLimit?: string;
  slackLimit?: string;
  packedTokenLimit?: string;
}

const BACKGROUND_ENV = "DRILL_UP_BACKGROUND";

/** The drill file: --drill, else drills/smoke.yaml here, else the one shipped with drill. */
export function resolveDrillPath(flag: string | undefined): string {
  if (flag) return flag;
  const local = path.resolve("drills", "smoke.yaml");
  return existsSync(local) ? local : path.join(findPackageRoot(), "drills", "smoke.yaml");
}

/** "Rewrite the thresholds, not the story": flags override the drill file's numbers. */
export function applyOverrides(drill: DrillFile, flags: UpFlags): DrillFile {
  const d = structuredClone(drill);
  if (flags.duration) d.duration = parseDuration(flags.duration, "--duration");
  if (flags.memoryMax) d.cgroup.memory_max = parseSize(flags.memoryMax, "--memory-max");
  if (flags.psiLimit) d.gate.psi_limit = parseNumber(flags.psiLimit, "--psi-limit");
  if (flags.psiRateLimit) d.gate.psi_rate_limit = parseNumber(flags.psiRateLimit, "--psi-rate-limit");
  if (flags.slackLimit) d.gate.slack_limit = parseDuration(flags.slackLimit, "--slack-limit");
  if (flags.packedTokenLimit) d.gate.packed_token_limit = parsePositiveInt(flags.packedTokenLimit, "--packed-token-limit");
  return d;
}

export const upCommand: CommandFactory = (globals) =>
  new Command("up")
    .description("bring the whole drill up from a drill file (default drills/smoke.yaml)")
    .option("--drill <file>", "the drill file (default: drills/smoke.yaml)")
    .option("--detach", "return once everything runs; children exit by themselves 5 minutes after the drill's end", false)
    .option("--name <cgroup>", "worker cgroup name", "infer")
    .option("--parent <path|self>", "parent of the worker cgroup (default: the drill file's, else the hierarchy's root)")
    .option("--queue <name>", "Redis queue name", "jobs")
    .option("--file-dir <dir>", "where the hog's and worker's files go (a disk filesystem)", "/var/tmp")
    .option("--duration <duration>", "override the drill's duration")
    .option("--memory-max <size>", "override cgroup.memory_max")
    .option("--psi-limit <n>", "override gate.psi_limit")
    .option("--psi-rate-limit <pct>", "override gate.psi_rate_limit")
    .option("--slack-limit <duration>", "override gate.slack_limit")
    .option("--packed-token-limit <n>", "override gate.packed_token_limit")
    .action(async (flags: UpFlags) => {
      const g = globals();
      const output = consoleOutput(g.color);
      const drillFile = resolveDrillPath(flags.drill);
      const drill = applyOverrides(loadDrillFile(drillFile), flags);
      validateCgroupName(flags.name);
      validateKeyPart(flags.queue, "--queue");
      const log = (line: string) => (g.json ? output.err(line) : output.out(line));

      if (flags.detach && process.env[BACKGROUND_ENV] !== "1") {
        await detach(drill, drillFile, g.stateDir, log);
        return;
      }

      log(`drill ${drill.name}: ${drill.description} — ${drillFile}; every number below is a lab expectation from a declared drill, not observed production`);
      const interrupt = onInterrupt();
      try {
        const result = await runUp({
          roots: hostRoots(g),
          stateDir: g.stateDir,
          procfs: g.procfs,
          sysfs: g.sysfs,
          drill,
          drillFile,
          redisUrl: g.redisUrl,
          queue: flags.queue,
          cgroupName: flags.name,
          parent: flags.parent,
          fileDir: flags.fileDir,
          signal: interrupt.signal,
          log,
          crashAt: process.env.DRILL_CRASH_AT,
        });
        const summary = {
          name: drill.name,
          run_id: result.state.runId,
          pushed: result.pushed.length,
          pushed_ids: result.pushed,
          state: path.join(drillDir(g.stateDir, drill.name), "state.json"),
          interrupted: result.interrupted,
        };
        if (!g.json) {
          // The summary an operator pastes: the same report `drill report` prints, over this run.
          const sinceMs = Date.now() - Date.parse(result.state.createdAt) + 1000;
          try {
            const { inputs, nowMs } = await gatherReport({ stateDir: g.stateDir, name: drill.name, queue: flags.queue, redisUrl: result.state.redis.url, sinceMs });
            output.out(renderReport(buildReport(inputs, nowMs, sinceMs), "text", output.color));
          } catch (err) {
            log(`summary unavailable: ${err instanceof Error ? err.message : String(err)}`);
          }
        }
        if (g.json) output.json(summary);
        log(`drill ${drill.name}: packer stopped after ${result.pushed.length} jobs; \`drill report --name ${drill.name} --format md\` for the incident note.`);
        log(`Run \`drill rollback --name ${drill.name}\` before walking away: gate, worker, watch and hog keep running until then (they exit by themselves 5 minutes after the drill's end).`);
        const signal = interrupt.received();
        if (signal) throw new InterruptedError(signal);
      } finally {
        interrupt.dispose();
      }
    });

/**
 * --detach: run the same `drill up` in its own session (it is the packer and
 * the schedule), wait until its state says running, then return.
 */
async function detach(drill: DrillFile, drillFile: string, stateDir: string, log: (line: string) => void): Promise<void> {
  const dir = drillDir(stateDir, drill.name);
  const before = readState(stateDir, drill.name);
  const logFile = path.join(stateDir, `${drill.name}-up.log`);
  const fd = openSync(logFile, "a");
  const child = spawn(process.execPath, process.argv.slice(1), {
    detached: true,
    stdio: ["ignore", fd, fd],
    env: { ...process.env, [BACKGROUND_ENV]: "1" },
  });
  closeSync(fd);
  child.unref();
  let exitCode: number | null | undefined;
  child.once("exit", (code) => (exitCode = code ?? -1));
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const state = readState(stateDir, drill.name);
    if (state && state.runId !== before?.runId && (state.phase === "running" || state.phase === "stopped")) {
      log(`drill ${drill.name} is up in the background (pid ${child.pid}, run ${state.runId}); log ${logFile}, state ${dir}`);
      log(`run \`drill rollback --name ${drill.name}\` before walking away`);
      return;
    }
    if (exitCode !== undefined) {
      throw new DrillError(`drill up exited with code ${exitCode} before the drill ran; see ${logFile}`, exitCode === 3 ? 3 : exitCode === 2 ? 2 : 1);
    }
    await sleep(200);
  }
  throw new DrillError(`drill up did not reach running within 120 s; see ${logFile}, then drill rollback --name ${drill.name}`);
}
