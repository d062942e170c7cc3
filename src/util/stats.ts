/** Nearest-rank percentile (q in 0..100); null for no values, never a made-up 0. */
export function percentile(values: readonly number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((q / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] ?? null;
}

export function p99(values: readonly number[]): number | null {
  return percentile(values, 99);
}
