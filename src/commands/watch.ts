import { Command } from "commander";
import { addCgroupTargetOptions } from "../cgroup/target.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface WatchOptions {
  interval: string;
  once?: boolean;
  record?: string;
  queue: string;
  name: string;
  parent?: string;
  psiLimit: string;
  psiRateLimit: string;
  hostClass: string;
  count?: string;
  duration?: string;
}

export const watchCommand: CommandFactory = (globals) =>
  addCgroupTargetOptions(
    new Command("watch")
      .description("the sidecar: PSI, swap-in, cgroup memory and queue age beside the job counters and the gate's reject lines, one sample per interval")
      .option("--interval <duration>", "time between samples", "1s")
      .option("--once", "one sample (two readings an interval apart, so rates are real) and exit")
      .option("--record <file.jsonl>", "append every sample to this file as JSONL while showing the view")
      .option("--queue <name>", "Redis queue", "jobs"),
  )
    .option("--psi-limit <n>", "PSI avg10 over this counts as pressure for the reclaim_not_underload alarm while memory still stalls; with no stall in the last interval it is the tail of a stall that ended", "10")
    .option("--psi-rate-limit <pct>", "stall % over the last interval over this is pressure", "10")
    .option("--host-class <class>", "this host's class: a retried job of this class pages retry_worker_idle", "shared-free")
    .option("--count <n>", "stop after n samples; the first comes one interval after the start, as rates need two readings")
    .option("--duration <duration>", "stop after this long")
    .action(async (options: WatchOptions) => {
      const { watchAction } = await import("./watch.run.js");
      began();
      await watchAction(globals(), options);
    });
