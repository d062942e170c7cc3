import { Command, Option } from "commander";
import { addCgroupTargetOptions } from "../cgroup/target.js";
import type { SnakeCased } from "../output.js";
import type { InjectReport } from "./inject.run.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";
import { DEFAULT_FILE_DIR } from "../host/filesystem.js";

export interface InjectFlags {
  name?: string;
  parent?: string;
  size: string;
  mode: string;
  hold: string;
  detach?: boolean;
  fileDir: string;
  force?: boolean;
}

/** The --json document, keys in snake_case (tests import it from here). */
export type InjectDocument = SnakeCased<InjectReport>;

export const injectCommand: CommandFactory = (globals) =>
  addCgroupTargetOptions(
    new Command("inject")
      .description("the memory hog, inside the cgroup before it touches a page")
      .option("--size <size>", "memory to touch (the runbook's 3G map; the cgroup's limit is what stops it)", "3G")
      .addOption(new Option("--mode <mode>", "anon: anonymous map (loud OOM); thrash: file-backed map, refaults (quiet reclaim)").default("anon"))
      .option("--hold <duration>", "hold the pages this long once packed", "30s")
      .option("--detach", "return once packed; the hog exits by itself after --hold", false)
      .option("--file-dir <dir>", "thrash: directory for the file (a disk filesystem, not tmpfs)", DEFAULT_FILE_DIR)
      .option("--force", "join even the worker cgroup of a drill that is up (says so; its rollback kills this hog too)", false),
  ).action(async (flags: InjectFlags) => {
    const { injectAction } = await import("./inject.run.js");
    began();
    await injectAction(globals(), flags);
  });
