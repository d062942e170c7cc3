/** A value found where another was expected, as a reason names it: `"lots"`, `-3`, `null`, `a list`, `an object`, `undefined`. */
export function shownValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "number") return String(value);
  return value === null ? "null" : Array.isArray(value) ? "a list" : typeof value === "object" ? "an object" : typeof value;
}
