import { closeSync, fstatSync, ftruncateSync, openSync, readSync, statSync, writeFileSync } from "node:fs";
import { DrillError, UsageError } from "../errors.js";

// A path the operator typed: a missing dir or a read-only place is bad input (exit 2), not a failed watch.
const USAGE_OPEN_ERRORS = new Set(["ENOENT", "ENOTDIR", "EISDIR", "EACCES", "EPERM", "EROFS", "ENAMETOOLONG", "ELOOP"]);

/**
 * `watch --record`: one JSON sample a line, appended whole or not at all, so
 * the file stays JSONL through a full disk and a second recording into it.
 * QA: ENOSPC left half a record at the end, and the next recording's first
 * sample was glued to it (both lines unreadable).
 */
export class Recording {
  private constructor(
    readonly file: string,
    private fd: number | null,
    /** Where the last whole line ends: a failed write is cut back to it. */
    private end: number,
  ) {}

  static open(file: string): Recording {
    let fd: number;
    try {
      // A FIFO with no reader would hold the open (and --once) forever; a socket cannot be opened.
      const kind = existingKind(file);
      if (kind !== null) throw new UsageError(`--record: ${file} is a ${kind}, not a file: watch appends JSON lines to a file`);
      fd = openSync(file, "a+");
    } catch (err) {
      if (err instanceof UsageError) throw err;
      const code = (err as NodeJS.ErrnoException).code ?? "";
      const message = `--record: cannot open ${file}: ${(err as Error).message}`;
      throw USAGE_OPEN_ERRORS.has(code) ? new UsageError(message) : new DrillError(message);
    }
    try {
      const st = fstatSync(fd);
      let end = st.size;
      // A file cut mid-line (a crash, a full disk): the fragment stays its own line, the samples start on the next.
      if (st.isFile() && end > 0 && !endsWithNewline(fd, end)) {
        writeFileSync(fd, "\n");
        end += 1;
      }
      return new Recording(file, fd, end);
    } catch (err) {
      closeSync(fd);
      throw new DrillError(`--record: cannot write ${file}: ${(err as Error).message}`, undefined, { cause: err });
    }
  }

  /** One sample line, in one write (it reaches the file even if watch is killed next); on failure the part written is cut off. */
  append(line: string): void {
    if (this.fd === null) return;
    try {
      // writeFileSync, not writeSync: that may write part (disk full, file size limit) and say nothing.
      writeFileSync(this.fd, line);
      this.end += Buffer.byteLength(line);
    } catch (err) {
      try {
        ftruncateSync(this.fd, this.end);
      } catch {
        // a device or a pipe: nothing to cut
      }
      throw new DrillError(`--record: cannot write ${this.file}: ${(err as Error).message}`, undefined, { cause: err });
    }
  }

  close(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    closeSync(fd);
  }
}

function existingKind(file: string): string | null {
  try {
    const st = statSync(file);
    return st.isFIFO() ? "FIFO" : st.isSocket() ? "socket" : null;
  } catch {
    return null; // absent (created by the open) or unreadable: the open says why
  }
}

function endsWithNewline(fd: number, size: number): boolean {
  const last = Buffer.alloc(1);
  return readSync(fd, last, 0, 1, size - 1) === 1 && last[0] === 0x0a;
}
