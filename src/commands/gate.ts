import { Command } from "commander";
import { addCgroupTargetOptions } from "../cgroup/target.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";
import { MAX_JOB_ATTEMPT } from "../queue/job.js";

export interface RawGateOptions {
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

export interface GateModeFlags {
  force: boolean;
  queue: string;
}

export const gateCommand: CommandFactory = (globals) => {
  const gate = addCgroupTargetOptions(
    new Command("gate")
      .description("the admission daemon (admitd): admit or reject each job before reclaim steals its deadline; gate mode admit|reject_all flips the lever")
      .option("--queue <name>", "Redis queue name", "jobs"),
  )
    .option("--cgroup-pressure <file>", "the worker cgroup's memory.pressure file (missing: host signals only)")
    .option("--psi-limit <n>", "reject when psi_mem_some_avg10 is over this", "10")
    .option("--psi-rate-limit <pct>", "reject when the stall rate over 3 s is over this %", "10")
    .option("--slack-limit <duration>", "reject when deadline slack is under this", "1500ms")
    .option("--packed-token-limit <n>", "cap on in-flight packed prompt tokens", "32000")
    .option("--interval <duration>", "the gate's own sampling interval", "1s")
    .option("--pressure-clear <duration>", "host pressure clears only after this long below half the limits", "5s")
    .option("--retry-host-class <class>", "where nacked jobs go (never back to the queue)", "dedicated")
    .option("--retry-budget <n>", `retries a rejected job gets (each adds one to its attempt); a reject of a job whose attempt is already N sends it to the dead list; at most ${MAX_JOB_ATTEMPT}, a job's largest attempt`, "3")
    .option("--gate-id <id>", "this gate's id (default: <hostname>-<pid>)")
    .option("--dry-run", "decide and log the queue as it stands, move nothing", false)
    .option("--max-jobs <n>", "stop after deciding this many jobs")
    .option("--idle-exit <duration>", "stop after this long without a job")
    .option("--duration <duration>", "stop after this long, whatever happens (detached gates exit by themselves)")
    .action(async (raw: RawGateOptions) => {
      const { gateAction } = await import("./gate.run.js");
      began();
      await gateAction(globals(), raw);
    });

  gate.addCommand(
    new Command("mode")
      .description("flip the lever: reject_all denies every job; admit refuses unless host PSI avg10 and avg60 are under 1.00")
      .argument("<mode>", "admit | reject_all")
      .option("--force", "re-admit even under pressure (says so)", false)
      .option("--queue <name>", "Redis queue name", "jobs")
      .action(async (modeText: string, raw: GateModeFlags) => {
        // The root program does not use positional options, so `gate mode x --queue q`
        // hands --queue to `gate`: take whichever of the two the user actually gave.
        const own = gate.commands.find((c) => c.name() === "mode")?.getOptionValueSource("queue") === "cli";
        const { gateModeAction } = await import("./gate.run.js");
        began();
        await gateModeAction(globals(), modeText, { force: raw.force, queue: own ? raw.queue : (gate.opts() as { queue: string }).queue });
      }),
  );
  return gate;
};
