import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const workerCommand: CommandFactory = () => notBuiltCommand("worker", "the simulated inference worker, inside the cgroup");
