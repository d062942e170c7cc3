/**
 * What the operator's terminal can show. A terminal under `LANG=C` (a rescue
 * shell, a serial console, an ssh session with the locale stripped) shows
 * UTF-8 as mojibake: box drawing, trend bars, arrows. There drill prints
 * plain ASCII; everywhere else, what it always printed.
 */

/** The locale variables in the order C's setlocale(LC_CTYPE, "") reads them; an empty one counts as unset. */
const LOCALE_VARS = ["LC_ALL", "LC_CTYPE", "LANG"] as const;

/**
 * Does the terminal take UTF-8? Yes when the locale in effect names UTF-8
 * (`C.UTF-8`, `en_US.utf8`), no for any other (`C`, `POSIX`, `en_US`,
 * `de_DE.ISO-8859-1`). With none set at all, yes: that is a minimal container
 * or a service's bare environment far more often than a terminal that cannot
 * show UTF-8, and an explicit `LANG=C` is the operator's way to ask for ASCII.
 * systemd's is_locale_utf8() draws the same line (C chosen is ASCII, C by
 * default is not); tmux, htop and less, which go by the C library's codeset,
 * fall back to ASCII there instead.
 */
export function unicodeLocale(env: Readonly<Record<string, string | undefined>>): boolean {
  const locale = LOCALE_VARS.map((name) => env[name]).find((value) => value !== undefined && value !== "");
  return locale === undefined || /utf-?8/i.test(locale);
}

/** The symbols drill's own text uses, in the ASCII an operator would type for them. */
const ASCII_FOR: Readonly<Record<string, string>> = {
  "→": "->",
  "←": "<-",
  "…": "...",
  "—": "--",
  "–": "-",
  "−": "-",
  "≥": ">=",
  "≤": "<=",
  "≠": "!=",
  "×": "x",
  "±": "+/-",
  "‘": "'",
  "’": "'",
  "“": '"',
  "”": '"',
};

/**
 * Words of the commands drill prints for the operator to paste (shellWord's
 * quoting) that hold non-ASCII, each with its ASCII spelling (asciiShellWord).
 * Prose shows such a character as `?`; a command cannot: a pasted
 * `--state-dir '/tmp/caf?'` names a dir that does not exist.
 */
const pasteableWords = new Map<string, string>();

/** `quoted`, the shell's quoting of `word`, is part of a command to paste: the ASCII pass keeps its bytes. */
export function markPasteable(quoted: string, word: string): void {
  if (/[\u0080-\u{10ffff}]/u.test(word)) pasteableWords.set(quoted, asciiShellWord(word));
}

/**
 * `word` in ASCII as bash, zsh, ksh and POSIX.1-2024 sh read back the same
 * bytes: `$'/tmp/caf\303\251'`. Every byte outside printable ASCII, and `'`
 * and `\`, as a three-digit octal escape (no digit after it can extend it).
 */
export function asciiShellWord(word: string): string {
  const bytes = [...Buffer.from(word, "utf8")];
  return `$'${bytes.map((b) => (b >= 0x20 && b < 0x7f && b !== 0x27 && b !== 0x5c ? String.fromCharCode(b) : `\\${b.toString(8).padStart(3, "0")}`)).join("")}'`;
}

/**
 * Text for a terminal that takes ASCII only: drill's symbols spelled in
 * ASCII, box drawing as - | +, a word of a command to paste (markPasteable)
 * as asciiShellWord, and anything else not ASCII (a drill's description, a
 * path in prose) as `?`, as C-locale tools show what they cannot.
 */
export function asciiText(text: string): string {
  const words = [...pasteableWords.keys()].filter((word) => text.includes(word)).sort((a, b) => b.length - a.length);
  const wordsFirst = words.map((word) => `${word.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&")}|`).join("");
  return text.replace(new RegExp(`${wordsFirst}[\\u0080-\\u{10ffff}]`, "gu"), (match) => pasteableWords.get(match) ?? asciiChar(match));
}

function asciiChar(char: string): string {
  const known = ASCII_FOR[char];
  if (known !== undefined) return known;
  const code = char.codePointAt(0)!;
  if (code >= 0x2500 && code <= 0x257f) return boxDrawingAscii(code); // U+2500 Box Drawing
  if (code >= 0x2580 && code <= 0x259f) return "#"; // U+2580 Block Elements
  return "?";
}

/** ─ ━ ═ as -, │ ┃ ║ as |, every corner and junction as +. */
function boxDrawingAscii(code: number): string {
  if ([0x2500, 0x2501, 0x2504, 0x2505, 0x2508, 0x2509, 0x254c, 0x254d, 0x2550].includes(code)) return "-";
  if ([0x2502, 0x2503, 0x2506, 0x2507, 0x250a, 0x250b, 0x254e, 0x254f, 0x2551].includes(code)) return "|";
  return "+";
}

/** The characters a renderer that lays lines out by width draws with: it must know their width before it prints. */
export interface Glyphs {
  /** Marks a value cut short. */
  ellipsis: string;
  /** A trend's eight levels, lowest first, one column each. */
  bars: string;
  /** Border characters of a table (cli-table3's names); null: its own box drawing. */
  table: Readonly<Record<TableCharName, string>> | null;
  /** Any other text the renderer measures: as it is, or in ASCII. */
  text: (text: string) => string;
}

type TableCharName =
  | "top"
  | "top-mid"
  | "top-left"
  | "top-right"
  | "bottom"
  | "bottom-mid"
  | "bottom-left"
  | "bottom-right"
  | "left"
  | "left-mid"
  | "mid"
  | "mid-mid"
  | "right"
  | "right-mid"
  | "middle";

const UNICODE_GLYPHS: Glyphs = { ellipsis: "…", bars: "▁▂▃▄▅▆▇█", table: null, text: (text) => text };

/** `+---+---+` and `| a | b |`: what a table looks like in a man page or a psql session. */
const ASCII_TABLE: Record<TableCharName, string> = {
  top: "-",
  "top-mid": "+",
  "top-left": "+",
  "top-right": "+",
  bottom: "-",
  "bottom-mid": "+",
  "bottom-left": "+",
  "bottom-right": "+",
  left: "|",
  "left-mid": "+",
  mid: "-",
  "mid-mid": "+",
  right: "|",
  "right-mid": "+",
  middle: "|",
};

/** The bars' levels by how much of a character cell each inks, from the baseline up. */
const ASCII_GLYPHS: Glyphs = { ellipsis: "...", bars: "_.:-=+*#", table: ASCII_TABLE, text: asciiText };

export function glyphsFor(unicode: boolean): Glyphs {
  return unicode ? UNICODE_GLYPHS : ASCII_GLYPHS;
}
