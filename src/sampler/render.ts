import type { ChalkInstance } from "chalk";
import { glyphsFor, type Glyphs } from "../charset.js";
import { formatBytes, formatDuration } from "../units.js";
import type { AlarmEvent } from "./alarms.js";
import { formatMoreRejects, NO_REJECTS, type RejectBatch } from "./rejects.js";
import { MODE_FAILS_CLOSED, PARTIAL_ADMITTED_SCAN, type Sample } from "./step.js";

/**
 * What an operator sees. On a TTY: a small live view redrawn in place, at
 * most 80 columns wide, with trends for PSI, slack and cgroup memory, and
 * alarm lines scrolling above it, the gate's last reject lines in it. On a
 * narrower or shorter terminal it drops the trends, then its least urgent
 * rows, rather than let a line wrap (a wrapped line breaks the redraw in
 * place). Piped: one plain line per sample, after the reject and alarm lines,
 * no colour and no cursor movement, so `| grep PAGE` works. Under a locale
 * that is not UTF-8 the view is ASCII (charset.ts), trends included.
 */

const WIDTH = 80;
const LABEL = 9;
const SPARK = 16;
const UNICODE = glyphsFor(true);

/** A trend of the last values, in `bars` (lowest level first); null (unreadable) is a gap. Scaled between the window's min and max. */
export function sparkline(values: Array<number | null>, width = SPARK, scale: SparkScale = {}, bars = UNICODE.bars): string {
  const tail = values.slice(-width);
  const known = tail.filter((v): v is number => v !== null);
  if (known.length === 0) return " ".repeat(tail.length);
  const min = Math.min(scale.from ?? Infinity, ...known);
  const max = Math.max(min + (scale.minSpan ?? 0), ...known);
  return tail
    .map((v) => {
      if (v === null) return " ";
      const level = max === min ? 0 : Math.round(((v - min) / (max - min)) * (bars.length - 1));
      return bars[level] ?? " ";
    })
    .join("");
}

/**
 * A trend's scale beyond its window's own min and max: a floor it always
 * shows (`from`), and the least span it stretches over (`minSpan`). Scaled
 * to the window alone, PSI easing from 0.10 to 0.08 on an idle host drew a
 * full-height fall, which reads as a spike (QA).
 */
export interface SparkScale {
  from?: number;
  minSpan?: number;
}

/** PSI from 0, over at least the runbook's limit (10.00): bars rise with pressure, not with noise. */
const PSI_SCALE: SparkScale = { from: 0, minSpan: 10 };
/** Slack over at least a second: jitter of a few ms stays flat. */
const SLACK_SCALE: SparkScale = { minSpan: 1000 };

/** Memory from 0 up to the cgroup's limit when it has one: the bars say how full it is, not how it wobbles. */
function memoryScale(limit: number | null): SparkScale {
  return { from: 0, minSpan: limit ?? 0 };
}

