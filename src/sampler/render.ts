import type { ChalkInstance } from "chalk";
import { formatBytes } from "../units.js";
import type { AlarmEvent } from "./alarms.js";
import type { Sample } from "./step.js";

/**
 * What an operator sees. On a TTY: a small live view redrawn in place, 80
 * columns wide, with trends for PSI, slack and cgroup memory, and alarm lines
 * scrolling above it. Piped: one plain line per sample and the alarm lines,
 * no colour and no cursor movement, so `| grep PAGE` works.
 */

const WIDTH = 80;
const LABEL = 9;
const SPARK = 16;
const BODY = WIDTH - LABEL - SPARK - 1;
const BARS = "▁▂▃▄▅▆▇█";

/** A trend of the last values; null (unreadable) is a gap. Scaled between the window's min and max. */
export function sparkline(values: Array<number | null>, width = SPARK): string {
  const tail = values.slice(-width);
  const known = tail.filter((v): v is number => v !== null);
  if (known.length === 0) return " ".repeat(tail.length);
  const min = Math.min(...known);
  const max = Math.max(...known);
  return tail
    .map((v) => {
      if (v === null) return " ";
      const level = max === min ? 0 : Math.round(((v - min) / (max - min)) * (BARS.length - 1));
      return BARS[level] ?? " ";
    })
    .join("");
}

