import type { ChalkInstance } from "chalk";
import { snakeCaseKeys, type SnakeCased } from "../output.js";
import { formatBytes, formatDuration } from "../units.js";
import { againstDeadline, byJobId, codeSpan, COST_PROXY_FORMULA, p99DeadlineVerdict, type DrillEndedFacts, type JobCost, type ModeFlip, type Peak, type Report, type RollbackDenyAll, type WorstStall } from "./build.js";

/**
 * Three views of one Report: `md` pastes into an incident doc (GitHub tables,
 * no ANSI), `text` is for the terminal, `json` is the Report itself (keys in
 * snake_case, as in every --json document). Both table views come from the
 * same sections, so they never disagree.
 */

export type ReportFormat = "text" | "md" | "json";

/** A cell shown as code in markdown (reject lines, formulas), as is in text. */
type Cell = string | { code: string };

interface Section {
  title: string;
  /** Paragraphs before the table. */
  before?: Cell[];
  header?: string[];
  /** Right-aligned columns (numbers). */
  right?: number[];
  rows?: Cell[][];
  after?: string[];
}

/** Per-job rows shown in md/text; json carries every job. */
export const COST_ROWS_SHOWN = 20;

const NA = "n/a";

/** A span as an operator reads it: `850 ms`, `1.5 s`, `1 min 31 s`, `10 min`, `2 h 5 min`. */
export function humanDuration(msValue: number): string {
  const v = Math.max(0, Math.round(msValue));
  if (v < 1000) return `${v} ms`;
  if (v < 60_000) {
    const s = v / 1000;
    return `${Number.isInteger(s) ? s : s.toFixed(1)} s`;
  }
  const totalS = Math.round(v / 1000);
  if (totalS < 3600) {
    const m = Math.floor(totalS / 60);
    const rest = totalS % 60;
    return rest === 0 ? `${m} min` : `${m} min ${rest} s`;
  }
  const totalM = Math.round(totalS / 60);
  const h = Math.floor(totalM / 60);
  const rest = totalM % 60;
  return rest === 0 ? `${h} h` : `${h} h ${rest} min`;
}
const ms = (v: number | null): string => (v === null ? NA : `${Math.round(v)} ms`);
const num = (v: number | null, digits = 2): string => (v === null ? NA : v.toFixed(digits));
const int = (v: number | null): string => (v === null ? NA : String(v));
const pct = (v: number | null): string => (v === null ? NA : `${v.toFixed(2)}%`);

/** `stall 26.33% (worker cgroup) with cpu idle 50.0%, queue age 180 ms, slack -230 ms`. */
function worstStallText(w: WorstStall | null): string {
  if (w === null) return NA;
  return `stall ${pct(w.stall_rate_pct)} (${w.source}) with cpu idle ${w.cpu_idle_pct === null ? NA : `${w.cpu_idle_pct.toFixed(1)}%`}, queue age ${ms(w.queue_age_ms)}, slack ${ms(w.deadline_slack_ms)}`;
}
const bytes = (v: number | "max" | null): string => (v === "max" ? "max" : v === null ? NA : formatBytes(v));

