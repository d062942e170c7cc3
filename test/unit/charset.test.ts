import { describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { asciiShellWord, asciiText, glyphsFor, unicodeLocale } from "../../src/charset.js";
import { shellWord } from "../../src/context.js";
import { PIPED_WIDTH, terminalWidth } from "../../src/terminalWidth.js";

const NON_ASCII = /[^\x20-\x7e]/u;

describe("unicodeLocale: the locale in effect, as setlocale(LC_CTYPE) finds it", () => {
  it.each<[Record<string, string>, boolean]>([
    [{ LANG: "C" }, false],
    [{ LC_ALL: "C" }, false],
    [{ LC_ALL: "POSIX" }, false],
    [{ LANG: "en_US" }, false],
    [{ LANG: "de_DE.ISO-8859-1" }, false],
    [{ LANG: "C.UTF-8" }, true],
    [{ LANG: "en_US.utf8" }, true],
    [{ LC_CTYPE: "C.Utf-8" }, true],
    // LC_ALL over LC_CTYPE over LANG
    [{ LC_ALL: "C", LC_CTYPE: "C.UTF-8", LANG: "C.UTF-8" }, false],
    [{ LC_ALL: "en_US.UTF-8", LANG: "C" }, true],
    [{ LC_CTYPE: "POSIX", LANG: "C.UTF-8" }, false],
    [{ LC_CTYPE: "C.UTF-8", LANG: "C" }, true],
    // an empty variable is unset, as setlocale reads it
    [{ LC_ALL: "", LANG: "C" }, false],
    [{ LC_ALL: "", LC_CTYPE: "", LANG: "C.UTF-8" }, true],
  ])("%j: %s", (env, unicode) => {
    expect(unicodeLocale(env)).toBe(unicode);
  });

  it("none set at all (a minimal container) is UTF-8: only an explicit C or POSIX asks for ASCII", () => {
    expect(unicodeLocale({})).toBe(true);
    expect(unicodeLocale({ LANG: "", LC_ALL: "" })).toBe(true);
    expect(unicodeLocale({ LANGUAGE: "C", TERM: "dumb" })).toBe(true); // neither is the charset
  });
});

describe("asciiText", () => {
  it("spells drill's symbols the way an operator would type them", () => {
    expect(asciiText("2026-01-01T00:00Z → 2026-01-01T00:10Z")).toBe("2026-01-01T00:00Z -> 2026-01-01T00:10Z");
    expect(asciiText("some avg10 is already ≥ 1.00 — refuse")).toBe("some avg10 is already >= 1.00 -- refuse");
    expect(asciiText("10 – 20 ms, 3 × reject_, … 5 more, now − age")).toBe("10 - 20 ms, 3 x reject_, ... 5 more, now - age");
  });

  it("box drawing as - | +, and anything else not ASCII as one ? each", () => {
    expect(asciiText("┌──┬──┐\n│ a│ b│\n╞══╪══╡")).toBe("+--+--+\n| a| b|\n+--+--+");
    expect(asciiText("café 🚀 ▇")).toBe("caf? ? #");
  });

  it("leaves ASCII, control characters and escape codes alone", () => {
    const text = "\x1b[31mFAIL\x1b[39m\tpath /var/tmp\n";
    expect(asciiText(text)).toBe(text);
  });
});

// QA: under LANG=C a pasteable `--state-dir '/tmp/x-é'` printed as '/tmp/x-?', a dir that does not exist.
describe("a word of a command to paste (shellWord), under ASCII", () => {
  it("asciiShellWord: $'...' with every byte outside printable ASCII, ' and \\ in octal, three digits each", () => {
    expect(asciiShellWord("/tmp/fix-charset-é")).toBe("$'/tmp/fix-charset-\\303\\251'");
    expect(asciiShellWord("a'b\\c\n7")).toBe("$'a\\047b\\134c\\0127'");
    expect(asciiShellWord("🚀")).toBe("$'\\360\\237\\232\\200'");
  });

  it.each(["/tmp/fix-charset-é", "/tmp/my dir/ünïcode 'quoted' \\ $HOME `x` *", "naïve\n0"])("bash reads %j back from it, byte for byte", (word) => {
    expect(execFileSync("bash", ["-c", `printf %s ${asciiShellWord(word)}`]).toString("utf8")).toBe(word);
  });

  it("asciiText: a word shellWord quoted keeps its bytes as $'...'; the same character in prose is ?", () => {
    const command = `drill --state-dir ${shellWord("/tmp/fix-charset-ü")} rollback --name elsw`;
    expect(command).toBe("drill --state-dir '/tmp/fix-charset-ü' rollback --name elsw");
    expect(asciiText(`state dir /tmp/fix-charset-ü → roll it back: ${command}`)).toBe(
      "state dir /tmp/fix-charset-? -> roll it back: drill --state-dir $'/tmp/fix-charset-\\303\\274' rollback --name elsw",
    );
    // a word holding a quote: shellWord's '\'' inside is part of the word
    expect(asciiText(`drill ${shellWord("o'ü")}`)).toBe("drill $'o\\047\\303\\274'");
    expect(asciiText("'über'")).toBe("'?ber'"); // never passed to shellWord: prose
  });
});

describe("glyphsFor", () => {
  it("ASCII glyphs are ASCII, one column per bar, eight levels like the Unicode ones", () => {
    const ascii = glyphsFor(false);
    const unicode = glyphsFor(true);
    expect(ascii.bars).toHaveLength(unicode.bars.length);
    expect(new Set(ascii.bars).size).toBe(ascii.bars.length);
    for (const text of [ascii.bars, ascii.ellipsis, ...Object.values(ascii.table ?? {})]) expect(text).not.toMatch(NON_ASCII);
    expect(unicode.table).toBeNull(); // cli-table3's own box drawing, as before
  });
});

describe("terminalWidth", () => {
  it("a terminal's width on a TTY; PIPED_WIDTH when piped or when the terminal tells none", () => {
    expect(terminalWidth({ isTTY: true, columns: 40 })).toBe(40);
    expect(terminalWidth({ isTTY: true, columns: 200 })).toBe(200);
    expect(terminalWidth({ isTTY: undefined, columns: undefined }, {})).toBe(PIPED_WIDTH);
    expect(terminalWidth({ isTTY: true, columns: 0 }, {})).toBe(PIPED_WIDTH);
    expect(PIPED_WIDTH).toBe(80);
  });

  it("piped, COLUMNS when it is a positive integer (of at most 4 digits); a terminal's own width wins over it", () => {
    const piped = { isTTY: undefined, columns: undefined };
    expect(terminalWidth(piped, { COLUMNS: "120" })).toBe(120);
    expect(terminalWidth(piped, { COLUMNS: "40" })).toBe(40);
    expect(terminalWidth(piped, { COLUMNS: "9999" })).toBe(9999);
    expect(terminalWidth({ isTTY: true, columns: 0 }, { COLUMNS: "100" })).toBe(100);
    for (const bad of ["", "0", "-5", "abc", "120px", "12.5", " 120", "0120", "10000", "1000000"]) expect(terminalWidth(piped, { COLUMNS: bad }), bad).toBe(PIPED_WIDTH);
    expect(terminalWidth({ isTTY: true, columns: 40 }, { COLUMNS: "200" })).toBe(40);
  });
});
