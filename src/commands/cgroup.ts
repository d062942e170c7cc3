import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const cgroupCommand: CommandFactory = () => notBuiltCommand("cgroup", "create, inspect and remove the worker's memory cgroup");
