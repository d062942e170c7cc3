/**
 * The smallest and largest of `values`; null for none. A loop, not
 * Math.min(...values): a recording or `<q>:done` may hold more entries than a
 * call takes arguments (about 120 000: "Maximum call stack size exceeded").
 */
export function extentOf(values: Iterable<number>): { min: number; max: number } | null {
  let min = Infinity;
  let max = -Infinity;
  let any = false;
  for (const v of values) {
    any = true;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return any ? { min, max } : null;
}

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
 * Each count's share of their sum in percent to one decimal, each rounded on
 * its own, so that every share is its count over the total as a reader checks
 * it, and equal counts read equal. The shares may then add up to 99.9 or
 * 100.1. QA X: made to add up to 100.0 (largest remainder), three equal counts
 * read 33.4, 33.3, 33.3 and 3 of 23 read 13.1 %, not 13.0 %.
 * An empty or all-zero list has no shares: nulls.
 */
export function sharesOfHundred(counts: readonly number[]): (number | null)[] {
  const total = counts.reduce((sum, n) => sum + n, 0);
  if (total <= 0) return counts.map(() => null);
  return counts.map((n) => Math.round((n * 1000) / total) / 10);
}