function sections(r: Report): Section[] {
  const out: Section[] = [];
  const noRecording = r.pressure.recording === null ? `${NA} (no recording)` : null;

  // Decisions
  if (r.decisions === null) {
    out.push({ title: "Decisions", before: [`${NA}: the decision stream ${r.queue}:events could not be read`] });
  } else {
    const rows: Cell[][] = r.decisions.rows.map((row) => [row.reason, String(row.count), row.sharePct === null ? "" : `${row.sharePct.toFixed(1)}%`, row.note]);
    // A trimmed stream's counts start where it does (the note says how many it lost).
    const partial = r.events_trimmed === null ? "" : `; partial: ${r.queue}:events starts at ${r.events_trimmed.stream_starts ?? NA} (trimmed, see notes)`;
    rows.push(["total decisions", String(r.decisions.total), "", `${r.decisions.rejects} reject(s)${partial}`]);
    const rejectRows: Cell[][] = [];
    if (r.first_reject) rejectRows.push(["first", r.first_reject.ts ?? NA, { code: r.first_reject.line }]);
    if (r.last_reject) rejectRows.push(["last", r.last_reject.ts ?? NA, { code: r.last_reject.line }]);
    out.push({ title: "Decisions", header: ["reason", "count", "share", "note"], right: [1, 2], rows });
    out.push(
      rejectRows.length === 0
        ? { title: "First and last reject", before: ["no reject in the window"] }
        : { title: "First and last reject", header: ["", "at", "line"], rows: rejectRows },
    );
    // Every `gate mode` set is the lever's history; a set to the mode already there flipped nothing, and says so.
    const flipRow = (m: ModeFlip, note: string[] = []): Cell[] => [
      m.ts ?? NA,
      m.mode ?? NA,
      m.previous ?? NA,
      m.psi === null ? NA : m.psi.toFixed(2),
      [m.unchanged === true ? "(unchanged)" : "", m.forced ? `forced over PSI${m.psi_avg60 === null ? "" : ` (avg60 ${m.psi_avg60.toFixed(2)})`}` : "", ...note].filter(Boolean).join(", "),
    ];
    const denyAll = r.rollback_deny_all;
    // The rollback's deny-all is marked in the window too (QA: only outside it, so a pasted table read as a hand on the lever mid-drill).
    // The entry's `by=` says it too, on a hand-run `rollback --queue` that has no drill record (QA).
    const byRollback = (m: ModeFlip): boolean => m.by === "rollback" || (denyAll !== null && denyAll.window === "in" && m.ts === denyAll.ts && m.mode === denyAll.mode);
    const byWhom = (m: ModeFlip): string[] =>
      m.by === "rollback_queue" ? ["rollback --queue's deny-all"] : byRollback(m) ? ["rollback's deny-all"] : m.by === "up" ? ["opened by up"] : m.by === "gate_mode" ? ["by hand (gate mode)"] : [];
    const flipRows = (r.mode_flips ?? []).map((m) => flipRow(m, byWhom(m)));
    // The rollback's deny-all outside the window still closes the lever's history, marked as such.
    if (denyAll !== null && denyAll.window !== "in") {
      const row = flipRow(denyAll, [`rollback's deny-all, ${denyAll.window} the window`]);
      if (denyAll.window === "after") flipRows.push(row);
      else flipRows.unshift(row);
    }
    if (flipRows.length > 0) out.push({ title: "Mode flips", header: ["at", "mode", "previous", "psi avg10", "note"], right: [3], rows: flipRows });
  }

  // First token
  const ft = r.first_token;
  if (ft === null) {
    out.push({ title: "First token of admitted jobs", before: [`${NA}: ${r.queue}:done could not be read`] });
  } else {
    const deadline = ft.deadline_ms === null ? NA : ft.deadline_ms.min === ft.deadline_ms.max ? ms(ft.deadline_ms.max) : `${ms(ft.deadline_ms.min)} – ${ms(ft.deadline_ms.max)}`;
    const overBy = (v: number) => (againstDeadline(v) === "over" ? `over by ${ms(v)}` : `within, ${ms(-v)} to spare`);
    const mixed = ft.deadline_ms !== null && ft.deadline_ms.min !== ft.deadline_ms.max;
    // The verdict and what decides it: one function for these words and --format json's p99_deadline_verdict.
    const judged = p99DeadlineVerdict(ft);
    // Mixed deadlines: the smallest one, and each job against its own (a p99 under the longest says nothing of the short jobs).
    const over =
      ft.p99_over_deadline_ms === null ? NA
      : !mixed ? overBy(ft.p99_over_deadline_ms)
      : `${judged.p99 === "over" ? `over the smallest deadline (${ms(ft.p99_deadline_ms)}) by ${ms(ft.p99_over_deadline_ms)}` : `within the smallest deadline (${ms(ft.p99_deadline_ms)}), ${ms(-ft.p99_over_deadline_ms)} to spare`}` +
        `; each job's first token against its own deadline: p99 ${ft.p99_over_own_deadline_ms === null ? NA : overBy(ft.p99_over_own_deadline_ms)}`;
    const { waiting, timed } = judged;
    const stillWithout = `${waiting} of ${timed} jobs are past their deadline still without a first token`;
    const verdict = {
      p99: over,
      waiting_only: `over: ${stillWithout}`,
      waiting_over_1pct: `over: ${stillWithout} (over 1 %); of the ${ft.with_first_token} with one: ${over}`,
      p99_waiting_under_1pct: `${over} (of the ${ft.with_first_token} with a first token; ${waiting} of ${timed} are past their deadline still without one, under 1 %)`,
    }[judged.by];
    // late_jobs holds the finished-late ids, then the never-got-a-first-token ones: each list goes beside its own count.
    const idList = (ids: string[]) => (ids.length === 0 ? "" : `: ${ids.slice(0, 20).map((id) => `job=${id}`).join(" ")}${ids.length > 20 ? ` … ${ids.length - 20} more` : ""}`);
    const finishedLate = `${ft.late_finished} finished late${idList(ft.late_jobs.slice(0, ft.late_finished))}`;
    const neverFirst =
      ft.late_unfinished === null
        ? "unfinished jobs not read"
        : `${ft.late_unfinished} admitted and without a first token at their deadline${idList(ft.late_jobs.slice(ft.late_finished))}`;
    // Out of the jobs judged, never of those admitted: a job admitted before the window can finish late in it.
    const lateText = `${ft.late} of ${ft.judged} judged (${finishedLate}; ${neverFirst})`;
    const earlier = ft.finished_admitted_earlier ?? 0;
    const finished = earlier === 0 ? String(ft.finished) : `${ft.finished} (${earlier} of them admitted before the window)`;
    const withToken = ft.unfinished_with_first_token === null ? String(ft.with_first_token) : `${ft.with_first_token} (${ft.unfinished_with_first_token} of them not finished)`;
    out.push({
      title: "First token of admitted jobs",
      // What each figure counts, as --format json's `counted` says it: the sets differ (a job admitted before the window finishes in it).
      before: [`Counted: ${Object.entries(ft.counted).map(([figure, what]) => `${figure} = ${what}`).join("; ")}.`],
      header: ["figure", "value"],
      rows: [
        ["admitted in window", int(ft.admitted)],
        ["finished in window", finished],
        ["with a first token", withToken],
        ["first token p50", ms(ft.p50_ms)],
        ["first token p99", ms(ft.p99_ms)],
        ["first token max", ms(ft.max_ms)],
        ["deadline", deadline],
        ["p99 against deadline", verdict],
        ["late jobs", lateText],
      ],
    });
  }

  // Pressure
  const p = r.pressure;
  // A peak of 0 is a signal that never rose: no moment to name (QA AD: si 0.0 "at" the first sample's time). Not so a slack of 0.
  const peakRow = (label: string, peak: Peak, show: (v: number | null) => string, zeroRose = false): Cell[] => [
    label,
    noRecording ?? show(peak.value),
    peak.value === 0 && !zeroRose && noRecording === null ? "never above 0" : (peak.ts ?? ""),
  ];
  // A live read of the worker cgroup gives the counter even without a recording.
  const oom =
    p.oom_kills_in_window !== null ? `${p.oom_kills_in_window} in window (cg_oom_kill=${int(p.cg_oom_kill_end)})`
    : p.cg_oom_kill_end !== null ? `n/a in window (cg_oom_kill=${int(p.cg_oom_kill_end)} now)`
    : (noRecording ?? NA);
  // No sample in the window is no reading, not "none" (QA).
  const alarms = noRecording ?? (p.alarms === null ? `${NA} (no sample in the window)` : p.alarms.length === 0 ? "none" : p.alarms.map((a) => `${a.alarm} (raised in ${a.samples} of ${p.samples} samples)`).join(", "));
  out.push({
    title: "Pressure (sidecar recording)",
    before: [p.recording === null ? "no recording" : `${p.samples} sample(s) from ${p.recording}${p.first_sample === null ? "" : `, ${p.first_sample} to ${p.last_sample}`}`],
    header: ["signal", "peak", "at"],
    rows: [
      peakRow("psi_mem_some_avg10 (host)", p.peak_psi_mem_some_avg10, (v) => num(v)),
      peakRow("psi_mem_some_rate (host)", p.peak_psi_mem_some_rate, pct),
      peakRow("cg_psi_mem_some_avg10 (worker cgroup)", p.peak_cg_psi_mem_some_avg10, (v) => num(v)),
      peakRow("cg_psi_mem_some_rate (worker cgroup)", p.peak_cg_psi_mem_some_rate, pct),
      peakRow("stall_ms_p99", p.peak_stall_ms_p99, ms),
      peakRow("cgroup memory.peak", p.peak_cg_mem_peak, (v) => `${bytes(v)} (limit ${bytes(p.cg_mem_max)})`),
      peakRow("cgroup memory.current", p.peak_cg_mem_current, (v) => bytes(v)),
      // Admitted jobs only: a job the gate rejected on its slack never counts here (QA: 7989 ms beside reject lines at 999).
      peakRow("deadline_slack_ms (lowest, admitted jobs awaiting a first token)", p.lowest_deadline_slack_ms, ms, true),
      peakRow("si (swap-in, pages/s)", p.peak_si, (v) => num(v, 1)),
      // The runbook's contradiction at its worst moment: the stall beside idle CPU and a queue age that looks fine.
      ["at the worst stall", noRecording ?? worstStallText(p.at_worst_stall), p.at_worst_stall?.ts ?? ""],
      ["OOM kills", oom, ""],
      ["alarms", alarms, ""],
    ],
  });

  // Retries and totals
  const t = r.totals;
  out.push({
    title: "Retries and totals",
    header: ["figure", "value"],
    rows: [
      // Two different counts side by side (QA: pasted into incident notes, they read as one figure disagreeing with itself):
      // retried jobs this host's worker ran to the end, and jobs this host's gate turned away to run elsewhere.
      ["retry_count (stats, whole drill: retried jobs the worker finished)", int(r.retries.retry_count_total)],
      [`nacked to a retry host class in window (gate rejects sent to ${r.queue}:retry:<class>)`, int(r.retries.nacked_to_retry_in_window)],
      ["finished after a retry in window (attempt > 0)", int(r.retries.finished_after_retry)],
      // Stats count every token decoded, runs given back included; the finished records only the runs that finished.
      ["tokens_out (stats: every token decoded, whole drill)", int(t?.tokens_out ?? null)],
      ["tokens_out over the finished records (whole drill)", int(r.tokens_out_split?.finished ?? null)],
      [
        // QA: "given back and run again (worker_recovered N)" read as N jobs run again; it counts jobs given back, run again or drained since.
        `decoded by runs not finished (given back: worker_recovered ${int(r.tokens_out_split?.worker_recovered ?? null)}; or still running)`,
        r.tokens_out_split?.unknown_because ? `${NA}: ${r.tokens_out_split.unknown_because}` : int(r.tokens_out_split?.given_back ?? null),
      ],
      ["jobs_done (stats)", int(t?.jobs_done ?? null)],
      // The worker counts a job late when it finishes; "late jobs" above also counts admitted jobs that never got a first token.
      ["jobs_late (stats: finished late, whole drill)", int(t?.jobs_late ?? null)],
    ],
  });

  // cost_proxy
  const c = r.cost_proxy;
  if (c === null) {
    out.push({ title: "cost_proxy", before: [{ code: COST_PROXY_FORMULA }, `${NA}: ${r.queue}:done could not be read`] });
  } else {
    // The costliest COST_ROWS_SHOWN (all when fewer), listed by job id.
    const shown = c.jobs.length <= COST_ROWS_SHOWN ? [...c.jobs] : [...c.jobs].sort((a, b) => (b.cost_proxy ?? -1) - (a.cost_proxy ?? -1)).slice(0, COST_ROWS_SHOWN);
    const rows: Cell[][] = shown.sort(byJobId).map(costRow);
    rows.push(["total", "", "", "", "", "", "", c.total === null ? `${NA}${noRecording ? " (no recording)" : ""}` : fmtCost(c.total)]);
    const after: string[] = [];
    if (c.jobs.length > COST_ROWS_SHOWN) after.push(`${costRowsShownText(c.jobs_costed)}; ${c.jobs.length - COST_ROWS_SHOWN} more job(s) not shown (--format json lists every job); the total covers all.`);
    after.push(`${c.jobs_costed} of ${c.jobs.length} finished job(s) costed; token part (without stall) ${int(c.token_part_total)}.`);
    out.push({
      title: "cost_proxy",
      before: [{ code: c.formula }, c.stall_ms_source],
      header: ["job", "prompt", "completion", "retries", "stall_ms", "covered", "workers_held", "cost_proxy"],
      right: [1, 2, 3, 4, 5, 6, 7],
      rows: c.jobs.length === 0 ? [["no finished job in the window", "", "", "", "", "", "", ""]] : rows,
      after,
    });
  }

  // Where the jobs are
  const w = r.jobs_where;
  if (w === null) {
    out.push({ title: "Where the jobs are", before: [`${NA}: the job lists of ${r.queue} could not be read`] });
  } else {
    const rows: Cell[][] = w.rows.map((row) => [{ code: row.key }, int(row.count), row.note]);
    rows.push(["total", int(w.total), w.held_by_dead > 0 ? `${w.held_by_dead} held by a dead gate or worker` : ""]);
    const after: string[] = [];
    if (w.ids_issued !== null) {
      const lost =
        w.not_found_count === null ? "lost ids not checked (a list could not be read)"
        : w.not_found_count === 0 ? "every one is on a list"
        : `${w.not_found_count} on no list: ${jobList(w.not_found, w.not_found_count)}`;
      after.push(`ids issued by ${r.queue}:seq: ${w.ids_issued}; distinct ids on the lists: ${w.distinct_ids}; ${lost}.`);
    } else {
      after.push(`ids issued by ${r.queue}:seq: ${NA} (unreadable, see notes); lost ids not checked.`);
    }
    if (w.duplicates.length > 0) {
      const shown = w.duplicates.slice(0, 10).map((d) => `job=${d.id} (${d.keys.join(" + ")})`).join(", ");
      after.push(`on more than one list: ${shown}${w.duplicates.length > 10 ? ` … ${w.duplicates.length - 10} more` : ""}.`);
    }
    if (w.without_id > 0) after.push(`${w.without_id} entr${w.without_id === 1 ? "y" : "ies"} without a job id (payloads that never were jobs).`);
    out.push({ title: "Where the jobs are", header: ["key", "jobs", "what"], right: [1], rows, after });
  }

  // Drain math check
  const d = r.drain;
  const head = d.head_age_ms === null ? NA : d.queue_len === 0 ? "0 ms (queue empty)" : `${ms(d.head_age_ms)}${d.head_job ? ` (job=${d.head_job})` : ""}`;
  // Under 0.1 h as a duration first: 8 waiting jobs must never read as an empty queue's "0 h".
  const waiting = d.queue_len !== null && d.drain_len !== null && d.done_per_hour ? ((d.queue_len + d.drain_len) / d.done_per_hour) * 3_600_000 : null;
  const backlog =
    d.backlog_hours === null ? NA
    : d.backlog_hours > 0 && d.backlog_hours < 0.1 ? `${humanDuration(waiting ?? d.backlog_hours * 3_600_000)} (${d.backlog_hours} h)`
    // Only these two lists: jobs a worker holds are in "Where the jobs are" (QA: "nothing waiting" beside 4 held jobs).
    : d.backlog_hours === 0 ? `0 h (none in ${r.queue} or ${r.queue}_drain)`
    : `${d.backlog_hours} h${d.backlog_hours > 1 ? " (over one hour)" : ""}`;
  out.push({
    title: "Drain math check",
    header: ["check", "value"],
    rows: [
      [{ code: `LLEN ${r.queue}` }, int(d.queue_len)],
      [{ code: `LINDEX ${r.queue} 0` }, `head age ${head}`],
      [{ code: `LLEN ${r.queue}_drain` }, int(d.drain_len)],
      ["rejects in window", int(d.rejects_in_window)],
      [paceLabel(r), d.done_per_hour === null ? NA : String(d.done_per_hour)],
      [`${r.queue} + ${r.queue}_drain at that pace`, backlog],
    ],
  });

  if (r.notes.length > 0) out.push({ title: "Notes", after: r.notes });
  return out;
}

