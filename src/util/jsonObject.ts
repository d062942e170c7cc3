/** Text (or a Redis reply buffer) parsed as a JSON object; null when it is not one (not JSON, an array, a scalar). */
export function jsonObjectOf(text: Buffer | string): Record<string, unknown> | null {
  let value: unknown;
  try {
    value = JSON.parse(typeof text === "string" ? text : text.toString("utf8"));
  } catch {
    return null;
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}
