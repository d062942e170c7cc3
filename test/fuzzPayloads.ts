/**
 * Generated job payloads for the fuzz runs (RELIABILITY 12), of decodeJob alone
 * and of a real gate: a field set to an odd value, a truncated payload, flipped
 * bytes, random bytes, a forbidden or unknown key on an otherwise good job.
 * Deterministic (mulberry32): a failure is reproducible from the seed.
 */
export function seededRandom(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WEIRD: unknown[] = [null, true, -1, 0, 1.5, Number.POSITIVE_INFINITY, -0, "", "x", "NaN", [], {}, { a: 1 }, 2 ** 53, "__proto__", "\u0000", "\ud800"];

/** `count` payloads made from `good` (a valid job); the i-th of shape 4 carries id String(i). */
export function fuzzPayloads(seed: number, count: number, good: Record<string, unknown>): Buffer[] {
  const random = seededRandom(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const json = (value: unknown) => Buffer.from(JSON.stringify(value));
  const base = JSON.stringify(good);
  const payloads: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const shape = i % 5;
    if (shape === 0) {
      const field = pick(Object.keys(good));
      payloads.push(json({ ...good, [field]: pick(WEIRD) }));
    } else if (shape === 1) payloads.push(Buffer.from(base.slice(0, Math.floor(random() * base.length))));
    else if (shape === 2) {
      const bytes = Buffer.from(base);
      for (let j = 0; j < 3; j++) bytes[Math.floor(random() * bytes.length)] = Math.floor(random() * 256);
      payloads.push(bytes);
    } else if (shape === 3) payloads.push(Buffer.from(Array.from({ length: Math.floor(random() * 200) }, () => Math.floor(random() * 256))));
    else payloads.push(json({ ...good, id: String(i), prompt_tokens: Math.floor(random() * 100_000), [pick(["__proto__", "constructor", "extra", "reason"])]: pick(WEIRD) }));
  }
  return payloads;
}
