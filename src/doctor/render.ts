import Table from "cli-table3";
import type { ChalkInstance } from "chalk";
import { glyphsFor } from "../charset.js";
import { PIPED_WIDTH } from "../terminalWidth.js";
import type { Check, ServingVerdict } from "./checks.js";

export type DrillVerdict = "ready" | "ready_with_warnings" | "refused";

export function drillVerdict(checks: Check[]): DrillVerdict {
  if (checks.some((c) => c.status === "fail")) return "refused";
  return checks.some((c) => c.status === "warn") ? "ready_with_warnings" : "ready";
}

// Narrowest terminal the four columns are laid out for; below it each check is one cell (stackedCell).
const MIN_WIDTH = 64;
// Narrowest terminal doctor is laid out for at all; below it, lines run over.
const STACKED_MIN_WIDTH = 24;
/** The status column: "status", "pass", "warn" or "FAIL", padded. */
const STATUS_WIDTH = 8;

/**
 * Column widths (each with its 1-space padding either side) that add up, with
 * the 5 border characters, to the terminal's width: name and status fixed,
 * the rest shared 2:3 between value (mostly paths) and detail (prose).
 */
export function doctorColumnWidths(width: number): [number, number, number, number] {
  const total = Math.max(MIN_WIDTH, width);
  const name = total >= 100 ? 22 : 20;
  const status = STATUS_WIDTH;
  const rest = total - 5 - name - status;
  const value = Math.floor((rest * 2) / 5);
  return [name, status, value, rest - value];
}

/** A word longer than `width` (a cgroup path) in pieces that fit, cut after a "/" where one is near. */
export function breakWord(word: string, width: number): string[] {
  const pieces: string[] = [];
  let rest = word;
  while (rest.length > width) {
    const slash = rest.lastIndexOf("/", width - 1);
    const cut = slash >= width / 2 ? slash + 1 : width;
    pieces.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  pieces.push(rest);
  return pieces;
}

/**
 * A cell's text with its long words broken onto lines of their own, so the
 * table wraps the rest at word boundaries and cuts nothing off with "…".
 */
function cellText(text: string, colWidth: number): string {
  const inner = colWidth - 2;
  return text
    .split(" ")
    .map((word) => (word.length > inner ? `\n${breakWord(word, inner).join("\n")}\n` : word))
    .join(" ")
    .replace(/ ?\n ?/g, "\n")
    .replace(/^\n|\n$/g, "");
}

/** Prose wrapped at word boundaries to the width, its leading indent kept, continuation lines indented. */
export function wrapProse(text: string, width: number, indent: string): string[] {
  const lead = /^ */.exec(text)![0];
  const lines: string[] = [];
  let line = lead;
  const room = Math.max(8, width - indent.length);
  for (const word of text.slice(lead.length).split(" ").flatMap((w) => (w.length > room ? breakWord(w, room) : [w]))) {
    if (line.trim() !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = indent + word;
    } else {
      line = line.trim() === "" ? line + word : `${line} ${word}`;
    }
  }
  if (line.trim() !== "") lines.push(line);
  return lines;
}

/**
 * A check in a terminal too narrow for four columns: its name, then its value
 * and detail indented under it, each wrapped to the cell.
 */
function stackedCell(c: Check, colWidth: number): string {
  const inner = colWidth - 2;
  const lines = [...wrapProse(c.name, inner, "")];
  if (c.value !== null) lines.push(...wrapProse(`  ${String(c.value)}`, inner, "  "));
  lines.push(...wrapProse(`  ${c.detail}`, inner, "  "));
  return lines.join("\n");
}

/**
 * The checks as a table `width` columns wide (terminalWidth: the terminal's;
 * piped, COLUMNS or PIPED_WIDTH), then the verdicts wrapped to it: four
 * columns from MIN_WIDTH up, two (check, status) below it. `unicode`: the terminal takes UTF-8 (box
 * drawing), else the table and its text are ASCII.
 */
export function renderDoctor(checks: Check[], serving: ServingVerdict, color: ChalkInstance, width = PIPED_WIDTH, unicode = true): string {
  const glyphs = glyphsFor(unicode);
  const mark = { pass: color.green("pass"), warn: color.yellow("warn"), fail: color.red("FAIL") };
  const shown = checks.map((c) => ({ ...c, name: glyphs.text(c.name), value: c.value === null ? null : glyphs.text(String(c.value)), detail: glyphs.text(c.detail) }));
  const style = { head: [], border: [] };
  const chars = glyphs.table ?? undefined;
  let table: InstanceType<typeof Table>;
  if (width >= MIN_WIDTH) {
    const colWidths = doctorColumnWidths(width);
    table = new Table({ head: ["check", "status", "value", "detail"], style, chars, colWidths, wordWrap: true, wrapOnWordBoundary: true });
    for (const c of shown) table.push([cellText(c.name, colWidths[0]), mark[c.status], cellText(c.value ?? "-", colWidths[2]), cellText(c.detail, colWidths[3])]);
  } else {
    const colWidths = [Math.max(STACKED_MIN_WIDTH, width) - 3 - STATUS_WIDTH, STATUS_WIDTH];
    table = new Table({ head: ["check", "status"], style, chars, colWidths });
    for (const c of shown) table.push([stackedCell(c, colWidths[0]!), mark[c.status]]);
  }
  const prose = (text: string, indent = ""): string[] => wrapProse(glyphs.text(text), Math.max(STACKED_MIN_WIDTH, width), indent);

  const verdict = drillVerdict(checks);
  const lines = [table.toString()];
  const fails = checks.filter((c) => c.status === "fail");
  if (verdict === "refused") {
    lines.push(...prose(`drill: REFUSED, the drill cannot run safely here: ${fails.map((c) => c.name).join(", ")}`, "  ").map((l) => color.red(l)));
  } else {
    lines.push(verdict === "ready" ? color.green("drill: ready") : color.yellow("drill: ready, read the warnings above"));
  }
  lines.push(
    "",
    ...prose(`serving on this host class (the runbook's "refuse the free-host bet" list; informational, never blocks the drill):`, "  "),
  );
  for (const r of serving.reasons) {
    const state = r.holds === null ? "ask" : r.holds ? "yes" : "no";
    // Wrapped before colouring: the state word is the first of the first line.
    const [first = "", ...more] = prose(`  ${state.padEnd(4)} ${r.rule} (${r.why})`, "       ");
    const paint = r.holds === null ? (t: string) => t : r.holds ? color.red : color.green;
    lines.push(`  ${paint(state.padEnd(4))}${first.slice(6)}`, ...more);
  }
  const verdictText = serving.refuse
    ? "  verdict: refuse the free-host bet for deadline serving; rehearse and gate it here instead"
    : "  verdict: no refusal condition holds; still gate admission on PSI, slack and packed tokens";
  lines.push(...prose(verdictText, "    ").map((l) => (serving.refuse ? color.red(l) : l)));
  return lines.join("\n");
}
