import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const upCommand: CommandFactory = () => notBuiltCommand("up", "bring the whole drill up from a drill file");
