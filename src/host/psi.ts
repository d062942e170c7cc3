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

/**
 * Parses /proc/pressure/<resource> or a cgroup's <resource>.pressure:
 *   some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459
 *   full avg10=0.00 avg60=0.00 avg300=0.00 total=0
 * Bad text is an error value (systemd's test-psi-util table): garbage,
 * `avg10=0.22=55`, a duplicated field, a missing field. Extra fields are
 * tolerated; a missing `full` line is fine.
 */
export function parsePsi(text: string, file: string): Reading<Psi> {
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
      fields.set(name, Number(value));
    }
    const parsed: Partial<PsiLine> = {};
    for (const name of PSI_FIELDS) {
      const value = fields.get(name);
      if (value === undefined) return fail(file, `missing ${name} in ${kind} line`);
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
