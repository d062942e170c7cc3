import { closeSync, fstatSync, ftruncateSync, openSync, readSync, statSync, writeFileSync, writeSync } from "node:fs";
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
  ) {}

  static open(file: string): Recording {
    // Said as such: opening "" read "cannot open : ENOENT".
    if (file === "") throw new UsageError("--record: is empty; give the file to append the samples to (JSON lines)");
    let fd: number;
    try {
      // A FIFO with no reader would hold the open (and --once) forever; a socket cannot be opened.
      const kind = existingKind(file);
      if (kind !== null) throw new UsageError(`--record: ${file} is a ${kind}, not a file: watch appends JSON lines to a file`);
      // Not group or world writable, whatever the umask (QA: umask 000); the operator's file: readable.
      fd = openSync(file, "a+", 0o644);
    } catch (err) {
      if (err instanceof UsageError) throw err;
      const code = (err as NodeJS.ErrnoException).code ?? "";
      const message = `--record: cannot open ${file}: ${(err as Error).message}`;
      throw USAGE_OPEN_ERRORS.has(code) ? new UsageError(message) : new DrillError(message);
    }
    try {
      const st = fstatSync(fd);
      // A file cut mid-line (a crash, a full disk): the fragment stays its own line, the samples start on the next.
      if (st.isFile() && st.size > 0 && !endsWithNewline(fd, st.size)) writeFileSync(fd, "\n");
      return new Recording(file, fd);
    } catch (err) {
      closeSync(fd);
      throw new DrillError(`--record: cannot write ${file}: ${(err as Error).message}`, undefined, { cause: err });
    }
  }

  /**
   * One sample line, whole (it reaches the file even if watch is killed next).
   * On failure exactly the bytes this append wrote are cut off, counted back
   * from the file's size then: QA cut back to this watch's own byte count,
   * which took another watch's lines into one file, and after an outside
   * truncation (`: > file`, logrotate's copytruncate) grew the file with NULs.
   */
  append(line: string): void {
    if (this.fd === null) return;
    const fd = this.fd;
    // QA: a removed file took every later sample, silently (one fstat a sample, only with --record).
    if (fstatSync(fd).nlink === 0) throw new RecordingRemoved(this.file);
    const bytes = Buffer.from(line);
    let written = 0;
    try {
      // A short write (a filling disk, a file size limit) says nothing: the next call says why.
      while (written < bytes.length) written += writeSync(fd, bytes, written);
    } catch (err) {
      const left = written > 0 && !cutOff(fd, written) ? `; the ${written} byte(s) of the sample it took could not be cut off` : "";
      throw new DrillError(`--record: cannot write ${this.file}: ${(err as Error).message}${left}`, undefined, { cause: err });
    }
  }

  close(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    closeSync(fd);
  }
}

/** The file was removed (unlinked) mid-run: every sample after would go where no one reads it. */
export class RecordingRemoved extends DrillError {
  constructor(file: string) {
    super(`--record: ${file} was removed while watch recorded into it`);
    this.name = "RecordingRemoved";
  }
}

/**
 * Cuts `written` bytes off the end, the end as it is now: only ever shorter
 * (ftruncate past the end adds NULs). False when they are not at the end any
 * more (an outside truncation in between).
 */
function cutOff(fd: number, written: number): boolean {
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return true; // a device: nothing to cut
    if (st.size < written) return false;
    ftruncateSync(fd, st.size - written);
    return true;
  } catch {
    return false;
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
