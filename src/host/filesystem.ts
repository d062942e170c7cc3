import { accessSync, constants, statfsSync, statSync } from "node:fs";
import path from "node:path";
import { RefusedError, UsageError } from "../errors.js";
import { formatBytes } from "../units.js";

// statfs f_type values (linux/magic.h) worth naming.
const FS_TYPES: Record<number, string> = {
  0x01021994: "tmpfs",
  0x858458f6: "ramfs",
  0xef53: "ext4",
  0x58465342: "xfs",
  0x9123683e: "btrfs",
  0x6969: "nfs",
  0x794c7630: "overlayfs",
  0x2fc12fc1: "zfs",
  0x65735546: "fuse",
  0x9fa0: "proc",
  0x62656572: "sysfs",
  0x27e0eb: "cgroup",
  0x63677270: "cgroup2",
};

/**
 * procfs, sysfs, cgroup v1 and v2: their files regenerate on every read and
 * their directories are no place for files (under cgroupfs each is a cgroup).
 */
export const KERNEL_FS_MAGIC: ReadonlySet<number> = new Set([0x9fa0, 0x62656572, 0x27e0eb, 0x63677270]);

/** On these, file pages are shmem: not reclaimable without swap, so a "thrash" becomes an OOM. */
const MEMORY_FILESYSTEMS = new Set(["tmpfs", "ramfs"]);

export function filesystemName(type: number): string {
  return FS_TYPES[type] ?? `0x${type.toString(16)}`;
}

/** procfs, sysfs, cgroupfs by the names filesystemName gives them. */
export function isKernelFilesystem(name: string): boolean {
  return [...KERNEL_FS_MAGIC].some((type) => filesystemName(type) === name);
}

export function isMemoryFilesystem(name: string): boolean {
  return MEMORY_FILESYSTEMS.has(name);
}

/** Where the hog's and worker's files go unless --file-dir says otherwise: a disk filesystem on stock hosts, unlike /tmp on some. */
export const DEFAULT_FILE_DIR = "/var/tmp";

/** Room kept free beyond the file itself. */
export const FREE_MARGIN_BYTES = 64 * 1024 * 1024;

export interface FileDirCheck {
  dir: string;
  fsType: string;
  freeBytes: number;
}

/**
 * Why `dir` cannot hold drill's files, or null when it is an existing
 * directory this user may make files in. statfs alone answers for a regular file too (its filesystem), so
 * without this a file given as the dir fails only once the hog or worker runs.
 */
export function directoryProblem(dir: string): string | null {
  try {
    if (!statSync(dir).isDirectory()) return `${dir} is not a directory`;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // ENOTDIR: a file on the way (`/etc/passwd/x`); there is no such dir either.
    return `${dir} ${code === "ENOENT" || code === "ENOTDIR" ? "does not exist" : `cannot be read (${code ?? (err as Error).message})`}`;
  }
  // QA: a read-only mount passed doctor and inject; the hog then failed at its file's create, mid-drill.
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === "EROFS" ? `${dir} is on a read-only filesystem (EROFS): no file can be made there` : `${dir} is not writable (${code ?? (err as Error).message})`;
  }
}

/**
 * A directory flag as typed, made absolute against the caller's cwd: every
 * command takes `--file-dir files` as the operator's shell would (up and
 * doctor did, inject and worker refused it). Empty is refused: it would
 * resolve to the cwd, a directory nobody named.
 */
export function absoluteDir(raw: string, flag: string, cwd: string = process.cwd()): string {
  if (raw === "") throw new UsageError(`${flag}: is empty`);
  return path.resolve(cwd, raw);
}

/** `dir` is an existing directory, else exit 2 naming `flag`. */
export function requireDirectory(dir: string, flag: string): void {
  const problem = directoryProblem(dir);
  if (problem) throw new UsageError(`${flag}: ${problem}; give an existing directory on a disk filesystem`);
}

/**
 * A directory for a hog's or the worker's file: absolute, an existing
 * directory, on a disk filesystem (reclaimable page cache), with room for the
 * file and a margin. `flag` names the option at fault in every error; `what`
 * the file.
 */
export function checkFileDir(dir: string, sizeBytes: number, flag: string, what: string): FileDirCheck {
  if (!path.isAbsolute(dir)) throw new UsageError(`${flag}: "${dir}" must be an absolute path`);
  requireDirectory(dir, flag);
  let stats: ReturnType<typeof statfsSync>;
  try {
    stats = statfsSync(dir);
  } catch (err) {
    throw new UsageError(`${flag}: cannot use ${dir}: ${(err as Error).message}`);
  }
  const fsType = filesystemName(stats.type);
  // Said as what it is, not as "0B free" (QA: /proc, the cgroup tree).
  if (isKernelFilesystem(fsType)) {
    throw new UsageError(`${flag}: ${dir} is on a kernel filesystem (procfs, sysfs, cgroupfs), where no file can be made (under cgroupfs a directory is a cgroup); give a directory on a disk filesystem such as /var/tmp`);
  }
  if (isMemoryFilesystem(fsType)) {
    throw new RefusedError(`${flag} ${dir} is on ${fsType}: ${what} would be shmem, not reclaimable without swap (an OOM, not thrash); use a disk filesystem such as /var/tmp`);
  }
  const freeBytes = stats.bavail * stats.bsize;
  if (freeBytes < sizeBytes + FREE_MARGIN_BYTES) {
    throw new RefusedError(`${flag} ${dir} has ${formatBytes(freeBytes)} free; ${what} needs ${formatBytes(sizeBytes)} plus ${formatBytes(FREE_MARGIN_BYTES)} to spare`);
  }
  return { dir, fsType, freeBytes };
}
