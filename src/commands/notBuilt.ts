import { Command } from "commander";
import { DrillError } from "../errors.js";

/** A command of DESIGN.md that is listed in --help but not built yet: says so, exit 1. */
export function notBuiltCommand(name: string, description: string): Command {
  return new Command(name)
    .description(`${description} (not built yet)`)
    .allowUnknownOption()
    .allowExcessArguments()
    .action(() => {
      throw new DrillError(`${name} is not built yet in this version of drill`);
    });
}
