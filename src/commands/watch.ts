import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const watchCommand: CommandFactory = () => notBuiltCommand("watch", "the sidecar: PSI, swap-in, cgroup memory and queue age beside the job counters");
