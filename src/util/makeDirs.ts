import { chmodSync, mkdirSync, statfsSync, statSync } from "node:fs";
import path from "node:path";
import { KERNEL_FS_MAGIC } from "../host/filesystem.js";
import { OWN_DIR_MODE } from "./ownFiles.js";

/**
 * `mkdir -p` one directory at a time; returns the first directory it made
 * (undefined when `dir` was there already), as mkdirSync's `recursive` does.
 * Not that option: under /proc, where mkdir says ENOENT although the parent
 * exists, Node's recursive mkdir retries the parent forever without yielding
 * (100 % CPU, deaf to SIGINT and SIGTERM: QA, `--state-dir /proc/x`); and on a
 * read-only mount it reports ENOENT for EROFS. Here each error is the kernel's,
 * with the directory that refused it as `path`. Nothing is made on a kernel
 * filesystem (ENOTSUP): under cgroupfs every directory would be a cgroup, left
 * behind when the write that follows fails (QA: --state-dir /sys/fs/cgroup/memory/x).
 * Every directory it makes is drill's own: OWN_DIR_MODE, whatever the umask.
 */
export function makeDirs(dir: string): string | undefined {
  const missing: string[] = [];
  for (let at = path.resolve(dir); ; ) {
    const found = statSync(at, { throwIfNoEntry: false });
    if (found?.isDirectory()) break;
    if (found) throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${at}'`), { code: "ENOTDIR", path: at, syscall: "mkdir" });
    missing.push(at);
    const parent = path.dirname(at);
    if (parent === at) break; // no root: mkdir says why below
    at = parent;
  }
  const base = path.dirname(missing.at(-1) ?? "/");
  if (missing.length > 0 && KERNEL_FS_MAGIC.has(statfsSync(base).type)) {
    throw Object.assign(new Error(`ENOTSUP: a kernel filesystem, mkdir '${missing.at(-1)}'`), { code: "ENOTSUP", path: base, syscall: "mkdir" });
  }
  let first: string | undefined;
  for (const at of missing.reverse()) {
    try {
      mkdirSync(at, { mode: OWN_DIR_MODE });
      chmodSync(at, OWN_DIR_MODE); // exactly: mkdir takes the umask's bits off
    } catch (err) {
      // Made by someone else meanwhile (two drills starting at once): theirs is as good.
      if ((err as NodeJS.ErrnoException).code === "EEXIST" && statSync(at, { throwIfNoEntry: false })?.isDirectory()) continue;
      throw err;
    }
    first ??= at;
  }
  return first;
}
