import { existsSync, rmdirSync } from "node:fs";
import path from "node:path";
import { holdLockFile, stateDirError, type LockSeams } from "../cgroup/stateFiles.js";
import { RefusedError } from "../errors.js";
import { makeDirs } from "../util/makeDirs.js";

/**
 * `<state-dir>/<name>/<what>.lock` (holdLockFile): two `drill up` with one
 * name cannot both get `up.lock`, two rollbacks cannot both get
 * `rollback.lock`. A rollback does not wait for a running `up`: it stops it
 * (the packer) as its second step. A lock whose owner is gone (pid and start
 * time no longer match) is stale and taken over, by one of its takers only.
 */
export interface DrillLock {
  file: string;
  release(): void;
}

/** The lock file of `what` in a drill's dir. */
export function drillLockFile(dir: string, what: "up" | "rollback"): string {
  return path.join(dir, `${what}.lock`);
}

/**
 * `holder`: who takes the lock, when not the command it is named after (report reviving the embedded Redis takes rollback's).
 * A drill dir this lock made is removed again at release when nothing else
 * went into it: an `up` refused before its first state write (doctor, a
 * cgroup another drill owns, a queue in use) leaves no empty `<state-dir>/<name>/`
 * behind, which `report` and rollback would take for a drill.
 * `takeFrom`: the pid of a live holder handing its lock over (holdLockFile).
 */
export function acquireDrillLock(dir: string, what: "up" | "rollback", holder: string = what, seams?: LockSeams, takeFrom: number | null = null): DrillLock {
  for (let attempt = 0; ; attempt++) {
    let made: boolean;
    try {
      made = makeDirs(dir) !== undefined;
    } catch (err) {
      throw stateDirError("create the state directory", dir, err);
    }
    const file = drillLockFile(dir, what);
    try {
      const lock = holdLockFile(
        file,
        { what: holder },
        (owner) =>
          owner === null
            ? new RefusedError(`another drill ${what} with the same name is starting (${file})`)
            : new RefusedError(`another drill ${owner.what ?? what} (pid ${owner.pid}) holds ${file}; one at a time per drill name: wait for it to end, then run this again`),
        seams,
        takeFrom,
      );
      return {
        file,
        release: () => {
          lock.release();
          if (made) removeIfEmpty(dir);
        },
      };
    } catch (err) {
      if (made) removeIfEmpty(dir);
      // Another refused up removed the dir it made between our mkdir and our lock file: make it again.
      if (attempt < 2 && !existsSync(dir)) continue;
      throw err;
    }
  }
}

/** rmdir, which leaves a dir that holds anything (state.json, another's lock) alone. */
function removeIfEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // not empty, or already gone: either way nothing of ours is left
  }
}
