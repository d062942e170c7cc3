import type { CommandFactory } from "./index.js";
import { notBuiltCommand } from "./notBuilt.js";

export const gateCommand: CommandFactory = () => notBuiltCommand("gate", "the admission daemon (admitd); gate mode admit|reject_all flips the lever");
