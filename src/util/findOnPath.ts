import { accessSync, constants } from "node:fs";
import path from "node:path";

/** Where `program` is on `pathEnv` (a PATH value) as exec would find it: the first executable one, or null. */
export function findOnPath(program: string, pathEnv: string = process.env.PATH ?? ""): string | null {
  for (const dir of pathEnv.split(path.delimiter)) {
    if (dir === "") continue;
    const candidate = path.join(dir, program);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here, or not executable: exec goes on to the next dir too
    }
  }
  return null;
}