/**
 * What the pace is (QA: "at the window's pace" over 2 jobs done early in a
 * 15 min window): jobs per hour while they ran, the span it was taken over,
 * and the window beside it when they differ.
 */
function paceLabel(r: Report): string {
  const label = "finished per hour while jobs ran";
  const { pace_from: from, pace_to: to } = r.drain;
  if (r.drain.done_per_hour === null || from === null || to === null) return label;
  const windowMs = Date.parse(r.window.to) - Date.parse(r.window.from);
  return `${label} (first admit → last finish, ${humanDuration(Date.parse(to) - Date.parse(from))}, of a ${humanDuration(windowMs)} window)`;
}

/** The first 20 of `ids` by name; `of` (default: ids.length) says how many there are in all. */
function jobList(ids: string[], of = ids.length): string {
  return `${ids.slice(0, 20).map((id) => `job=${id}`).join(" ")}${of > 20 ? ` … ${of - 20} more` : ""}`;
}

/** Which COST_ROWS_SHOWN of more finished jobs the table shows: the costliest, then (fewer costed) the first by job id without a cost. */
function costRowsShownText(costed: number): string {
  if (costed >= COST_ROWS_SHOWN) return `the ${COST_ROWS_SHOWN} costliest shown, by job id`;
  // QA: "the 20 costliest" over 20 n/a rows (no recording): nothing was ranked.
  if (costed === 0) return `no job has a cost_proxy to rank by: the first ${COST_ROWS_SHOWN} by job id shown`;
  return `the ${costed} costed job(s) and the first ${COST_ROWS_SHOWN - costed} by job id without a cost shown, by job id`;
}

