import { closeSync, openSync, readFileSync, unlinkSync, writeSync, mkdirSync } from "node:fs";
import path from "node:path";
import { stateDirError } from "../cgroup/stateFiles.js";
import { RefusedError } from "../errors.js";
import type { HostRoots } from "../host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../host/process.js";

/**
 * `<state-dir>/<name>/<what>.lock`, created with O_EXCL: two `drill up` with
 * one name cannot both get `up.lock`, two rollbacks cannot both get
 * `rollback.lock`. A rollback does not wait for a running `up`: it stops it
 * (the packer) as its second step. A lock whose owner is gone (pid and start
 * time no longer match) is stale and taken over.
 */
export interface DrillLock {
  file: string;
  release(): void;
}

/** `holder`: who takes the lock, when not the command it is named after (report reviving the embedded Redis takes rollback's). */
export function acquireDrillLock(roots: HostRoots, dir: string, what: "up" | "rollback", holder: string = what): DrillLock {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw stateDirError("create the state directory", dir, err);
  }
  const file = path.join(dir, `${what}.lock`);
  const self = readProcessStat(roots, process.pid);
  const record = JSON.stringify({ pid: process.pid, startTime: self.ok ? self.value.startTime : null, what: holder });
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, "wx", 0o600);
      writeSync(fd, record);
      closeSync(fd);
      return {
        file,
        release: () => {
          try {
            unlinkSync(file);
          } catch {
            // already gone: release is idempotent
          }
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw stateDirError("create the lock", file, err);
      const owner = readOwner(file);
      if (owner && owner.pid !== process.pid && owner.startTime !== null && isSameProcess(roots, owner.pid, owner.startTime)) {
        throw new RefusedError(`another drill ${owner.what} (pid ${owner.pid}) holds ${file}; one at a time per drill name`);
      }
      // Stale: the owner died without releasing. Remove and try once more;
      // if another process won the race, the second O_EXCL fails and we refuse.
      try {
        unlinkSync(file);
      } catch {
        // someone else removed it first
      }
    }
  }
  throw new RefusedError(`another drill ${what} with the same name is starting (${file})`);
}

function readOwner(file: string): { pid: number; startTime: number | null; what: string } | null {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as { pid: number; startTime: number | null; what: string };
  } catch {
    return null; // half-written by a crashed owner: stale
  }
}
