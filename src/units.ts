import { UsageError } from "./errors.js";

/**
 * A number as an operator types it: decimal digits with at most one point
 * (`12`, `12.5`, `.5`, `0`), nothing around them. Number() also takes `0x10`
 * (16), `1e1` (10), `0b11`, ` 5 ` and `Infinity`: a typo would run the drill
 * on a limit nobody wrote. Flags and drill-file numbers all pass through this.
 */
export const PLAIN_DECIMAL = String.raw`(?:\d+(?:\.\d+)?|\.\d+)`;
const PLAIN_DECIMAL_ONLY = new RegExp(`^${PLAIN_DECIMAL}$`);
export const isPlainDecimal = (text: string): boolean => PLAIN_DECIMAL_ONLY.test(text);
/**
 * A size or a duration: a plain decimal and its unit (`.5G`, `1.5s`, `512M`),
 * nothing around or between them, as every other number (` 8 s `, `64 M` are
 * typos the way ` 5 ` is).
 */
const SIZE = new RegExp(String.raw`^(${PLAIN_DECIMAL})([a-zA-Z]*)$`);
const DURATION = new RegExp(String.raw`^(${PLAIN_DECIMAL})(ms|s|m|h)$`);

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
};

// "MB" is 10^6 to SI, 2^20 to many tools: a limit off by 5 % is a different drill.
const AMBIGUOUS_UNITS = new Set(["kb", "mb", "gb", "tb"]);

/** `2G`, `2GiB`, `512M`, `2147483648` → bytes (IEC: powers of 1024). */
export function parseSize(text: string, flag: string): number {
  const match = SIZE.exec(text);
  if (match && AMBIGUOUS_UNITS.has(match[2]!.toLowerCase())) {
    const iec = match[2]![0]!.toUpperCase();
    throw new UsageError(`${flag}: "${text}" is ambiguous (decimal or binary?); use ${match[1]}${iec} or ${match[1]}${iec}iB (powers of 1024)`);
  }
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) {
    throw new UsageError(`${flag}: "${text}" is not a size (use e.g. 2G, 2GiB, 512M or bytes)`);
  }
  // `.5G` rounds to the byte; a count of bytes with a fraction (`2.5`, `67108864.5`) is a typo, not a size.
  if (unit === 1 && !Number.isInteger(Number(match[1]))) throw new UsageError(`${flag}: "${text}" is not a whole number of bytes`);
  const bytes = Math.round(Number(match[1]) * unit);
  if (!Number.isSafeInteger(bytes)) throw new UsageError(`${flag}: "${text}" is too large`);
  return bytes;
}

/** One page: the least a memory limit, a hog's map or a weights file can be. */
export const PAGE_BYTES = 4096;

/**
 * The most the page toucher can map, whatever the host: fewer than 2^32 pages
 * (pagetoucher.c and .py refuse more with "--size is too large", exit 2).
 * Pages of 4 KiB, the smallest: on 64 KiB pages it could map more, never less.
 */
export const MAX_MAP_BYTES = (2 ** 32 - 1) * PAGE_BYTES;

/**
 * Why a memory limit (cgroup setup and up --memory-max, a drill file's
 * cgroup.memory_max) cannot be used, or null. 0 is not "no limit": the kernel
 * takes it, and every task that joins is OOM-killed at its first page.
 */
export function memoryMaxProblem(bytes: number): string | null {
  if (bytes < PAGE_BYTES) {
    const why = bytes === 0 ? '0 is not "no limit"' : `a size without a unit is bytes: write ${bytes}M for MiB`;
    return `is below one page (${PAGE_BYTES} bytes): every task in the cgroup would be OOM-killed at its first page (${why})`;
  }
  return null;
}

/** The shortest drill `up` runs: its gate and worker alone take longer to be ready. */
export const MIN_DRILL_MS = 1000;

/**
 * Why a drill's duration (up --duration, a drill file's duration) is too
 * short, or null: under a second nothing is sampled or decided, and `1ms` is
 * more likely a typo of `1m` than a rehearsal.
 */
export function drillDurationProblem(durationMs: number): string | null {
  if (durationMs >= MIN_DRILL_MS) return null;
  return `is under ${formatDuration(MIN_DRILL_MS)}: a drill that short records nothing (a typo of 1m?)`;
}

/**
 * Why a map the hog or the worker touches (inject --size, a drill file's
 * inject size and worker.weights) cannot be used, or null: the one bound both
 * the flag and the drill file apply. At least a page; at most what the page
 * toucher can map; and at most the host's RAM + swap (null: unknown, not
 * checked). A larger map could never be resident: the kernel refuses an
 * anonymous one outright (overcommit heuristic: no single map beyond RAM +
 * swap), and a file-backed one would only measure the disk.
 */
export function mapSizeProblem(bytes: number, hostMemoryBytes: number | null): string | null {
  if (bytes < PAGE_BYTES) return `is less than one page (${PAGE_BYTES} bytes)`;
  if (hostMemoryBytes !== null && bytes > hostMemoryBytes) {
    return `is more than this host's RAM + swap (${formatBytes(hostMemoryBytes)}): the host could never hold it`;
  }
  if (bytes > MAX_MAP_BYTES) return `is more than the page toucher can map (fewer than 2^32 pages: under 16TiB)`;
  return null;
}

