import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const rollbackCommand: CommandFactory = () => notBuiltCommand("rollback", "deny-all, stop packer, drain, kill, remove cgroup, report; idempotent");
