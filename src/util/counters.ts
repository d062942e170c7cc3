/**
 * Cumulative counters as drill reads them: the `<q>:stats` counts the gate
 * and worker HINCRBY, and the cgroup's oom_kill. Shared by the sidecar and
 * the report, so both read a count the same way.
 */

/**
 * A `<q>:stats` value as a count: digits only (HINCRBY from 0 never goes
 * negative) and within what a number holds exactly (HINCRBY stops at 2^63;
 * 400 digits set by hand read as Infinity); null when it is not one.
 */
export function parseCount(text: string): number | null {
  if (!/^\d+$/.test(text)) return null;
  const count = Number(text);
  return Number.isSafeInteger(count) ? count : null;
}

/** What a cumulative counter rose by between two readings: a drop means a recreated cgroup, its whole count is new. */
export function counterRise(previous: number, current: number): number {
  return current >= previous ? current - previous : current;
}
