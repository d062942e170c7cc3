/**
 * A job's KV cache: anonymous memory sized by its prompt, written (page by
 * page) as prefill proceeds and held until the job is done. Without swap in
 * the cgroup it cannot be reclaimed, so it squeezes the weights' page cache:
 * the more packed tokens in flight, the more the weights refault.
 */
const PAGE = 4096;
// Buffers are capped (buffer.constants.MAX_LENGTH); big caches are chunked.
const CHUNK = 256 * 1024 * 1024;

export class KvCache {
  private chunks: Buffer[] = [];
  private touchedBytes = 0;

  constructor(readonly bytes: number) {
    // allocUnsafeSlow: no zero-fill, so no page is touched (charged) before prefill writes it.
    for (let offset = 0; offset < bytes; offset += CHUNK) this.chunks.push(Buffer.allocUnsafeSlow(Math.min(CHUNK, bytes - offset)));
  }

  get touched(): number {
    return this.touchedBytes;
  }

  /** Writes one byte per page in [start, end): every page becomes resident and charged. */
  touch(start: number, end: number): void {
    const from = Math.max(0, Math.floor(start / PAGE) * PAGE);
    const to = Math.min(this.bytes, Math.ceil(end));
    for (let offset = from; offset < to; offset += PAGE) {
      const chunk = this.chunks[Math.floor(offset / CHUNK)];
      if (chunk) chunk[offset % CHUNK] = 1;
    }
    this.touchedBytes = Math.max(this.touchedBytes, to);
  }

  /** Drops the buffers; the memory goes back when V8 collects them (external memory hastens that). */
  release(): void {
    this.chunks = [];
  }
}
