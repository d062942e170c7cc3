/*
 * How wide the operator's output may be. Apart from output.ts (which loads
 * chalk): --help is laid out by it too, and start-up loads no more than
 * commander and the command definitions.
 */

/** Columns text is laid out for when the output is no terminal (a pipe, a file): the classic terminal's. */
export const PIPED_WIDTH = 80;

/**
 * The width to lay text out for (doctor's table, --help) on `stream`: the
 * terminal's; when there is none (or it tells none), COLUMNS if it is a
 * positive integer (`COLUMNS=120 drill doctor | less`: the variable Python's
 * shutil.get_terminal_size reads), else PIPED_WIDTH. A terminal's own width wins over COLUMNS: an exported one goes stale when
 * the window is resized. Up to 4 digits: no terminal is wider, and doctor
 * fills the width it is given (COLUMNS=1000000 printed 69 MB).
 */
export function terminalWidth(stream: { isTTY?: boolean; columns?: number }, env: Readonly<Record<string, string | undefined>> = process.env): number {
  if (stream.isTTY === true && stream.columns !== undefined && stream.columns > 0) return stream.columns;
  const asked = env.COLUMNS ?? "";
  return /^[1-9][0-9]{0,3}$/.test(asked) ? Number(asked) : PIPED_WIDTH;
}
