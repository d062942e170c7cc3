import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const reportCommand: CommandFactory = () => notBuiltCommand("report", "the incident-note summary of decisions and pressure");
