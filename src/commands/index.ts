import type { Command } from "commander";
import type { GlobalsFn } from "../context.js";
import { cgroupCommand } from "./cgroup.js";
import { doctorCommand } from "./doctor.js";
import { gateCommand } from "./gate.js";
import { injectCommand } from "./inject.js";
import { packCommand } from "./pack.js";
import { reportCommand } from "./report.js";
import { rollbackCommand } from "./rollback.js";
import { upCommand } from "./up.js";
import { watchCommand } from "./watch.js";
import { workerCommand } from "./worker.js";

export type CommandFactory = (globals: GlobalsFn) => Command;

// Registered in the order of DESIGN.md's command table.
export const commandFactories: CommandFactory[] = [
  doctorCommand,
  cgroupCommand,
  injectCommand,
  packCommand,
  workerCommand,
  gateCommand,
  watchCommand,
  upCommand,
  rollbackCommand,
  reportCommand,
];
