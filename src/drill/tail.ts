import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/**
 * Follows a file that another process appends to, one complete line at a
 * time. The bytes after the last newline wait as bytes: a UTF-8 character the
 * writer had only half written when we read decodes whole on the next read.
 */
export class LineTail {
  private offset = 0;
  private partial: Buffer = Buffer.alloc(0);
  /** The inode read so far: another one under the name is not its writer's file. */
  private ino: number | null = null;
  /** The file read before is gone or was replaced, not said yet (takeLoss). */
  private loss: "removed" | "replaced" | null = null;
  /**
   * Once the file it read is gone or replaced, its writer writes into the
   * removed one: what is under the name now is not its output (QA: a copy put
   * in place was printed again as new decisions), so nothing more is read.
   */
  get lost(): boolean {
    return this.stopped;
  }
  private stopped = false;
  constructor(readonly file: string) {}

  /**
   * Once, after the file it had read was removed or another put in its place:
   * its writer goes on into the removed file, so what it writes from then on
   * is not under this name (QA: up's watch.jsonl deleted mid-run lost the
   * sidecar's samples with no word). From then on it reads nothing (`lost`).
   */
  takeLoss(): "removed" | "replaced" | null {
    const loss = this.loss;
    this.loss = null;
    return loss;
  }

  private stop(loss: "removed" | "replaced"): void {
    this.loss = loss;
    this.stopped = true;
    this.partial = Buffer.alloc(0);
  }

  /**
   * New complete lines since the last call; [] when the file is not there
   * yet, or cannot be read (a directory put in its place: QA, EISDIR threw
   * out of drill up's schedule). What it follows is shown, never decided on.
   */
  read(): string[] {
    if (this.stopped) return [];
    let fd: number;
    try {
      fd = openSync(this.file, "r");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT" && this.ino !== null) this.stop("removed");
      return [];
    }
    try {
      const ino = fstatSync(fd).ino;
      if (this.ino !== null && ino !== this.ino) {
        this.stop("replaced");
        return [];
      }
      this.ino = ino;
      const chunks: Buffer[] = [this.partial];
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        let n: number;
        try {
          n = readSync(fd, buf, 0, buf.length, this.offset);
        } catch {
          return [];
        }
        if (n <= 0) break;
        this.offset += n;
        chunks.push(Buffer.from(buf.subarray(0, n)));
      }
      const bytes = Buffer.concat(chunks);
      // 0x0a never occurs inside a multi-byte UTF-8 character.
      const end = bytes.lastIndexOf(0x0a);
      this.partial = bytes.subarray(end + 1);
      if (end < 0) return [];
      return bytes.subarray(0, end).toString("utf8").split("\n").filter((l) => l.length > 0);
    } finally {
      closeSync(fd);
    }
  }
}

/** Calls onLine for each new line of `file` every 100 ms; the returned stop reads what is left first. */
export function followLines(file: string, onLine: (line: string) => void, everyMs = 100): () => void {
  const tail = new LineTail(file);
  const poll = (): void => {
    for (const line of tail.read()) onLine(line);
  };
  const timer = setInterval(poll, everyMs);
  return () => {
    clearInterval(timer);
    poll();
  };
}
