import { existsSync, rmdirSync } from "node:fs";
import path from "node:path";
import { holdLockFile, liveLockHolder, stateDirError, type LockHolder, type LockSeams } from "../cgroup/stateFiles.js";
import { DrillError, RefusedError } from "../errors.js";
import { makeDirs } from "../util/makeDirs.js";
import { otherUsersDir } from "../util/ownFiles.js";

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
 * cgroup another drill owns, a queue in use, a --parent with no such cgroup)
 * leaves no empty `<state-dir>/<name>/` behind, which `report` and rollback
 * would take for a drill; nor the state dir (and its parents) it made for it.
 * `takeFrom`: the pid of a live holder handing its lock over (holdLockFile).
 */
export function acquireDrillLock(dir: string, what: "up" | "rollback", holder: string = what, seams?: LockSeams, takeFrom: number | null = null): DrillLock {
  for (let attempt = 0; ; attempt++) {
    let made: string | undefined;
    try {
      made = makeDirs(dir);
    } catch (err) {
      // A refused up of another drill removed the state dir it made between our look and our mkdir: make it again.
      if (attempt < 2 && (err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw stateDirError("create the state directory", dir, err);
    }
    const file = drillLockFile(dir, what);
    try {
      const lock = holdLockFile(file, { what: holder }, (owner) => lockRefusal(file, what, owner), seams, takeFrom);
      return {
        file,
        release: () => {
          lock.release();
          removeMadeIfEmpty(dir, made);
        },
      };
    } catch (err) {
      removeMadeIfEmpty(dir, made);
      // Another refused up removed the dir it made between our mkdir and our lock file: make it again.
      if (attempt < 2 && !existsSync(dir)) continue;
      throw err;
    }
  }
}

function lockRefusal(file: string, what: "up" | "rollback", owner: LockHolder | null): RefusedError {
  return owner === null
    ? new RefusedError(`another drill ${what} with the same name is starting (${file})`)
    : new RefusedError(`another drill ${owner.what ?? what} (pid ${owner.pid}) holds ${file}; one at a time per drill name: wait for it to end, then run this again`);
}

export type StateDirRefusal = "ENOSPC" | "EDQUOT" | "EROFS" | "EPERM" | "EACCES";

/** What frees a refusing state dir for the rollback run again: never another --state-dir (the drill is in this one). */
const REFUSAL_FIX: Record<StateDirRefusal, string> = {
  ENOSPC: "no space left on its disk: free some there",
  EDQUOT: "over its disk quota: free some there",
  EROFS: "a read-only filesystem: remount it read-write",
  EPERM: "refused (an immutable directory, chattr +i, a restricted mount or a security policy): make it writable",
  EACCES: "refused (an immutable directory, a restricted mount or a security policy; run as root): make it writable",
};

/** The errno of a state dir that refused a write for want of space or permission, not for a holder; null otherwise. */
export function stateDirRefusal(err: unknown): StateDirRefusal | null {
  const code = err instanceof DrillError ? (err.cause as NodeJS.ErrnoException | undefined)?.code : undefined;
  return code !== undefined && Object.hasOwn(REFUSAL_FIX, code) ? (code as StateDirRefusal) : null;
}

/**
 * A state dir that refused a rollback: `text`, `<what> <file>: <errno> (<how
 * to free it>)`; `as`, who may write there when it is another user's drill
 * dir (root's, a rollback run as a user: "root", "uid N or root"), else null
 * (space, a mount or a policy: the same user runs it again once freed).
 */
export interface StateDirRefused {
  text: string;
  as: string | null;
}

export function stateDirRefused(what: string, file: string, code: StateDirRefusal): StateDirRefused {
  const other = otherUsersDir(path.dirname(file), code);
  return { text: `cannot ${what} ${file}: ${other?.text ?? `${code} (${REFUSAL_FIX[code]})`}`, as: other?.as ?? null };
}

/**
 * rollback's lock; or, when the state dir refuses the lock file itself (full,
 * read-only, immutable: stateDirRefusal) and no live rollback holds one there,
 * no lock and why. A rollback must still deny-all, kill and remove the cgroup
 * then: "before walking away" is when a disk is full. Two such rollbacks at
 * once are not kept apart, which every step tolerates (each is safe to run twice).
 */
export function acquireRollbackLock(dir: string): { lock: DrillLock; refused: null } | { lock: null; refused: StateDirRefused } {
  try {
    return { lock: acquireDrillLock(dir, "rollback"), refused: null };
  } catch (err) {
    const code = stateDirRefusal(err);
    if (code === null) throw err;
    const file = drillLockFile(dir, "rollback");
    // The lock's tmp file failed before the lock was looked at: a live holder still refuses.
    const holder = liveLockHolder(file);
    if (holder !== null) throw lockRefusal(file, "rollback", holder);
    return { lock: null, refused: stateDirRefused("create the lock", file, code) };
  }
}

/**
 * rmdir `dir`, then each parent up to `made` (the first dir makeDirs made;
 * undefined: none), while empty: a dir that holds anything (state.json,
 * another drill's dir or lock) is left alone, and so are its parents.
 */
function removeMadeIfEmpty(dir: string, made: string | undefined): void {
  if (made === undefined) return;
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    try {
      rmdirSync(at);
    } catch (err) {
      // Already gone: go on up. Not empty (another up's drill dir, a state file): it and its parents are kept.
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") return;
    }
    if (at === made || at === path.dirname(at)) return;
  }
}
