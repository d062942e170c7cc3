import { Command } from "commander";
import type { CommandFactory } from "./index.js";

export interface RollbackFlags {
  name?: string;
}

export const rollbackCommand: CommandFactory = (globals) =>
  new Command("rollback")
    .description("deny-all, stop packer, drain, kill, remove cgroup, report; idempotent")
    .option("--name <drill>", "the drill to roll back, by its drill file's name (not up's --name, the cgroup) (default: every drill in the state dir)")
    .action(async (flags: RollbackFlags) => {
      const { rollbackAction } = await import("./rollback.run.js");
      await rollbackAction(globals(), flags);
    });