const DURATION_UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/**
 * The longest duration a flag or drill file may give: 7 days (168h). Each one
 * ends up in a timer, where Node fires at once past 24.8 days (2^31 ms; a
 * gate told `--duration 600h` stopped as it started, a watch at `--interval
 * 600h` sampled back to back), in the page toucher's lifetime (its own cap is
 * this plus its self-exit grace), or beside a job's deadline, capped the same
 * (job.ts). `--since` looks back instead, and a job's deadline and upstream
 * age are checked by the job schema with the job's other fields: they pass no cap.
 */
export const MAX_DURATION_MS = 7 * 24 * 3_600_000;
/** The cap of a duration that is no timer (a look back, a job field the job schema checks). */
export const NO_DURATION_CAP = Number.MAX_SAFE_INTEGER;

/** `report`'s window without --since: the last this-long of the drill's current run. */
export const DEFAULT_REPORT_SINCE = "10m";
/** The longest look back `report --since` takes: ten years reaches past any drill; more was a window starting before year 0. */
export const MAX_REPORT_SINCE_MS = 10 * 365 * 24 * 3_600_000;

/** `8s`, `1500ms`, `10m`, `1h` → milliseconds. A bare number is refused: seconds or ms? */
export function parseDuration(text: string, flag: string, maxMs = MAX_DURATION_MS): number {
  const match = DURATION.exec(text);
  if (!match) throw new UsageError(`${flag}: "${text}" is not a duration (use e.g. 8s, 1500ms, 10m)`);
  const ms = Math.round(Number(match[1]) * DURATION_UNITS[match[2]!]!);
  if (!Number.isSafeInteger(ms)) throw new UsageError(`${flag}: "${text}" is too large${maxMs < NO_DURATION_CAP ? ` (at most ${maxMs / 3_600_000}h)` : ""}`);
  if (ms > maxMs) throw new UsageError(`${flag}: "${text}" must be at most ${maxMs / 3_600_000}h`);
  return ms;
}

/**
 * A duration that must be longer than nothing: how long to run, how long idle
 * before exiting, how far back to report. `--duration 0s` would start and
 * stop at once (exit 0, nothing done); `--since 0s` reported an empty window.
 */
export function parsePositiveDuration(text: string, flag: string, maxMs = MAX_DURATION_MS): number {
  const ms = parseDuration(text, flag, maxMs);
  if (ms === 0) throw new UsageError(`${flag}: "${text}" must be more than 0`);
  return ms;
}


/**
 * A number as text a flag takes back (`up` hands drill-file values to gate,
 * watch and worker): String() writes 1e-7 and 1e+21, which isPlainDecimal
 * refuses, so the exponent is written out. Exact: it reads back as the same number.
 */
export function formatPlainDecimal(n: number): string {
  const text = String(n);
  const match = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(text);
  if (!match) return text;
  const [, sign, lead, fraction = "", exponent] = match;
  const digits = `${lead}${fraction}`;
  const point = 1 + Number(exponent); // where the decimal point goes in digits
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  if (point >= digits.length) return `${sign}${digits}${"0".repeat(point - digits.length)}`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** A count that may be 0 (a retry budget of 0 sends the first reject to dead). */
export function parseWholeNumber(text: string, flag: string): number {
  if (!/^\d+$/.test(text)) throw new UsageError(`${flag}: "${text}" is not a whole number`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new UsageError(`${flag}: "${text}" is too large`);
  return n;
}

/** A count of at least 1: jobs, tokens per pass, concurrency, caps. */
export function parsePositiveInt(text: string, flag: string): number {
  const n = parseWholeNumber(text, flag);
  if (n === 0) throw new UsageError(`${flag}: must be at least 1`);
  return n;
}

export function parseNumber(text: string, flag: string): number {
  if (!isPlainDecimal(text)) throw new UsageError(`${flag}: "${text}" is not a non-negative number (use e.g. 10 or 2.5)`);
  const n = Number(text);
  if (!Number.isFinite(n)) throw new UsageError(`${flag}: "${text}" is too large`);
  return n;
}

/** A PSI avg10 limit: a share of time, 0-100 (over 100 it could never trip). */
export function parsePsiLimit(text: string, flag: string): number {
  const n = parseNumber(text, flag);
  if (n > 100) throw new UsageError(`${flag}: "${text}" is a PSI avg10, a percentage of time (0-100)`);
  return n;
}

const PERCENT = new RegExp(`^(${PLAIN_DECIMAL})%?$`);

/** A percentage, `10` or `10%` (the help shows `<pct>`), from 0 to 100. */
export function parsePercent(text: string, flag: string): number {
  const match = PERCENT.exec(text);
  if (!match) throw new UsageError(`${flag}: "${text}" is not a percentage (use e.g. 10 or 10%)`);
  const pct = Number(match[1]);
  if (pct > 100) throw new UsageError(`${flag}: "${text}" is a percentage (0-100)`);
  return pct;
}

export function formatBytes(bytes: number | null): string {
  if (bytes === null) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let i = 0;
  while (Math.abs(value) >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  return `${i === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)}${units[i]}`;
}

export function formatDuration(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
