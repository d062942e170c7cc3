import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const packCommand: CommandFactory = () => notBuiltCommand("pack", "push packed long-context jobs onto the queue");
