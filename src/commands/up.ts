import { Command } from "commander";
import type { DrillFile } from "../drill/drillFile.js";
import { drillDurationProblem, formatBytes, formatDuration, memoryMaxProblem, parseDuration, parsePsiLimit, parsePercent, parsePositiveInt, parseSize } from "../units.js";
import { UsageError } from "../errors.js";
import { absoluteDir, DEFAULT_FILE_DIR, requireDirectory } from "../host/filesystem.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface UpFlags {
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

/**
 * "Rewrite the thresholds, not the story": flags override the drill file's
 * numbers. A flag given is checked even when empty (`--psi-limit ""` is not
 * "no override"), and every bad one is named at once.
 */
export function applyOverrides(drill: DrillFile, flags: UpFlags): DrillFile {
  const d = structuredClone(drill);
  const problems: string[] = [];
  const override = (value: string | undefined, apply: (value: string) => void) => {
    if (value === undefined) return;
    try {
      apply(value);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      problems.push(err.message);
    }
  };
  override(flags.duration, (v) => {
    d.duration = parseDuration(v, "--duration");
    // Shorter than the file's skips the phases past it; one before every phase
    // would start Redis, gate, worker and watch for nothing.
    const firstAt = Math.min(...d.phases.map((p) => p.at));
    if (d.duration <= firstAt) {
      throw new UsageError(`--duration: "${v}" ends the drill before its first phase starts (at ${formatDuration(firstAt)}); give more than ${formatDuration(firstAt)}`);
    }
    const short = drillDurationProblem(d.duration);
    if (short !== null) throw new UsageError(`--duration: "${v}" ${short}`);
  });
  override(flags.memoryMax, (v) => {
    d.cgroup.memory_max = parseSize(v, "--memory-max");
    // The drill file's own cgroup.memory_max gets the same check (drillFile.ts).
    const problem = memoryMaxProblem(d.cgroup.memory_max);
    if (problem) throw new UsageError(`--memory-max: "${v}" ${problem}`);
  });
  override(flags.psiLimit, (v) => (d.gate.psi_limit = parsePsiLimit(v, "--psi-limit")));
  override(flags.psiRateLimit, (v) => (d.gate.psi_rate_limit = parsePercent(v, "--psi-rate-limit")));
  override(flags.slackLimit, (v) => (d.gate.slack_limit = parseDuration(v, "--slack-limit")));
  override(flags.packedTokenLimit, (v) => (d.gate.packed_token_limit = parsePositiveInt(v, "--packed-token-limit")));
  if (problems.length > 0) throw new UsageError(problems.join("; "));
  return d;
}

/**
 * The overrides as typed, for the `drill up` that up prints to run again:
 * pasted, it runs the drill this one was asked for, not the file's numbers.
 */
export function overrideWords(flags: UpFlags): string[] {
  const typed: [string, string | undefined][] = [
    ["--duration", flags.duration],
    ["--memory-max", flags.memoryMax],
    ["--psi-limit", flags.psiLimit],
    ["--psi-rate-limit", flags.psiRateLimit],
    ["--slack-limit", flags.slackLimit],
    ["--packed-token-limit", flags.packedTokenLimit],
  ];
  return typed.flatMap(([flag, value]) => (value === undefined ? [] : [flag, value]));
}

/**
 * A memory_max below the worker's weights is allowed on purpose (a thrash
 * rehearsal: the worker's own weights are evicted and refaulted), but said
 * once before the drill starts, so it is not mistaken for a typo. Null when
 * the weights fit. `memoryMaxFrom` names where the limit came from.
 */
export function weightsReclaimNote(drill: Pick<DrillFile, "cgroup" | "worker">, memoryMaxFrom: "cgroup.memory_max" | "--memory-max"): string | null {
  const { memory_max: memoryMax } = drill.cgroup;
  const { weights } = drill.worker;
  if (memoryMax >= weights) return null;
  return `note: ${memoryMaxFrom} ${formatBytes(memoryMax)} is below worker.weights ${formatBytes(weights)}: the worker reclaims from its first token (intended for a thrash rehearsal)`;
}

/**
 * --file-dir, absolute: the children, the hog's own check and a rollback from
 * another directory all read the recorded path. It must exist already; up makes
 * only its per-run directory inside it, which rollback removes.
 */
export function resolveFileDir(raw: string, cwd: string = process.cwd()): string {
  const dir = absoluteDir(raw, "--file-dir", cwd);
  requireDirectory(dir, "--file-dir");
  return dir;
}

export const upCommand: CommandFactory = (globals) =>
  new Command("up")
    .description("bring the whole drill up from a drill file (default drills/smoke.yaml)")
    .option("--drill <file>", "the drill file (default: drills/smoke.yaml)")
    .option("--detach", "return once everything runs; children exit by themselves 5 minutes after the drill's end", false)
    .option("--name <cgroup>", "worker cgroup name", "infer")
    .option("--parent <path|self>", "parent of the worker cgroup (default: the drill file's, else the hierarchy's root)")
    .option("--queue <name>", "Redis queue name", "jobs")
    .option("--file-dir <dir>", "where the hog's and worker's files go (a disk filesystem)", DEFAULT_FILE_DIR)
    .option("--duration <duration>", "override the drill's duration")
    .option("--memory-max <size>", "override cgroup.memory_max")
    .option("--psi-limit <n>", "override gate.psi_limit")
    .option("--psi-rate-limit <pct>", "override gate.psi_rate_limit")
    .option("--slack-limit <duration>", "override gate.slack_limit")
    .option("--packed-token-limit <n>", "override gate.packed_token_limit")
    .addHelpText(
      "after",
      // Wrapped by hand under 80 columns: commander does not wrap this text.
      "\nThe schedule's clock starts once the gate decides (after its first pressure\n" +
        "samples) and the worker has written its weights: up waits for both, bounded,\n" +
        "and the phases' offsets (at:) count from then, so queue age and first-token\n" +
        "latency are the drill's, not the tooling's start-up.\n" +
        "--json: ready_ms is that wait (null when the drill stopped while waiting).",
    )
    .action(async (flags: UpFlags) => {
      const { upAction } = await import("./up.run.js");
      began();
      await upAction(globals(), flags);
    });