const num = (v: number | null, digits = 2): string => (v === null ? "n/a" : v.toFixed(digits));
const int = (v: number | null): string => (v === null ? "n/a" : String(Math.round(v)));
const pct = (v: number | null): string => (v === null ? "n/a" : `${Math.round(v)}%`);
const perSecond = (v: number | null): string => (v === null ? "n/a" : `${Math.round(v)}/s`);
const ms = (v: number | null): string => (v === null ? "n/a" : Math.abs(v) >= 10_000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}ms`);
const bytes = (v: number | "max" | null): string => (v === "max" ? "max" : formatBytes(v));
/** Stall % to one decimal: 100.0% at most, so the PSI lines fit at their widest. */
const rate = (v: number | null): string => (v === null ? "n/a" : `${v.toFixed(1)}%`);

/** stall_ms_p99 comes from the worker cgroup's PSI when it is readable, else the host's: say so on the cgroup's line. */
function stallSegment(s: Sample): string {
  const host = s.cg_psi_mem_some_avg10 === null && s.stall_ms_p99 !== null;
  return `p99 stall ${ms(s.stall_ms_p99)}${host ? " (host)" : ""}`;
}

/**
 * deadline_slack_ms, or why it is n/a when the admitted list was too long to
 * read whole (`slack n/a (oldest 2000 of 9893 admitted read)`): a bare n/a
 * beside a long queue reads as "no job waiting".
 */
function slackSegment(s: Sample): string {
  const partial = s.deadline_slack_ms === null ? s.missing.find((m) => m.field === "deadline_slack_ms" && m.reason.startsWith(PARTIAL_ADMITTED_SCAN)) : undefined;
  const read = partial && /(\d+ of \d+) admitted/.exec(partial.reason);
  return read ? `slack n/a (oldest ${read[1]} admitted read)` : `slack ${ms(s.deadline_slack_ms)}`;
}

function rejectedSegments(rejected: Record<string, number> | null): string[] {
  if (rejected === null) return ["rejected n/a"];
  const parts = Object.entries(rejected).map(([reason, n]) => `${reason.replace(/^reject_/, "")}=${n}`);
  return parts.length === 0 ? ["rejected 0"] : [`rejected ${parts[0]}`, ...parts.slice(1)];
}

/**
 * What the gate does with its lever: gate_mode, or, when <q>:mode is not a
 * mode, reject_all (it fails closed) with what the key holds in the gate's own
 * words (`reject_all mode_value=reject-all`, `reject_all mode_type=hash`).
 * Null when unknown (Redis not read).
 */
export function gateModeShown(s: Sample): string | null {
  if (s.gate_mode !== null) return s.gate_mode;
  const closed = s.missing.find((m) => m.field === "gate_mode" && m.reason.startsWith(MODE_FAILS_CLOSED));
  return closed ? `reject_all ${closed.reason.slice(MODE_FAILS_CLOSED.length).trim()}` : null;
}

/**
 * One line per sample for pipes and logs: k=v in the runbook's names, in the
 * live view's units (memory in KiB/MiB/GiB, stall rates in % to one decimal,
 * ms whole); the exact figures are in --json and --record.
 */
export function formatSampleLine(s: Sample): string {
  const fields = [
    s.ts,
    `queue_len=${s.queue_len ?? "n/a"}`,
    `queue_age_ms=${s.queue_age_ms ?? "n/a"}`,
    `slack_ms=${s.deadline_slack_ms ?? "n/a"}`,
    `psi=${num(s.psi_mem_some_avg10)}`,
    `psi_rate=${rate(s.psi_mem_some_rate)}`,
    `cg_psi=${num(s.cg_psi_mem_some_avg10)}`,
    `cg_psi_rate=${rate(s.cg_psi_mem_some_rate)}`,
    `si=${s.si ?? "n/a"}`,
    `so=${s.so ?? "n/a"}`,
    `cg_mem=${bytes(s.cg_mem_current)}`,
    `cg_oom_kill=${s.cg_oom_kill ?? "n/a"}`,
    `cpu_idle=${pct(s.cpu_idle_pct)}`,
    `stall_ms_p99=${int(s.stall_ms_p99)}`,
    `tokens_out=${s.tokens_out ?? "n/a"}`,
    `gate_mode=${gateModeShown(s) ?? "n/a"}`,
    `alarm=${s.alarm.length === 0 ? "none" : s.alarm.join(",")}`,
  ];
  if (s.missing.length > 0) fields.push(`missing=${[...new Set(s.missing.map((m) => m.field))].join(",")}`);
  return fields.join(" ");
}

/** One short line of the signals that matter while a drill runs (`drill up` prints it every few seconds). */
export function formatStatusLine(s: Sample): string {
  return [
    `psi=${num(s.psi_mem_some_avg10)}`,
    `rate=${rate(s.psi_mem_some_rate)}`,
    `cg_rate=${rate(s.cg_psi_mem_some_rate)}`,
    `cg_mem=${bytes(s.cg_mem_current)}/${bytes(s.cg_mem_max)}`,
    `slack=${ms(s.deadline_slack_ms)}`,
    `queue_age=${ms(s.queue_age_ms)}`,
    `cpu_idle=${pct(s.cpu_idle_pct)}`,
    `tokens_out=${int(s.tokens_out)}`,
    `oom_kill=${int(s.cg_oom_kill)}`,
  ].join(" ");
}

export function formatAlarmEvent(event: AlarmEvent, color: ChalkInstance): string {
  return event.kind === "raised" ? color.red.bold(event.line) : color.green(event.line);
}

/**
 * An alarm line as the live view prints it above the frame: wrapped at word
 * breaks to the terminal's width, the rest indented, so a repaint knows how
 * many lines it takes (QA: a PAGE line wider than the terminal wrapped where
 * the terminal chose, and a repaint counted it as one line).
 */
function alarmEventLines(event: AlarmEvent, color: ChalkInstance, columns: number, glyphs: Glyphs): string[] {
  return wrapWords(glyphs.text(event.line), Math.max(1, columns), glyphs).map((line) => formatAlarmEvent({ ...event, line }, color));
}

export interface LiveViewHeader {
  cgroup: string;
  queue: string;
  intervalMs: number;
}

/** The terminal's size; rows Infinity when unknown. */
export interface ViewSize {
  columns: number;
  rows: number;
}

/** A segment longer than the whole width: the one place a value is cut, and only on an absurdly narrow terminal. */
function cut(text: string, width: number, glyphs: Glyphs): string {
  return text.length > width ? `${text.slice(0, Math.max(0, width - glyphs.ellipsis.length))}${glyphs.ellipsis}`.slice(0, width) : text;
}

/**
 * One row of the view: a label and the segments after it ("some 12.40",
 * "rate 23.3%"), each kept whole. A row that does not fit its width goes on
 * under its label on the next line instead of being cut.
 */
interface Row {
  label: string;
  segments: string[];
  trend?: string;
  /** Rows dropped first (highest number) when the terminal has fewer lines than the frame. */
  priority: number;
  style?: (line: string) => string;
  /** Each segment a line of its own (a reject line), words that do not fit going on under it. */
  linePerSegment?: boolean;
}

const GAP = "  ";

/** Greedy packing of whole segments into lines of at most `width` columns. */
function pack(segments: string[], width: number, glyphs: Glyphs): string[] {
  const lines: string[] = [];
  let line = "";
  for (const raw of segments) {
    const segment = cut(raw, width, glyphs);
    if (line === "") line = segment;
    else if (line.length + GAP.length + segment.length <= width) line += GAP + segment;
    else {
      lines.push(line);
      line = segment;
    }
  }
  lines.push(line);
  return lines;
}

/** A line of words in lines of at most `width`, the ones after the first indented: a reject line kept whole. */
function wrapWords(text: string, width: number, glyphs: Glyphs): string[] {
  const [first = "", ...rest] = text.split(" ");
  const lines = [cut(first, width, glyphs)];
  for (const word of rest) {
    const last = lines[lines.length - 1]!;
    if (last.length + 1 + word.length <= width) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(cut(`  ${word}`, width, glyphs));
  }
  return lines;
}

/** A row's lines, its text in the glyphs' charset before it is measured (`→` is two columns in ASCII). */
function layoutRow(row: Row, width: number, trends: boolean, glyphs: Glyphs): string[] {
  const label = row.label === "" ? 0 : LABEL;
  const trend = trends && row.trend !== undefined ? row.trend : undefined;
  const bodyWidth = Math.max(1, width - label - (trend === undefined ? 0 : SPARK + 1));
  const segments = row.segments.map(glyphs.text);
  const bodies = row.linePerSegment ? segments.flatMap((segment) => wrapWords(segment, bodyWidth, glyphs)) : pack(segments, bodyWidth, glyphs);
  const lines = bodies.map((body, i) => {
    const head = (i === 0 ? row.label : "").padEnd(label);
    const tail = i === 0 && trend !== undefined ? `${body.padEnd(bodyWidth)} ${trend}` : body;
    return cut(`${head}${tail}`.trimEnd(), width, glyphs);
  });
  return row.style ? lines.map(row.style) : lines;
}

/** Below this many columns the trends go: the values need the room. */
const TRENDS_FROM = WIDTH;
/** Reject lines in the frame: enough to read the figures, few enough to keep the frame on a 24-line terminal. */
const RECENT_REJECTS = 3;

/** The in-place TTY view; keeps the history its trends need. */
export class LiveView {
  private readonly hostPsi: Array<number | null> = [];
  private readonly cgPsi: Array<number | null> = [];
  private readonly slack: Array<number | null> = [];
  private readonly memory: Array<number | null> = [];
  private drawnLines = 0;
  private last: Sample | null = null;
  /** The worker cgroup's memory limit as last read (null: never a number). */
  private memoryLimit: number | null = null;
  /** The last alarm events, shown again above the frame when a resize clears the screen. */
  private readonly recentAlarms: AlarmEvent[] = [];
  /** The gate's last reject lines, in the frame; and how many the batch they came in did not show. */
  private readonly recentRejects: string[] = [];
  private recentRejectsMore = 0;

  private readonly glyphs: Glyphs;

  constructor(
    private readonly header: LiveViewHeader,
    private readonly color: ChalkInstance,
    /** The terminal takes UTF-8 (output.ts): else the view is drawn in ASCII. */
    unicode = true,
  ) {
    this.glyphs = glyphsFor(unicode);
  }

  private remember(s: Sample): void {
    const push = (list: Array<number | null>, v: number | null): void => {
      list.push(v);
      if (list.length > SPARK) list.shift();
    };
    this.last = s;
    push(this.hostPsi, s.psi_mem_some_avg10);
    push(this.cgPsi, s.cg_psi_mem_some_avg10);
    push(this.slack, s.deadline_slack_ms);
    push(this.memory, s.cg_mem_current);
    // The last limit read scales the trend after the cgroup goes (QA: scaled to its own small readings, they drew full height).
    if (typeof s.cg_mem_max === "number") this.memoryLimit = s.cg_mem_max;
  }

  private rows(s: Sample): Row[] {
    const c = this.color;
    const bars = this.glyphs.bars;
    const time = s.ts.slice(11, 19);
    // A rate needs two readings: on the first frame it is pending, not missing.
    const pending = (f: string): boolean => s.missing.every((m) => m.field !== f || m.reason === "first sample");
    const fields = [...new Set(s.missing.map((m) => m.field))];
    const missing = fields.filter((f) => !pending(f));
    const gateMode = gateModeShown(s);
    const rows: Row[] = [
      { label: "", segments: ["drill watch", `cgroup ${this.header.cgroup}`, `queue ${this.header.queue}`, `every ${formatDuration(this.header.intervalMs)}`, `${time}Z`], priority: 1, style: (l) => c.bold(l) },
      { label: "queue", segments: [`len ${s.queue_len ?? "n/a"}`, `age ${ms(s.queue_age_ms)}`, `head slack ${ms(s.queue_head_slack_ms)}`, slackSegment(s)], trend: sparkline(this.slack, SPARK, SLACK_SCALE, bars), priority: 2 },
      // The host's and the worker cgroup's PSI on a line each: the cgroup's stall rate trips the gate and must never be cut.
      { label: "psi host", segments: [`some ${num(s.psi_mem_some_avg10)}`, `full ${num(s.psi_mem_full_avg10)}`, `rate ${rate(s.psi_mem_some_rate)}`], trend: sparkline(this.hostPsi, SPARK, PSI_SCALE, bars), priority: 1 },
      { label: "psi cg", segments: [`some ${num(s.cg_psi_mem_some_avg10)}`, `rate ${rate(s.cg_psi_mem_some_rate)}`, stallSegment(s)], trend: sparkline(this.cgPsi, SPARK, PSI_SCALE, bars), priority: 1 },
      { label: "memory", segments: [`${bytes(s.cg_mem_current)} / ${bytes(s.cg_mem_max)}`, `peak ${bytes(s.cg_mem_peak)}`, `swap ${bytes(s.cg_swap_current)}`, `oom_kill ${s.cg_oom_kill ?? "n/a"}`], trend: sparkline(this.memory, SPARK, memoryScale(this.memoryLimit), bars), priority: 3 },
      { label: "host", segments: [`idle ${pct(s.cpu_idle_pct)}`, `iowait ${pct(s.cpu_iowait_pct)}`, `si ${perSecond(s.si)}`, `so ${perSecond(s.so)}`, `refault ${perSecond(s.refault_rate)}`], priority: 3 },
      { label: "jobs", segments: [`tokens_out ${s.tokens_out ?? "n/a"}`, `retries ${s.retry_count ?? "n/a"}`, `admitted ${s.admitted ?? "n/a"}`], priority: 4 },
      // The gate's lever beside what it rejected: reject_all explains a wall of rejects (QA 6).
      { label: "gate", segments: [`mode ${gateMode ?? "n/a"}`, ...rejectedSegments(s.rejected)], priority: 2, style: gateMode?.startsWith("reject_all") ? (l) => c.yellow(l) : undefined },
      // Under the counters, the figures behind them: the gate's own last reject lines (none yet: no row).
      ...(this.recentRejects.length === 0 && this.recentRejectsMore === 0
        ? []
        : [{ label: "rejects", segments: this.recentRejectsMore > 0 ? [...this.recentRejects, formatMoreRejects(this.recentRejectsMore)] : this.recentRejects, priority: 3, linePerSegment: true }]),
      s.alarm.length === 0 ? { label: "alarms", segments: ["none"], priority: 1 } : { label: "alarms", segments: s.alarm, priority: 1, style: (l) => c.red.bold(l) },
    ];
    if (missing.length > 0) rows.push({ label: "missing", segments: [`${missing.length}: ${missing[0]}`, ...missing.slice(1)], priority: 5, style: (l) => c.dim(l) });
    if (missing.length < fields.length) rows.push({ label: "rates", segments: ["from the next sample"], priority: 6, style: (l) => c.dim(l) });
    return rows;
  }

  /**
   * The lines of one frame for a terminal of `size`: none wider than the
   * terminal (at most 80 columns) and, when its height is known, fewer lines
   * than it has (the least urgent rows go first), so nothing ever wraps and a
   * redraw always lands on the frame before it.
   */
  layout(s: Sample, size: ViewSize = { columns: WIDTH, rows: Infinity }): string[] {
    const width = Math.max(1, Math.min(WIDTH, size.columns));
    const trends = width >= TRENDS_FROM;
    let rows = this.rows(s).map((row) => ({ row, lines: layoutRow(row, width, trends, this.glyphs) }));
    const room = Math.max(1, size.rows - 1); // the cursor's line below the frame
    const height = (): number => rows.reduce((n, r) => n + r.lines.length, 0);
    // One row at a time, the least urgent (and of those the lowest) first: a whole tier dropped at once left lines blank (QA).
    while (height() > room) {
      const least = Math.max(...rows.map((r) => r.row.priority));
      if (least <= 1) break;
      const at = rows.map((r) => r.row.priority).lastIndexOf(least);
      rows = rows.filter((_, i) => i !== at);
    }
    return rows.flatMap((r) => r.lines).slice(0, room);
  }

  /** The lines of one frame at 80 columns, remembering the sample for the trends. */
  frame(s: Sample, size?: ViewSize): string[] {
    this.remember(s);
    return this.layout(s, size);
  }

  /** Keeps the last few reject lines for the frame, with the count of the newest batch's unshown ones. */
  private rememberRejects(rejects: RejectBatch): void {
    if (rejects.lines.length === 0 && rejects.more === 0) return;
    this.recentRejects.push(...rejects.lines.slice(-RECENT_REJECTS));
    this.recentRejects.splice(0, Math.max(0, this.recentRejects.length - RECENT_REJECTS));
    this.recentRejectsMore = rejects.more;
  }

  /**
   * Drawn at the start, until the first frame replaces it: the first sample
   * comes one interval later (the first reading only seeds the rates), and a
   * blank terminal for that long reads as a hung command.
   */
  waiting(size: ViewSize = { columns: WIDTH, rows: Infinity }): string {
    const width = Math.max(1, Math.min(WIDTH, size.columns));
    const every = formatDuration(this.header.intervalMs);
    const row: Row = { label: "", segments: ["drill watch", `cgroup ${this.header.cgroup}`, `queue ${this.header.queue}`, `first sample in ${every}`], priority: 1, style: (l) => this.color.dim(l) };
    const lines = layoutRow(row, width, false, this.glyphs);
    this.drawnLines = lines.length;
    return `${lines.join("\n")}\n`;
  }

  /** Moves back over the last frame and clears it, prints alarm lines (they scroll), then the new frame with the reject lines. */
  redraw(s: Sample, events: AlarmEvent[], size?: ViewSize, rejects: RejectBatch = NO_REJECTS): string {
    this.rememberRejects(rejects);
    const erase = this.erase();
    const frame = this.frame(s, size);
    this.drawnLines = frame.length;
    const alarmLines = events.flatMap((e) => alarmEventLines(e, this.color, size?.columns ?? WIDTH, this.glyphs)).map((l) => `${l}\n`).join("");
    this.recentAlarms.push(...events);
    this.recentAlarms.splice(0, Math.max(0, this.recentAlarms.length - 20));
    return `${erase}${alarmLines}${frame.join("\n")}\n`;
  }

  /**
   * The frame drawn last, gone (for a line on stderr between two frames): the
   * next redraw starts below whatever is printed in between.
   */
  erase(): string {
    const erase = this.drawnLines > 0 ? `\x1b[${this.drawnLines}F\x1b[J` : "";
    this.drawnLines = 0;
    return erase;
  }

  /**
   * After the terminal changed size (its lines may have been re-wrapped) or
   * drill was suspended and resumed (the shell wrote below the frame): the
   * cursor can no longer be trusted to sit below the last frame. Clears the
   * screen and draws the last alarm lines that fit and the frame again,
   * without waiting for the next sample. Empty before the first frame.
   */
  repaint(size: ViewSize): string {
    if (this.last === null) return "";
    const frame = this.layout(this.last, size);
    this.drawnLines = frame.length;
    // The newest alarms that fit whole above the frame.
    const room = Number.isFinite(size.rows) ? Math.max(0, size.rows - 1 - frame.length) : Infinity;
    const alarms: string[] = [];
    for (const event of [...this.recentAlarms].reverse()) {
      const lines = alarmEventLines(event, this.color, size.columns, this.glyphs);
      if (alarms.length + lines.length > room) break;
      alarms.unshift(...lines);
    }
    return `\x1b[H\x1b[2J${alarms.map((l) => `${l}\n`).join("")}${frame.join("\n")}\n`;
  }
}
