import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const injectCommand: CommandFactory = () => notBuiltCommand("inject", "the memory hog, inside the cgroup before it touches a page");
