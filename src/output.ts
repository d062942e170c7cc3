import { Chalk, type ChalkInstance } from "chalk";
import { writeErr, writeOut } from "./closedStdout.js";

/** Where a command writes: stdout for results, stderr for progress and errors. */
export interface Output {
  out(line: string): void;
  err(line: string): void;
  json(value: unknown): void;
  readonly color: ChalkInstance;
  readonly isTTY: boolean;
}

export function consoleOutput(useColor: boolean): Output {
  const isTTY = Boolean(process.stdout.isTTY);
  const color = new Chalk({ level: useColor && isTTY ? 1 : 0 });
  return {
    out: (line) => writeOut(`${line}\n`),
    err: (line) => writeErr(`${line}\n`),
    json: (value) => writeOut(`${JSON.stringify(value)}\n`),
    color,
    isTTY,
  };
}
