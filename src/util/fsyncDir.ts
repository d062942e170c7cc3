import { closeSync, fsyncSync, openSync } from "node:fs";

/**
 * fsyncs a directory: a name just linked, renamed or unlinked in it is on disk
 * only then (fsyncing the file's data does not write its directory entry).
 */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
