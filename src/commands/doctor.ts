import { Command } from "commander";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";
import { DEFAULT_FILE_DIR } from "../host/filesystem.js";

export interface DoctorOptions {
  parent?: string;
  fileDir: string;
  size: string;
}

export const doctorCommand: CommandFactory = (globals) =>
  new Command("doctor")
    .description("preflight checks; exit 3 only when the drill cannot run safely")
    .option("--parent <path|self>", "where the drill's cgroup would go (default: the hierarchy's root)")
    .option("--file-dir <dir>", "where the hog and weights files would go", DEFAULT_FILE_DIR)
    .option("--size <size>", "the largest hog or weights file the drill will write", "3G")
    .action(async (options: DoctorOptions) => {
      const { doctorAction } = await import("./doctor.run.js");
      began();
      await doctorAction(globals(), options);
    });
