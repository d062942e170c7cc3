import { Command } from "commander";
import { addCgroupTargetOptions } from "../cgroup/target.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface TargetFlags {
  name?: string;
  parent?: string;
}

export interface TeardownFlags extends TargetFlags {
  force: boolean;
}

export interface SetupFlags extends TargetFlags {
  memoryMax: string;
  swapMax: string;
  /** --memory-max on the command line, not its default (a raised limit is then said as asked). */
  memoryMaxGiven?: boolean;
}

export const cgroupCommand: CommandFactory = (globals) => {
  const command = new Command("cgroup").description("create, inspect and remove the worker's memory cgroup");

  addCgroupTargetOptions(
    command
      .command("setup")
      .description("create the cgroup, enable the memory controller, write limits and read them back")
      .option("--memory-max <size>", "memory limit (memory.max / memory.limit_in_bytes)", "2G")
      .option("--swap-max <size>", "swap on top of memory (0: swap off; v1 memsw = limit)", "0"),
  ).action(async (flags: SetupFlags, setup: Command) => {
    const { cgroupSetupAction } = await import("./cgroup.run.js");
    began();
    await cgroupSetupAction(globals(), { ...flags, memoryMaxGiven: setup.getOptionValueSource("memoryMax") === "cli" });
  });

  addCgroupTargetOptions(
    command.command("status").description("limits (and the effective limit from ancestors), usage, peak, events, swap, pressure, tasks"),
  ).action(async (flags: TargetFlags) => {
    const { cgroupStatusAction } = await import("./cgroup.run.js");
    began();
    await cgroupStatusAction(globals(), flags);
  });

  addCgroupTargetOptions(
    command
      .command("teardown")
      .description("kill what is inside (never moved to the parent), remove the cgroup from every hierarchy")
      .option("--force", "tear down even the worker cgroup of a drill that is up (says so)", false),
  ).action(async (flags: TeardownFlags) => {
    const { cgroupTeardownAction } = await import("./cgroup.run.js");
    began();
    await cgroupTeardownAction(globals(), flags);
  });

  return command;
};
