import type { Command } from "commander";
import type { GlobalsFn } from "../context.js";

export type CommandFactory = (globals: GlobalsFn) => Command;

// Registered in the order of DESIGN.md's command table.
export const commandFactories: CommandFactory[] = [];
