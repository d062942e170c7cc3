import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync, writeFileSync, type Stats } from "node:fs";
import path from "node:path";

/**
 * A kernel reading is a value, never a throw and never a silent 0: either the
 * parsed value or the file that failed and why (oomd's "error result").
 */
export type Reading<T> = { ok: true; value: T } | { ok: false; file: string; reason: string };

export const ok = <T>(value: T): Reading<T> => ({ ok: true, value });
export const fail = <T = never>(file: string, reason: string): Reading<T> => ({ ok: false, file, reason });

/** One open, one read: the sidecar must not perturb the host it measures. */
export function readKernelText(file: string): Reading<string> {
  let fd: number;
  try {
    fd = openKernelFile(file);
  } catch (err) {
    return fail(file, kernelReadReason(err));
  }
  try {
    return ok(readFileSync(fd, "utf8"));
  } catch (err) {
    return fail(file, kernelReadReason(err));
  } finally {
    closeSync(fd);
  }
}

const NOT_A_FILE = "ENOTREGULAR";

/**
 * Opens a kernel file for reading without blocking, and only a file: procfs,
 * sysfs and cgroupfs files are regular files, while a FIFO or a device in a
 * --procfs/--sysfs tree would block the open or never end the read (QA: a
 * FIFO for pressure/memory froze the gate on its main thread, past SIGTERM).
 * O_NONBLOCK changes nothing for a regular file's reads.
 */
export function openKernelFile(file: string): number {
  return openOnlyFile(file, constants.O_RDONLY | constants.O_NONBLOCK);
}

/**
 * A value written to a kernel file (cgroupfs), opened as openKernelFile opens
 * one to read: without blocking and only as a file (QA: a FIFO in a --sysfs
 * tree held `cgroup setup` past SIGTERM). Created when absent, as
 * writeFileSync did: cgroupfs makes its files itself, a fake tree may not.
 */
export function writeKernelFile(file: string, value: string): void {
  // O_NOFOLLOW: a link in a fake tree must not carry the write (and O_TRUNC) out of it (QA).
  const fd = openOnlyFile(file, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  try {
    writeFileSync(fd, value);
  } finally {
    closeSync(fd);
  }
}

function openOnlyFile(file: string, flags: number): number {
  let fd: number;
  try {
    fd = openSync(file, flags);
  } catch (err) {
    // A socket, a FIFO with no reader opened to write (ENXIO), a directory opened to write (EISDIR) or a
    // link not followed (ELOOP) fail the open itself: said as what they are.
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENXIO" || code === "EOPNOTSUPP" || code === "EISDIR" || code === "ELOOP") {
      const stat = lstatSync(file, { throwIfNoEntry: false });
      if (stat !== undefined && !stat.isFile()) throw notAFile(stat);
    }
    throw err;
  }
  let stat: Stats;
  try {
    stat = fstatSync(fd);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  if (stat.isFile()) return fd;
  closeSync(fd);
  throw notAFile(stat);
}

function notAFile(stat: Stats): Error {
  const kind = stat.isSymbolicLink() ? "a symbolic link" : stat.isFIFO() ? "a FIFO" : stat.isCharacterDevice() ? "a character device" : stat.isBlockDevice() ? "a block device" : stat.isSocket() ? "a socket" : stat.isDirectory() ? "a directory" : "not a file";
  return Object.assign(new Error(`${kind}, not a file`), { code: NOT_A_FILE });
}

/** Why a kernel file could not be read, in the words `missing` entries use. */
export function kernelReadReason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  const code = e.code ?? "error";
  if (code === NOT_A_FILE) return e.message;
  return code === "ENOENT" ? "missing" : code === "EACCES" || code === "EPERM" ? `unreadable (${code})` : code;
}

/**
 * Every kernel path is read under an injectable root, like node_exporter's
 * --path.procfs/--path.sysfs: the sidecar can run in a container with the host
 * mounted, and tests point it at a fake tree.
 */
export class HostRoots {
  readonly procfs: string;
  readonly sysfs: string;
  constructor(procfs = "/proc", sysfs = "/sys") {
    this.procfs = procfs;
    this.sysfs = sysfs;
  }
  proc(...parts: string[]): string {
    return path.join(this.procfs, ...parts);
  }
  sys(...parts: string[]): string {
    return path.join(this.sysfs, ...parts);
  }
  /** The cgroup mount point (`/sys/fs/cgroup` under the sysfs root). */
  cgroupRoot(): string {
    return path.join(this.sysfs, "fs", "cgroup");
  }
}
