/** Nearest-rank percentile (q in 0..100); null for no values, never a made-up 0. */
export function percentile(values: readonly number[], q: number): number | null {
  return percentileOf(values, (v) => v, q);
}

/**
 * percentile of one figure of each item, copied once into a typed array
 * (numeric sort, no comparator calls, no intermediate array): the sidecar and
 * the gate take a p99 over their stall window every sample.
 */
export function percentileOf<T>(items: readonly T[], figure: (item: T) => number, q: number): number | null {
  if (items.length === 0) return null;
  const sorted = new Float64Array(items.length);
  for (let k = 0; k < items.length; k++) sorted[k] = figure(items[k]!);
  sorted.sort();
  const rank = Math.max(1, Math.ceil((q / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] ?? null;
}


/**
 * Each count's share of their sum in percent to one decimal, rounded so the
 * shares add up to exactly 100.0 (largest remainder: the tenths lost to
 * rounding down go to the counts that lost most, earlier first on a tie).
 * Rounding each on its own made three equal counts 99.9 % in an incident note.
 * An empty or all-zero list has no shares: nulls.
 */
export function sharesOfHundred(counts: readonly number[]): (number | null)[] {
  const total = counts.reduce((sum, n) => sum + n, 0);
  if (total <= 0) return counts.map(() => null);
  const exact = counts.map((n) => (n * 1000) / total);
  const tenths = exact.map(Math.floor);
  let left = 1000 - tenths.reduce((sum, t) => sum + t, 0);
  const byRemainder = exact.map((e, i) => ({ i, lost: e - tenths[i]! })).sort((a, b) => b.lost - a.lost || a.i - b.i);
  for (const { i } of byRemainder) {
    if (left <= 0) break;
    tenths[i]!++;
    left--;
  }
  return tenths.map((t) => t / 10);
}
