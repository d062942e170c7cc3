/**
 * Reading a text report whose tables wrap at 80 columns (a long value under
 * its own column, a long label within the label column): tests join the
 * wrapped lines back and compare the whole text.
 */

/** The text with every run of spaces and line breaks as one space: a wrapped value or paragraph reads as written. */
export const flat = (text: string): string => text.replace(/\s+/g, " ");

/**
 * The table row whose label is `label` (its label may wrap over lines): each
 * cell joined back from its lines, `value` the cells after the label, and
 * `column` where the second column starts. Its columns are the header's
 * (`header`, left-aligned columns), else the label and what follows it on the
 * row's first line. Undefined when no row starts with that label.
 */
export function textRow(text: string, label: string, header?: string[]): { label: string; value: string; cells: string[]; column: number } | undefined {
  const lines = text.split("\n");
  const first = (l: string) => l.slice(2).split(/ {2,}/)[0]!;
  const at = lines.findIndex((l) => l.startsWith("  ") && first(l) !== "" && (label === first(l) || label.startsWith(`${first(l)} `)) && l.slice(2 + first(l).length).trim() !== "");
  if (at < 0) return undefined;
  const head = lines[at]!;
  let starts = [2, head.length - head.slice(2 + first(head).length).trimStart().length];
  if (header) {
    const line = lines.slice(0, at).reverse().find((l) => l.trim().split(/ {2,}/).join("|") === header.join("|"))!;
    starts = header.map((h, i) => line.indexOf(h, i === 0 ? 0 : line.indexOf(header[i - 1]!) + header[i - 1]!.length));
  }
  const cellsOf = (line: string) => starts.map((s, i) => line.slice(s, starts[i + 1] ?? line.length).trim());
  const cells: string[][] = cellsOf(head).map((c) => [c]);
  for (const line of lines.slice(at + 1)) {
    if (line.trim() === "") break;
    const parts = cellsOf(line);
    if (cells[0]!.join(" ") === label && parts[0] !== "") break; // the next row
    parts.forEach((p, i) => p !== "" && cells[i]!.push(p));
  }
  const joined = cells.map((c) => c.filter(Boolean).join(" "));
  return { label: joined[0]!, value: joined.slice(1).filter(Boolean).join(" "), cells: joined, column: starts[1]! };
}
