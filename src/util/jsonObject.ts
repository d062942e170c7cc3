/**
 * Text (or a Redis reply buffer) parsed as a JSON object; null when it is not
 * one (not JSON, an array, a scalar). A leading UTF-8 byte order mark is
 * dropped, as the gate's decodeJob drops it (TextDecoder): a job the gate
 * admitted must not read as a non-job here (its id and deadline missing from
 * the report's lists).
 */
export function jsonObjectOf(text: Buffer | string): Record<string, unknown> | null {
  const whole = typeof text === "string" ? text : text.toString("utf8");
  let value: unknown;
  try {
    value = JSON.parse(whole.charCodeAt(0) === 0xfeff ? whole.slice(1) : whole);
  } catch {
    return null;
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}
