import { closeSync, openSync, readSync } from "node:fs";

/** Follows a file that another process appends to, one complete line at a time. */
export class LineTail {
  private offset = 0;
  private partial = "";
  constructor(readonly file: string) {}

  /** New complete lines since the last call; [] when the file is not there yet. */
  read(): string[] {
    let fd: number;
    try {
      fd = openSync(this.file, "r");
    } catch {
      return [];
    }
    try {
      const chunks: Buffer[] = [];
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, this.offset);
        if (n <= 0) break;
        this.offset += n;
        chunks.push(Buffer.from(buf.subarray(0, n)));
      }
      const text = this.partial + Buffer.concat(chunks).toString("utf8");
      const lines = text.split("\n");
      this.partial = lines.pop() ?? "";
      return lines.filter((l) => l.length > 0);
    } finally {
      closeSync(fd);
    }
  }
}