function fmtCost(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(3).replace(/0+$/, "");
}

function costRow(j: JobCost): Cell[] {
  return [
    `job=${j.job}`,
    int(j.prompt_tokens),
    int(j.completion_tokens),
    int(j.retry_count),
    j.stall_ms === null ? NA : String(j.stall_ms),
    j.stall_coverage === null ? NA : `${Math.round(j.stall_coverage * 100)}%`,
    String(j.workers_held),
    j.cost_proxy === null ? NA : fmtCost(j.cost_proxy),
  ];
}

/** What the window covers: the last --since, or this run since it was created when that is later; up to the run's end when it ended. */
function windowSpan(r: Report): string {
  const since = `last ${humanDuration(r.window.since_ms)}`;
  const run = `run ${r.drill?.run_id ?? NA}`;
  if (r.drill?.queue != null && r.drill.queue !== r.queue) return `${since} (not clipped to ${run}: its queue is ${r.drill.queue})`;
  const toEnd = r.window.anchored === "run_end";
  // Ending at the run's end or the export, "within the last 10 min" read as the 10 min before now (QA: a report read 17 min after its run).
  const within = toEnd ? `the run's ${since}` : r.window.anchored === "export" ? `the ${since} before the export` : `the ${since}`;
  if (r.window.clipped_to_run) return `${run} from its creation${toEnd ? " to its end" : ""} (within ${within})`;
  if (toEnd) return `${since} of ${run}, to its end`;
  if (r.window.run_start !== null && r.window.from < r.window.run_start) return `${since}, from before ${run} was created`;
  return since;
}

