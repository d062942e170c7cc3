import { fail, ok, readKernelText, type HostRoots, type Reading } from "./kernelFile.js";

export interface PsiLine {
  avg10: number;
  avg60: number;
  avg300: number;
  /** Cumulative stall time in microseconds. */
  total: number;
}

export interface Psi {
  some: PsiLine;
  /** Absent on older kernels and for cpu at the system level: decide on `some`. */
  full: PsiLine | null;
}

export type PsiResource = "memory" | "cpu" | "io";

const PSI_FIELDS = ["avg10", "avg60", "avg300", "total"] as const;
/** avg10/avg60/avg300 are the share of time stalled: a percentage, never above 100. */
const MAX_AVG_PCT = 100;

/**
 * Parses /proc/pressure/<resource> or a cgroup's <resource>.pressure:
 *   some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459
 *   full avg10=0.00 avg60=0.00 avg300=0.00 total=0
 * Bad text is an error value (systemd's test-psi-util table): garbage,
 * `avg10=0.22=55`, a duplicated field, a missing field, an avg above 100 (a
 * percentage). Extra fields are
 * tolerated; a missing `full` line is fine.
 */
export function parsePsi(text: string, file: string): Reading<Psi> {
  const usual = scanUsualPsi(text);
  return usual !== null ? ok(usual) : parsePsiStrictly(text, file);
}

/** parsePsi's reference: every check, at the price of a split, a regex and a Map per line. */
export function parsePsiStrictly(text: string, file: string): Reading<Psi> {
  let some: PsiLine | null = null;
  let full: PsiLine | null = null;
  for (const rawLine of text.split("\n")) {
    const line = rawLine.trim();
    if (line === "") continue;
    const [kind, ...pairs] = line.split(/\s+/);
    if (kind !== "some" && kind !== "full") {
      if (kind === undefined || !/^[a-z_]+$/.test(kind)) return fail(file, `unparseable line "${truncate(line)}"`);
      continue; // a future line kind: tolerated
    }
    const fields = new Map<string, number>();
    for (const pair of pairs) {
      const parts = pair.split("=");
      if (parts.length !== 2 || parts[0] === "" || parts[1] === "") return fail(file, `bad field "${truncate(pair)}" in ${kind} line`);
      const [name, value] = parts as [string, string];
      if (fields.has(name)) return fail(file, `duplicated field ${name} in ${kind} line`);
      if (!/^\d+(\.\d+)?$/.test(value)) return fail(file, `bad number ${name}=${truncate(value)} in ${kind} line`);
      // Digits past what a double holds are Infinity: every rate from it would be NaN.
      if (!Number.isFinite(Number(value))) return fail(file, `${name} out of range (too many digits) in ${kind} line`);
      fields.set(name, Number(value));
    }
    const parsed: Partial<PsiLine> = {};
    for (const name of PSI_FIELDS) {
      const value = fields.get(name);
      if (value === undefined) return fail(file, `missing ${name} in ${kind} line`);
      if (name !== "total" && value > MAX_AVG_PCT) return fail(file, `${name}=${value.toFixed(2)} above 100% in ${kind} line`);
      parsed[name] = value;
    }
    if (kind === "some") {
      if (some) return fail(file, "duplicated some line");
      some = parsed as PsiLine;
    } else {
      if (full) return fail(file, "duplicated full line");
      full = parsed as PsiLine;
    }
  }
  if (!some) return fail(file, text.trim() === "" ? "empty" : "no some line");
  return ok({ some, full });
}

const isDigit = (c: number): boolean => c >= 48 && c <= 57;
const USUAL_FIELDS = [" avg10=", " avg60=", " avg300=", " total="] as const;

/**
 * The file exactly as the kernel prints it (psi_show), read without making a
 * string per field: the sidecar reads two PSI files a sample for the whole
 * drill, and its short-lived strings are most of its page faults and
 * scavenges. Returns null for anything else (blanks, extra fields or lines,
 * bad numbers, an avg above 100), which parsePsiStrictly then accepts or names.
 */
export function scanUsualPsi(text: string): Psi | null {
  let some: PsiLine | null = null;
  let full: PsiLine | null = null;
  let at = 0;
  const end = text.length;
  while (at < end) {
    let eol = text.indexOf("\n", at);
    if (eol < 0) eol = end;
    const isSome = text.startsWith("some", at);
    if (!isSome && !text.startsWith("full", at)) return null;
    if (isSome ? some !== null : full !== null) return null;
    let i = at + 4;
    const values = [0, 0, 0, 0];
    for (let f = 0; f < USUAL_FIELDS.length; f++) {
      const field = USUAL_FIELDS[f]!;
      if (!text.startsWith(field, i)) return null;
      i += field.length;
      const start = i;
      while (i < eol && isDigit(text.charCodeAt(i))) i++;
      if (i === start) return null;
      if (f < 3 && i < eol && text.charCodeAt(i) === 46 /* . */) {
        const fraction = ++i;
        while (i < eol && isDigit(text.charCodeAt(i))) i++;
        if (i === fraction) return null;
      }
      values[f] = Number(text.slice(start, i));
      if ((f < 3 && values[f]! > MAX_AVG_PCT) || values[f] === Infinity) return null;
    }
    if (i !== eol) return null;
    const line: PsiLine = { avg10: values[0]!, avg60: values[1]!, avg300: values[2]!, total: values[3]! };
    if (isSome) some = line;
    else full = line;
    at = eol + 1;
  }
  return some === null ? null : { some, full };
}

/** A PSI file at an explicit path (e.g. a cgroup's memory.pressure). */
export function readPsiFile(file: string): Reading<Psi> {
  const text = readKernelText(file);
  return text.ok ? parsePsi(text.value, file) : text;
}

/** Host PSI: <procfs>/pressure/<resource>. */
export function readHostPsi(roots: HostRoots, resource: PsiResource = "memory"): Reading<Psi> {
  return readPsiFile(roots.proc("pressure", resource));
}

/** Stall % over an interval from two `total` counters (µs): reacts where avg10 lags. */
export function stallRatePct(prevTotalUs: number, nextTotalUs: number, elapsedMs: number): number | null {
  if (elapsedMs <= 0 || nextTotalUs < prevTotalUs) return null; // counter reset (cgroup recreated)
  return Math.min(100, ((nextTotalUs - prevTotalUs) / 1000 / elapsedMs) * 100);
}

function truncate(text: string): string {
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}
