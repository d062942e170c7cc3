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

