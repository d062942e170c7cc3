import { Chalk, type ChalkInstance } from "chalk";
import { TERMINAL_UNICODE, writeDocument, writeErr, writeOut } from "./closedStdout.js";

/**
 * Where a command writes: stdout for results, stderr for progress and errors.
 * out and err are for a person and follow the terminal's charset (ASCII under
 * LANG=C); json and document are for scripts and print as they are.
 */
export interface Output {
  out(line: string): void;
  err(line: string): void;
  json(value: unknown): void;
  /** A document already rendered (`report --format json`). */
  document(text: string): void;
  readonly color: ChalkInstance;
  readonly isTTY: boolean;
  /** The terminal takes UTF-8 (box drawing, trend bars); else a renderer that lays out by width draws in ASCII itself. */
  readonly unicode: boolean;
}

export function consoleOutput(useColor: boolean): Output {
  // TERM=dumb (an editor's shell buffer, a serial console) draws escape codes as text: no colour, no live redraw (QA AB 8).
  const isTTY = Boolean(process.stdout.isTTY) && process.env.TERM !== "dumb";
  const color = new Chalk({ level: useColor && isTTY ? 1 : 0 });
  return {
    out: (line) => writeOut(`${line}\n`),
    err: (line) => writeErr(`${line}\n`),
    json: (value) => writeDocument(`${JSON.stringify(value)}\n`),
    document: (text) => writeDocument(`${text}\n`),
    color,
    isTTY,
    unicode: TERMINAL_UNICODE,
  };
}

/** Columns a table is laid out for when stdout is no terminal (a pipe, a file): the classic terminal's. */
export const PIPED_WIDTH = 80;

/**
 * The width to lay a table out for: the terminal's; when there is none (or it
 * tells none), COLUMNS if it is a positive integer (`COLUMNS=120 drill doctor
 * | less`: the variable Python's shutil.get_terminal_size reads), else PIPED_WIDTH.
 * A terminal's own width wins over COLUMNS: an exported one goes stale when
 * the window is resized. Up to 4 digits: no terminal is wider, and doctor
 * fills the width it is given (COLUMNS=1000000 printed 69 MB).
 */
export function tableWidth(stdout: { isTTY?: boolean; columns?: number }, env: Readonly<Record<string, string | undefined>> = process.env): number {
  if (stdout.isTTY === true && stdout.columns !== undefined && stdout.columns > 0) return stdout.columns;
  const asked = env.COLUMNS ?? "";
  return /^[1-9][0-9]{0,3}$/.test(asked) ? Number(asked) : PIPED_WIDTH;
}

/** `cgroupPath` → `cgroup_path`: DESIGN.md spells every JSON field in snake_case. */
type SnakeCase<S extends string, Done extends string = ""> = string extends S
  ? S
  : S extends `${infer Head}${infer Tail}`
    ? SnakeCase<Tail, `${Done}${Head extends Lowercase<Head> ? Head : `_${Lowercase<Head>}`}`>
    : Done;

/** A value as its --json document prints it: every key snake_case, at any depth. */
export type SnakeCased<T> = T extends readonly (infer U)[]
  ? SnakeCased<U>[]
  : T extends object
    ? { [K in keyof T as K extends string ? SnakeCase<K> : K]: SnakeCased<T[K]> }
    : T;

/** Identifier-shaped keys are field names (`runId`, `avg10`); a data key (a memory.stat name, a Redis key) has no capital or is not one. */
const CAMEL_FIELD = /^[a-z][a-zA-Z0-9]*$/;

/**
 * The --json boundary: TypeScript's camelCase fields become the snake_case
 * keys scripts read, in the one place that builds each document, so a field
 * added later follows too. Values and structure are left as they are.
 */
export function snakeCaseKeys<T>(value: T): SnakeCased<T> {
  return toSnake(value) as SnakeCased<T>;
}

function toSnake(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(toSnake);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => [CAMEL_FIELD.test(key) ? key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`) : key, toSnake(v)]),
  );
}
