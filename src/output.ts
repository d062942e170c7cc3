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