const num = (v: number | null, digits = 2): string => (v === null ? "n/a" : v.toFixed(digits));
const int = (v: number | null): string => (v === null ? "n/a" : String(Math.round(v)));
const pct = (v: number | null): string => (v === null ? "n/a" : `${Math.round(v)}%`);
const perSecond = (v: number | null): string => (v === null ? "n/a" : `${Math.round(v)}/s`);
const ms = (v: number | null): string => (v === null ? "n/a" : Math.abs(v) >= 10_000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}ms`);
const bytes = (v: number | "max" | null): string => (v === "max" ? "max" : formatBytes(v));

function rejectedText(rejected: Record<string, number> | null): string {
  if (rejected === null) return "n/a";
  const parts = Object.entries(rejected).map(([reason, n]) => `${reason.replace(/^reject_/, "")}=${n}`);
  return parts.length === 0 ? "0" : parts.join(" ");
}

/** One line per sample for pipes and logs: k=v in the runbook's names. */
export function formatSampleLine(s: Sample): string {
  const fields = [
    s.ts,
    `queue_len=${s.queue_len ?? "n/a"}`,
    `queue_age_ms=${s.queue_age_ms ?? "n/a"}`,
    `slack_ms=${s.deadline_slack_ms ?? "n/a"}`,
    `psi=${num(s.psi_mem_some_avg10)}`,
    `psi_rate=${num(s.psi_mem_some_rate)}`,
    `cg_psi=${num(s.cg_psi_mem_some_avg10)}`,
    `cg_psi_rate=${num(s.cg_psi_mem_some_rate)}`,
    `si=${s.si ?? "n/a"}`,
    `so=${s.so ?? "n/a"}`,
    `cg_mem=${s.cg_mem_current ?? "n/a"}`,
    `cg_oom_kill=${s.cg_oom_kill ?? "n/a"}`,
    `cpu_idle=${pct(s.cpu_idle_pct)}`,
    `stall_ms_p99=${s.stall_ms_p99 ?? "n/a"}`,
    `tokens_out=${s.tokens_out ?? "n/a"}`,
    `alarm=${s.alarm.length === 0 ? "none" : s.alarm.join(",")}`,
  ];
  if (s.missing.length > 0) fields.push(`missing=${[...new Set(s.missing.map((m) => m.field))].join(",")}`);
  return fields.join(" ");
}

/** One short line of the signals that matter while a drill runs (`drill up` prints it every few seconds). */
export function formatStatusLine(s: Sample): string {
  return [
    `psi=${num(s.psi_mem_some_avg10)}`,
    `rate=${pct(s.psi_mem_some_rate)}`,
    `cg_rate=${pct(s.cg_psi_mem_some_rate)}`,
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

export interface LiveViewHeader {
  cgroup: string;
  queue: string;
  intervalMs: number;
}

function fit(text: string, width: number): string {
  return text.length > width ? `${text.slice(0, width - 1)}…` : text.padEnd(width);
}

/** The in-place TTY view; keeps the history its trends need. */
export class LiveView {
  private readonly psi: Array<number | null> = [];
  private readonly slack: Array<number | null> = [];
  private readonly memory: Array<number | null> = [];
  private drawnLines = 0;

  constructor(
    private readonly header: LiveViewHeader,
    private readonly color: ChalkInstance,
  ) {}

  private remember(s: Sample): void {
    const push = (list: Array<number | null>, v: number | null): void => {
      list.push(v);
      if (list.length > SPARK) list.shift();
    };
    // The worker cgroup's PSI when there is one: that is what the drill squeezes.
    push(this.psi, s.cg_psi_mem_some_avg10 ?? s.psi_mem_some_avg10);
    push(this.slack, s.deadline_slack_ms);
    push(this.memory, s.cg_mem_current);
  }

  /** The lines of one frame, each at most 80 columns (before colour codes). */
  frame(s: Sample): string[] {
    this.remember(s);
    const c = this.color;
    const row = (label: string, body: string, trend?: string): string =>
      trend === undefined ? `${label.padEnd(LABEL)}${fit(body, WIDTH - LABEL)}`.trimEnd() : `${label.padEnd(LABEL)}${fit(body, BODY)} ${trend}`.trimEnd();
    const rate = (v: number | null): string => (v === null ? "n/a" : `${v.toFixed(2)}%`);
    const time = s.ts.slice(11, 19);
    const lines = [
      c.bold(fit(`drill watch  cgroup ${this.header.cgroup}  queue ${this.header.queue}  every ${ms(this.header.intervalMs)}  ${time}Z`, WIDTH).trimEnd()),
      row("queue", `len ${s.queue_len ?? "n/a"}  age ${ms(s.queue_age_ms)}  head slack ${ms(s.queue_head_slack_ms)}  slack ${ms(s.deadline_slack_ms)}`, sparkline(this.slack)),
      row("psi", `some ${num(s.psi_mem_some_avg10)} full ${num(s.psi_mem_full_avg10)} rate ${rate(s.psi_mem_some_rate)}  cg ${num(s.cg_psi_mem_some_avg10)} rate ${rate(s.cg_psi_mem_some_rate)}`, sparkline(this.psi)),
      row("memory", `${bytes(s.cg_mem_current)} / ${bytes(s.cg_mem_max)}  peak ${bytes(s.cg_mem_peak)}  swap ${bytes(s.cg_swap_current)}  oom_kill ${s.cg_oom_kill ?? "n/a"}`, sparkline(this.memory)),
      row("host", `si ${perSecond(s.si)} so ${perSecond(s.so)} refault ${perSecond(s.refault_rate)}  idle ${pct(s.cpu_idle_pct)} iowait ${pct(s.cpu_iowait_pct)}  p99 stall ${ms(s.stall_ms_p99)}`),
      row("jobs", `tokens_out ${s.tokens_out ?? "n/a"}  retries ${s.retry_count ?? "n/a"}  admitted ${s.admitted ?? "n/a"}`),
      row("rejected", rejectedText(s.rejected)),
      s.alarm.length === 0 ? row("alarms", "none") : c.red.bold(row("alarms", s.alarm.join(" "))),
    ];
    // A rate needs two readings: on the first frame it is pending, not missing.
    const pending = (f: string): boolean => s.missing.every((m) => m.field !== f || m.reason === "first sample");
    const fields = [...new Set(s.missing.map((m) => m.field))];
    const missing = fields.filter((f) => !pending(f));
    if (missing.length > 0) lines.push(c.dim(row("missing", `${missing.length}: ${missing.join(" ")}`)));
    if (missing.length < fields.length) lines.push(c.dim(row("rates", "from the next sample")));
    return lines;
  }

  /** Moves back over the last frame and clears it, prints alarm lines (they scroll), then the new frame. */
  redraw(s: Sample, events: AlarmEvent[]): string {
    const erase = this.drawnLines > 0 ? `\x1b[${this.drawnLines}F\x1b[J` : "";
    const frame = this.frame(s);
    this.drawnLines = frame.length;
    const alarmLines = events.map((e) => `${formatAlarmEvent(e, this.color)}\n`).join("");
    return `${erase}${alarmLines}${frame.join("\n")}\n`;
  }
}