const WINDOW_END: Record<Report["window"]["anchored"], string> = { now: "", export: " (ends at the export)", run_end: " (ends at the run's end)" };

/**
 * Gate and worker decide and finish on after up's recorded end (until they
 * exit by themselves or a rollback stops them), and the window takes that work
 * in: said, or its end reads unlike the `ended:` line beside it (QA).
 */
function windowEndText(r: Report): string {
  const endedAt = r.window.anchored === "run_end" ? r.drill?.ended?.at : null;
  const endedMs = endedAt ? Date.parse(endedAt) : NaN;
  const pastMs = Date.parse(r.window.to) - endedMs;
  if (!(pastMs >= 1000)) return WINDOW_END[r.window.anchored];
  return ` (ends at the run's last decision or finished job, ${formatDuration(Math.round(pastMs / 1000) * 1000)} after its recorded end: gate and worker ran on)`;
}

/** `ended: stopped_early — gate exited (code 143) 7 s into the drill; 6 of 12 jobs not packed`. */
export function endedText(e: DrillEndedFacts): string {
  const when = e.after_ms === null ? (e.at === null ? "" : ` at ${e.at}`) : ` ${Math.round(e.after_ms / 1000)} s into the drill`;
  const what = e.reason === null ? `ran to its end${e.after_ms === null ? "" : ` (${Math.round(e.after_ms / 1000)} s)`}` : `${e.reason}${when}`;
  const total = e.pushed !== null && e.not_packed !== null ? e.pushed + e.not_packed : null;
  // A push whose reply was lost may have run: "Where the jobs are" then counts one id more than pushed (QA).
  const unanswered = e.unanswered_pushes ?? 0;
  const maybe =
    unanswered === 0 ? ""
    : unanswered === 1 ? " (1 of them got no reply to its push: queued under the next id if Redis ran it)"
    : ` (${unanswered} of them got no reply to their pushes: each queued under the next id if Redis ran it)`;
  // QA AD: "all 0 jobs packed" for a drill that packs none. Counts not known are said so, with why (QA: dropped without a word).
  const packed =
    total === null ? `; what up packed n/a (${e.packed_unknown ?? "not recorded"})`
    : e.not_packed! > 0 ? `; ${e.not_packed} of ${total} job${total === 1 ? "" : "s"} not packed${maybe}`
    : total === 0 ? "; no job packed"
    : total === 1 ? "; its one job packed"
    : `; all ${total} jobs packed`;
  // QA: "all 9 jobs packed" beside 11 decisions and 11 ids: jobs pushed by hand during the drill are said apart.
  // Not known: n/a with why (with up's counts, "what up packed", when those are not known either); nothing to tell
  // apart where the report's queue is not the run's.
  const others =
    e.other_jobs_unknown ? (total === null ? "" : `; jobs decided during the run that up did not pack n/a (${e.other_jobs_unknown})`)
    : e.other_jobs === null || e.other_jobs === undefined || e.other_jobs === 0 ? ""
    : `; ${e.other_jobs} more job(s) decided on the queue during the run that up did not pack (${jobList(e.other_job_ids)}: pushed by hand or by another producer; in the figures below)`;
  // QA: "all 12 jobs packed" beside phases the drill's --duration skipped, whose jobs it never counted.
  const skipped = e.skipped_jobs === null || e.skipped_jobs === undefined || e.skipped_jobs === 0 ? "" : `; ${e.skipped_jobs} more in phases past the drill's end, skipped`;
  const rollback = e.rolled_back_at !== null && e.verdict !== "rolled_back" ? `; rolled back at ${e.rolled_back_at}` : "";
  // Said apart: jobs pushed after the rollback, drained by a later one, are not when the drill ended.
  const redrains = (e.redrains ?? []).map((r) => `${r.at} (jobs pushed after the rollback${r.drained === null ? "" : `; drain length ${r.drained}`})`);
  const redrained = redrains.length === 0 ? "" : `; re-drained at ${redrains.join(", ")}`;
  const unfinished = e.unfinished === undefined ? "" : `; ${e.unfinished}`;
  return `ended: ${e.verdict} — ${what}${packed}${others}${skipped}${rollback}${redrained}${unfinished}`;
}

