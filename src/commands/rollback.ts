import { Command } from "commander";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface RollbackFlags {
  name?: string;
  queue?: string;
  queueOnly?: boolean;
}

export const rollbackCommand: CommandFactory = (globals) =>
  new Command("rollback")
    .description("deny-all, stop packer, drain, kill, remove cgroup, report; idempotent")
    .option("--name <drill>", "the drill to roll back, by its drill file's name (not up's --name, the cgroup) (default: every drill in the state dir)")
    .option("--queue <name>", "also a queue no drill recorded (pack, gate and worker run by hand): deny-all and drain it on --redis (default: the Redis of a drill up here, else redis://127.0.0.1:6379)")
    .option("--queue-only", "with --queue: that queue alone; the drills of the state dir (up or starting) and its cgroup setup cgroups are left as they are (plain --queue rolls them back too)")
    .action(async (flags: RollbackFlags) => {
      const { rollbackAction } = await import("./rollback.run.js");
      began();
      await rollbackAction(globals(), flags);
    });
