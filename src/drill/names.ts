import { UsageError } from "../errors.js";

/**
 * A drill name given on the command line (`--name`) is a directory under the
 * state dir: empty, `.`, `..`, a `/` or a NUL would name the state dir
 * itself or somewhere outside it (`../other-state/smoke`). Exit 2 before it
 * is joined to any path.
 */
export function validateDrillName(name: string, flag = "--name"): string {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0")) {
    throw new UsageError(`${flag}: "${name}" is not a drill name`);
  }
  return name;
}