/** `rollback: deny-all at <ts> (reject_all, was admit, psi avg10 6.69), after the window`: when admission was cut off. */
export function denyAllText(d: RollbackDenyAll): string {
  const psi = d.psi === null ? NA : d.psi.toFixed(2);
  const where = d.window === "in" ? "in the window" : `${d.window} the window`;
  return `rollback: deny-all at ${d.ts ?? NA} (${d.mode ?? NA}, was ${d.previous ?? NA}${d.unchanged === true ? ", unchanged" : ""}, psi avg10 ${psi}), ${where}`;
}

function sourceText(r: Report): string {
  switch (r.source.kind) {
    case "live":
      return `live Redis ${r.source.where}`;
    case "aof":
      return `the drill's embedded Redis restarted from its AOF in ${r.source.where} (it had exited; stopped again after this report)`;
    case "export":
      return `export ${r.source.where}`;
  }
}

function heading(r: Report): { title: string; facts: string[] } {
  const name = r.drill?.name ?? "(no drill state)";
  const facts = [
    `window: ${windowSpan(r)}, ${r.window.from} → ${r.window.to}${windowEndText(r)}`,
    `source: ${sourceText(r)}, queue ${r.queue}`,
  ];
  if (r.drill) facts.push(`run ${r.drill.run_id ?? NA}, drill file ${r.drill.drill_file ?? NA}, created ${r.drill.created_at ?? NA}, phase ${r.drill.phase ?? NA}`);
  if (r.drill?.ended) facts.push(endedText(r.drill.ended));
  if (r.rollback_deny_all) facts.push(denyAllText(r.rollback_deny_all));
  facts.push(`generated ${r.generated_at}`);
  return { title: `drill report: ${name}`, facts };
}

// ---- markdown ---------------------------------------------------------------

