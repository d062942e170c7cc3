import { readFileSync } from "node:fs";
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
  try {
    return ok(readFileSync(file, "utf8"));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "error";
    return fail(file, code === "ENOENT" ? "missing" : code === "EACCES" || code === "EPERM" ? `unreadable (${code})` : code);
  }
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
