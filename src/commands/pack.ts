import { Command } from "commander";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface RawPackOptions {
  queue: string;
  jobs: string;
  files: string;
  promptTokens: string;
  completionTokens: string;
  deadline: string;
  rate?: string;
  upstreamAge: string;
  hostClass: string;
}

export const packCommand: CommandFactory = (globals) =>
  new Command("pack")
    .description("push packed long-context jobs onto the queue (RPUSH; the gate takes from the left)")
    .option("--jobs <n>", "how many jobs", "8")
    .option("--files <n>", "files per job (the runbook's 8 files)", "8")
    .option("--prompt-tokens <n>", "prompt tokens per job", "24000")
    .option("--completion-tokens <n>", "completion tokens per job", "256")
    .option("--deadline <duration>", "deadline from enqueue to first useful token", "8s")
    .option("--rate <n/s>", "jobs per second (default: all at once)")
    .option("--upstream-age <duration>", "time the jobs already waited upstream (enqueue_ts = now - age)", "0s")
    .option("--host-class <class>", "host class the jobs are packed onto", "shared-free")
    .option("--queue <name>", "Redis queue name", "jobs")
    .action(async (raw: RawPackOptions) => {
      const { packAction } = await import("./pack.run.js");
      began();
      await packAction(globals(), raw);
    });
