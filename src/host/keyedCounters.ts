import { fail, ok, type Reading } from "./kernelFile.js";

/** A strict parser of a whole `name value` file: the scan's reference, and its answer to anything unusual. */
export type StrictKeyedParser = (text: string, file: string) => Reading<ReadonlyMap<string, number>>;

const isNameChar = (c: number): boolean => (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 95; // a-z 0-9 _
const isBlank = (c: number): boolean => c === 32 || c === 9 || c === 13 || c === 11 || c === 12;
const isDigit = (c: number): boolean => c >= 48 && c <= 57;

/**
 * `name value` files (/proc/vmstat, memory.stat, memory.events,
 * memory.oom_control) with only `names` kept, for a reader that runs every
 * sample. It checks every line the way the strict parsers do, but without a
 * regex, a split or a string per line: the sidecar runs for the whole drill,
 * and every short-lived string it makes ends up as page faults and scavenges
 * in its CPU cost (bench/watch-vs-shell.mjs). Names are compared in place;
 * only the kept values are cut out of the text.
 *
 * Anything the scan does not expect (a negative value, a duplicated name, no
 * line at all) is handed to `strict`, so bad text gets the same error value
 * as the full parser gives, and good text the same numbers. One difference:
 * a name printed twice is only caught among `names` (the kernel never prints
 * one twice; catching any would take a set of every name, every sample).
 */
export function scanKeyedCounters(text: string, file: string, names: readonly string[], strict: StrictKeyedParser): Reading<Map<string, number>> {
  const kept = new Map<string, number>();
  let lines = 0;
  const end = text.length;
  let at = 0;
  while (at < end) {
    let eol = text.indexOf("\n", at);
    if (eol < 0) eol = end;
    let i = at;
    let last = eol;
    while (i < last && isBlank(text.charCodeAt(i))) i++;
    while (last > i && isBlank(text.charCodeAt(last - 1))) last--;
    if (i < last) {
      // name, blanks, digits: /^([a-z0-9_]+)\s+(\d+)$/ after trim
      const nameStart = i;
      while (i < last && isNameChar(text.charCodeAt(i))) i++;
      const nameLength = i - nameStart;
      while (i < last && isBlank(text.charCodeAt(i))) i++;
      const valueStart = i;
      while (i < last && isDigit(text.charCodeAt(i))) i++;
      if (nameLength === 0 || valueStart === nameStart + nameLength || i === valueStart || i !== last) return keep(strict(text, file), file, names);
      lines++;
      for (let n = 0; n < names.length; n++) {
        const name = names[n]!;
        if (name.length !== nameLength || !text.startsWith(name, nameStart)) continue;
        if (kept.has(name)) return keep(strict(text, file), file, names);
        kept.set(name, Number(text.slice(valueStart, last)));
        break;
      }
    }
    at = eol + 1;
  }
  return lines === 0 ? keep(strict(text, file), file, names) : inRange(kept, file);
}

function keep(parsed: Reading<ReadonlyMap<string, number>>, file: string, names: readonly string[]): Reading<Map<string, number>> {
  if (!parsed.ok) return parsed;
  const kept = new Map<string, number>();
  for (const [name, value] of parsed.value) if (names.includes(name)) kept.set(name, value);
  return inRange(kept, file);
}

/**
 * A kept count below 0 (the strict flat-keyed parser allows a sign) or past
 * what a double holds (Infinity, whose rates are NaN) is no count the kernel
 * prints: unreadable, not a number to take as read.
 */
function inRange(kept: Map<string, number>, file: string): Reading<Map<string, number>> {
  for (const [name, value] of kept) {
    if (value < 0 || !Number.isFinite(value)) return fail(file, `${name} out of range: ${value < 0 ? "negative" : "too many digits"}`);
  }
  return ok(kept);
}
