import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const doctorCommand: CommandFactory = () => notBuiltCommand("doctor", "preflight checks; exit 3 only when the drill cannot run safely");