/**
 * Prose for markdown, shown as written: paths, payload excerpts and ids hold
 * `*`, `_`, `<`, `[` that a renderer would turn into emphasis, HTML or links
 * (QA: `/tmp/_rec_*x*.jsonl` rendered as `/tmp/<em>rec</em>…`). Only what
 * CommonMark would read is escaped: an `_` inside a word never opens
 * emphasis, so `cg_psi_mem_some_rate` stays readable in the raw note.
 */
/**
 * Where markdown text goes: a GFM table cell reads `\|` as a `|` (inside
 * code too) and a bare one as a column; prose, a list item, shows the
 * backslash (QA AF: a pasted rollback command ran on `md\|x`, not `md|x`).
 */
type MdPlace = "cell" | "prose";

export function mdText(text: string, place: MdPlace = "prose"): string {
  // A span in backticks is code (drill's own commands and field names; a payload's shows literally there too):
  // kept as written, with a longer fence where it holds a backtick (codeSpan).
  const flat = text.replace(/\r?\n/g, " ");
  let out = "";
  let from = 0;
  for (const span of flat.matchAll(/(`+) .*? \1(?!`)|`[^`]+`/g)) {
    out += mdProse(flat.slice(from, span.index), place) + (place === "cell" ? span[0].replace(/\|/g, "\\|") : span[0]);
    from = span.index + span[0].length;
  }
  return out + mdProse(flat.slice(from), place);
}

function mdProse(text: string, place: MdPlace): string {
  return text
    .replace(place === "cell" ? /[\\`*<[\]~|]|&(?=#?[A-Za-z0-9]+;)/g : /[\\`*<[\]~]|&(?=#?[A-Za-z0-9]+;)/g, (c) => `\\${c}`)
    .replace(/_/g, (c, at: number, all: string) => (/[A-Za-z0-9]/.test(all[at - 1] ?? "") && /[A-Za-z0-9]/.test(all[at + 1] ?? "") ? c : `\\${c}`));
}

function mdCell(cell: Cell, place: MdPlace = "cell"): string {
  if (typeof cell === "string") return mdText(cell, place);
  const code = codeSpan(cell.code);
  return place === "cell" ? code.replace(/\|/g, "\\|") : code;
}

export function renderMarkdown(r: Report): string {
  const lines: string[] = [];
  const head = heading(r);
  lines.push(`## ${head.title}`, "", `> **${r.label}**`, "");
  for (const fact of head.facts) lines.push(`- ${mdText(fact)}`);
  for (const s of sections(r)) {
    lines.push("", `### ${s.title}`, "");
    for (const b of s.before ?? []) lines.push(mdCell(b, "prose"), "");
    if (s.header && s.rows) {
      lines.push(`| ${s.header.map((c) => mdCell(c)).join(" | ")} |`);
      lines.push(`|${s.header.map((_, i) => (s.right?.includes(i) ? "---:" : "---")).join("|")}|`);
      for (const row of s.rows) lines.push(`| ${row.map((c) => mdCell(c)).join(" | ")} |`);
    }
    if (s.after && s.after.length > 0) {
      if (s.header) lines.push("");
      for (const a of s.after) lines.push(s.title === "Notes" ? `- ${mdCell(a, "prose")}` : mdCell(a, "prose"));
    }
  }
  lines.push("", `_${r.label}._`);
  return lines.join("\n").replace(/\n{3,}/g, "\n\n");
}

// ---- text -------------------------------------------------------------------

const plain = (cell: Cell): string => (typeof cell === "string" ? cell : cell.code);

export function renderText(r: Report, color: ChalkInstance): string {
  const lines: string[] = [];
  const head = heading(r);
  // Facts and notes stay one line each (a line per fact is what a grep or a script finds); explanations wrap.
  lines.push(color.bold(head.title), color.yellow(r.label), ...head.facts.map((f) => `  ${f}`));
  const prose = (text: string) => wrapWords(text, TEXT_WIDTH - 2).map((l) => `  ${l}`);
  for (const s of sections(r)) {
    lines.push("", color.bold(s.title));
    // Prose wraps; a formula (code) too, its later lines indented further, to read as one.
    for (const b of s.before ?? []) lines.push(...(typeof b === "string" ? prose(b) : wrapWords(b.code, TEXT_WIDTH - 4).map((l, i) => `${i === 0 ? "  " : "    "}${l}`)));
    if (s.header && s.rows) {
      const table = [s.header, ...s.rows.map((row) => row.map(plain))];
      const columns = textColumns(table);
      lines.push(...textRow(s.header, columns, s.right).map((l) => color.dim(l)));
      // A reject line (code) stays whole, as the gate printed it: what a grep of the gate's log finds, pasted.
      s.rows.forEach((row, r) => lines.push(...textRow(table[r + 1]!, columns, s.right, row.map((c) => typeof c !== "string"))));
    }
    for (const a of s.after ?? []) lines.push(...(s.title === "Notes" ? [`  - ${a}`] : prose(a)));
  }
  return lines.join("\n");
}

/** Where text output wraps: prose, and every table's cells (80 columns: a terminal, an incident note). */
const TEXT_WIDTH = 80;
/** What a table's last column keeps at least when the columns before it narrow: a time (`2025-11-30T11:59:56.000Z`), a figure. */
const LAST_COLUMN_ROOM = 24;

/** A text table's layout: each column's width, and the spaces between columns. */
export interface TextColumns {
  widths: number[];
  gap: number;
}

/** Where column `i` starts in a text table's line (after the two-space indent). */
const columnStart = ({ widths, gap }: TextColumns, i: number): number => widths.slice(0, i).reduce((a, w) => a + w + gap, 2);

/** Cell `i` of `row` with nothing after it in its row: it may run on (wrapped) to the line's end. */
const lastInRow = (row: string[], i: number): boolean => row.slice(i + 1).every((c) => c === "");

/**
 * Column widths for text, the table within TEXT_WIDTH: each column as wide as
 * its widest cell, the last column wrapping at the line's end. When that
 * leaves the last column under LAST_COLUMN_ROOM, the widest column before it
 * narrows, a character at a time, down to its header and its longest word; its
 * longer cells wrap within it (QA: one 79-character cell padded every row of
 * Pressure to 175 columns; a cell run on past its column moved its row's later
 * cells, and "p99 against deadline" beside a long verdict, out of line). Every
 * row's cells start in their column, however long: its figure too. A table
 * whose headers alone pass TEXT_WIDTH (cost_proxy's eight) keeps one space
 * between columns, not two.
 */
export function textColumns(table: string[][]): TextColumns {
  const columns = table[0]?.length ?? 0;
  if (columns === 0) return { widths: [], gap: 2 };
  const last = columns - 1;
  const cells = (i: number) => table.map((row) => row[i] ?? "");
  const widths = Array.from({ length: columns }, (_, i) => Math.max(0, ...cells(i).map((c) => c.length)));
  // A cell with nothing after it runs on to the line's end: only the others hold their column's words.
  const floors = widths.map((_, i) =>
    Math.max((table[0]![i] ?? "").length, ...table.slice(1).filter((row) => !lastInRow(row, i)).flatMap((row) => (row[i] ?? "").split(" ").map((w) => w.length))),
  );
  const lastWanted = Math.min(widths[last]!, Math.max(LAST_COLUMN_ROOM, floors[last]!));
  const layout = { widths, gap: columnStart({ widths: floors, gap: 2 }, last) + floors[last]! > TEXT_WIDTH ? 1 : 2 };
  while (columnStart(layout, last) + lastWanted > TEXT_WIDTH) {
    const widest = widths.map((w, i) => ({ w, i })).filter(({ w, i }) => i < last && w > floors[i]!).sort((a, b) => b.w - a.w)[0];
    if (widest === undefined) break; // as narrow as they go
    widths[widest.i]! -= 1;
  }
  widths[last] = Math.max(floors[last]!, Math.min(widths[last]!, TEXT_WIDTH - columnStart(layout, last)));
  return layout;
}

/**
 * One table row as text lines: each cell wrapped within its column (to the
 * line's end when nothing follows it in the row), its later lines starting
 * in the same column; right-aligned columns padded to the left. A `whole`
 * cell (a reject line) is not wrapped: it runs on past the line's end.
 */
function textRow(row: string[], layout: TextColumns, right: number[] = [], whole: boolean[] = []): string[] {
  const { widths, gap } = layout;
  const wrapped = row.map((cell, i) =>
    cell === "" ? [] : whole[i] === true ? [cell] : wrapWords(cell, lastInRow(row, i) ? Math.max(widths[i]!, TEXT_WIDTH - columnStart(layout, i)) : widths[i]!),
  );
  const height = Math.max(1, ...wrapped.map((c) => c.length));
  return Array.from({ length: height }, (_, k) =>
    `  ${wrapped
      .map((c, i) => (right.includes(i) ? (c[k] ?? "").padStart(widths[i]!) : (c[k] ?? "").padEnd(widths[i]!)))
      .join(" ".repeat(gap))
      .trimEnd()}`,
  );
}

/**
 * Text word-wrapped at `width`: breaks at spaces only, so a job id list
 * (`job=1 job=2`, `a, b`) breaks between ids, after a comma, never inside one.
 * A word longer than a line (a path) is kept whole, on a line of its own.
 */
export function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  let line: string | null = null;
  for (const word of text.split(" ")) {
    if (line !== null && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === null ? word : `${line} ${word}`;
    }
  }
  lines.push(line ?? "");
  return lines;
}

/** `report --format json`'s document: the Report with its keys in snake_case (tests import it from here). */
export type ReportDocument = SnakeCased<Report>;

export function renderJson(r: Report): string {
  const doc: ReportDocument = snakeCaseKeys(r);
  return JSON.stringify(doc, null, 2);
}

export function renderReport(r: Report, format: ReportFormat, color: ChalkInstance): string {
  switch (format) {
    case "json":
      return renderJson(r);
    case "md":
      return renderMarkdown(r);
    case "text":
      return renderText(r, color);
  }
}
