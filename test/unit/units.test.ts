import { describe, expect, it } from "vitest";
import { ExitCode, UsageError } from "../../src/errors.js";
import { parseRate } from "../../src/commands/pack.run.js";
import { formatPlainDecimal, MAX_DURATION_MS, MAX_MAP_BYTES, mapSizeProblem, memoryMaxProblem, parseDuration, parseNumber, parsePercent, parsePositiveDuration, parsePositiveInt, parsePsiLimit, parseSize, parseWholeNumber } from "../../src/units.js";

describe("parseSize (IEC, powers of 1024)", () => {
  it.each([
    ["2G", 2 * 1024 ** 3],
    ["2GiB", 2 * 1024 ** 3],
    ["2gib", 2 * 1024 ** 3],
    ["512M", 512 * 1024 ** 2],
    ["64MiB", 64 * 1024 ** 2],
    ["2147483648", 2147483648],
    ["0", 0],
    ["1.5G", 1.5 * 1024 ** 3],
    [".5G", 0.5 * 1024 ** 3], // a plain decimal, as every number flag takes it
  ])("%s", (text, bytes) => expect(parseSize(text, "--memory-max")).toBe(bytes));

  it.each(["", "G", "-1G", "2X", "2 G B", "1e9", "0x10", "two", " 64 M ", "64 M", " 64M", "64M ", "2.5", "67108864.5", "4096.5B"])("refuses %j naming the flag, exit 2", (text) => {
    try {
      parseSize(text, "--memory-max");
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      expect((err as UsageError).exitCode).toBe(ExitCode.usage);
      expect((err as Error).message).toMatch(/^--memory-max: /);
    }
  });
});

describe("parseSize: decimal-looking units are refused, not taken as IEC", () => {
  it.each([
    ["64MB", '--memory-max: "64MB" is ambiguous (decimal or binary?); use 64M or 64MiB (powers of 1024)'],
    ["2gb", '--memory-max: "2gb" is ambiguous (decimal or binary?); use 2G or 2GiB (powers of 1024)'],
    ["512KB", '--memory-max: "512KB" is ambiguous (decimal or binary?); use 512K or 512KiB (powers of 1024)'],
    ["1TB", '--memory-max: "1TB" is ambiguous (decimal or binary?); use 1T or 1TiB (powers of 1024)'],
  ])("%s is exit 2 naming the flag and the IEC spellings", (text, message) => {
    let caught: unknown;
    try {
      parseSize(text, "--memory-max");
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(UsageError);
    expect((caught as UsageError).exitCode).toBe(ExitCode.usage);
    expect((caught as Error).message).toBe(message);
  });

  it("bytes spelled with B stay bytes", () => expect(parseSize("4096B", "--size")).toBe(4096));
  it("a count of bytes with a fraction says so (a unit's fraction rounds to the byte)", () => {
    expect(() => parseSize("2.5", "--size")).toThrow('--size: "2.5" is not a whole number of bytes');
    expect(parseSize("1.3K", "--size")).toBe(1331);
  });
});

describe("parsePercent (help shows <pct>)", () => {
  it.each([
    ["10", 10],
    ["10%", 10],
    ["2.5%", 2.5],
    [".5", 0.5],
    ["0", 0],
    ["100%", 100],
  ])("%j", (text, pct) => expect(parsePercent(text, "--psi-rate-limit")).toBe(pct));

  it.each([
    ["101", '--psi-rate-limit: "101" is a percentage (0-100)'],
    ["10%%", '--psi-rate-limit: "10%%" is not a percentage (use e.g. 10 or 10%)'],
    ["0x10", '--psi-rate-limit: "0x10" is not a percentage (use e.g. 10 or 10%)'],
    ["1e1", '--psi-rate-limit: "1e1" is not a percentage (use e.g. 10 or 10%)'],
    [" 2.5 % ", '--psi-rate-limit: " 2.5 % " is not a percentage (use e.g. 10 or 10%)'],
    ["-1", '--psi-rate-limit: "-1" is not a percentage (use e.g. 10 or 10%)'],
    ["%", '--psi-rate-limit: "%" is not a percentage (use e.g. 10 or 10%)'],
    ["ten", '--psi-rate-limit: "ten" is not a percentage (use e.g. 10 or 10%)'],
  ])("%j is exit 2 naming the flag", (text, message) => {
    expect(() => parsePercent(text, "--psi-rate-limit")).toThrow(new UsageError(message));
  });
});

// Number() took `--psi-limit 0x10` as 16 and `1e1` as 10: a limit nobody typed, silently.
describe("parseNumber and parsePsiLimit: plain decimal numbers only", () => {
  it.each([
    ["12", 12],
    ["12.5", 12.5],
    [".5", 0.5],
    ["0", 0],
    ["0.25", 0.25],
    ["100", 100],
  ])("%j = %d", (text, n) => {
    expect(parseNumber(text, "--decode-tokens-per-s")).toBe(n);
    expect(parsePsiLimit(text, "--psi-limit")).toBe(n);
  });

  it.each(["0x10", "1e1", "1E1", "0b11", "0o17", " 5 ", " 5", "5 ", "+5", "-1", "12.", "1_000", "Infinity", "NaN", "", " ", "1.2.3", "10%"])(
    "%j is exit 2 naming the flag",
    (text) => {
      for (const [parse, flag] of [[parseNumber, "--decode-tokens-per-s"], [parsePsiLimit, "--psi-limit"]] as const) {
        let caught: unknown;
        try {
          parse(text, flag);
        } catch (err) {
          caught = err;
        }
        expect(caught).toBeInstanceOf(UsageError);
        expect((caught as UsageError).exitCode).toBe(ExitCode.usage);
        expect((caught as Error).message).toBe(`${flag}: "${text}" is not a non-negative number (use e.g. 10 or 2.5)`);
      }
    },
  );

  it("a plain decimal too large for a number is refused, not Infinity", () => {
    expect(() => parseNumber("9".repeat(400), "--decode-tokens-per-s")).toThrow(/^--decode-tokens-per-s: "9+" is too large$/);
  });
});

describe("parseRate (pack --rate): the same plain decimal, with an optional /s", () => {
  it.each([
    ["4", 4],
    ["4/s", 4],
    ["0.5/s", 0.5],
    [".5/s", 0.5],
  ])("%j = %d", (text, rate) => expect(parseRate(text, "--rate")).toBe(rate));

  it.each(["0x10/s", "1e1", "1e1/s", " 4/s", "4/s ", "0", "0/s", "Infinity"])("%j is exit 2 naming the flag", (text) => {
    expect(() => parseRate(text, "--rate")).toThrow(new UsageError(`--rate: "${text}" is not a rate (use e.g. 4/s)`));
  });
});

// up hands drill-file numbers to gate, watch and worker as flags: String(1e-7) is "1e-7", which they refuse.
describe("formatPlainDecimal: a number as text the flags take back", () => {
  it.each([
    [10, "10"],
    [2.5, "2.5"],
    [0, "0"],
    [1e-7, "0.0000001"],
    [1.5e-7, "0.00000015"],
    [1e21, "1000000000000000000000"],
    [1.25e22, "12500000000000000000000"],
    [123.456, "123.456"],
  ])("%d → %s, which reads back as the same number", (n, text) => {
    expect(formatPlainDecimal(n)).toBe(text);
    expect(parseNumber(formatPlainDecimal(n), "--psi-limit")).toBe(n);
  });

  it("small percentages stay percentages", () => {
    expect(parsePercent(formatPlainDecimal(3e-9), "--psi-rate-limit")).toBe(3e-9);
  });
});

describe("parseDuration", () => {
  it.each([
    ["8s", 8000],
    ["1500ms", 1500],
    ["10m", 600_000],
    ["1h", 3_600_000],
    ["0.5s", 500],
    [".5s", 500], // a plain decimal, as every number flag takes it
  ])("%s", (text, ms) => expect(parseDuration(text, "--deadline")).toBe(ms));

  it.each(["8", "", "s", "-1s", "8 sec", "8d", "1e3ms", " 8 s ", "8 s", " 8s", "8s "])("refuses %j naming the flag", (text) => {
    expect(() => parseDuration(text, "--deadline")).toThrow(/^--deadline: /);
  });
  it("stops at 7 days: past 2^31 ms Node fires a timer at once", () => {
    expect(parseDuration("168h", "--duration")).toBe(MAX_DURATION_MS);
    expect(() => parseDuration("10081m", "--duration")).toThrow('--duration: "10081m" must be at most 168h');
    expect(() => parseDuration("600h", "--interval")).toThrow('--interval: "600h" must be at most 168h');
  });

  it("takes a cap of its own (a look back is not a timer)", () => {
    expect(parsePositiveDuration("720h", "--since", Number.MAX_SAFE_INTEGER)).toBe(720 * 3_600_000);
    expect(() => parseDuration("2h", "--x", 3_600_000)).toThrow('--x: "2h" must be at most 1h');
    // Too large for a number of ms: the cap is named when there is one.
    expect(() => parseDuration("9999999999999h", "--x", 3_600_000)).toThrow('--x: "9999999999999h" is too large (at most 1h)');
    expect(() => parseDuration("9999999999999h", "--x", Number.MAX_SAFE_INTEGER)).toThrow(/^--x: "9999999999999h" is too large$/);
  });
});

describe("parsePositiveDuration: how long to run, idle or look back", () => {
  it.each(["0s", "0ms", "0.0m", "0.0001ms"])("refuses %j: nothing would run or be reported", (text) => {
    expect(() => parsePositiveDuration(text, "--since")).toThrow(`--since: "${text}" must be more than 0`);
  });
  it("takes what parseDuration takes otherwise", () => expect(parsePositiveDuration("1500ms", "--since")).toBe(1500));
});

describe("counts: parseWholeNumber (0 allowed) and parsePositiveInt (at least 1)", () => {
  it.each([
    ["0", 0],
    ["3", 3],
    ["12", 12],
  ])("parseWholeNumber(%j) = %d", (text, n) => {
    expect(parseWholeNumber(text, "--retry-budget")).toBe(n);
  });

  it.each([
    ["0", "--max-jobs: must be at least 1"],
    ["-1", '--max-jobs: "-1" is not a whole number'],
    ["1.5", '--max-jobs: "1.5" is not a whole number'],
    ["", '--max-jobs: "" is not a whole number'],
    ["0x10", '--max-jobs: "0x10" is not a whole number'],
    ["1e1", '--max-jobs: "1e1" is not a whole number'],
    [" 5 ", '--max-jobs: " 5 " is not a whole number'],
    ["99999999999999999999", '--max-jobs: "99999999999999999999" is too large'],
  ])("parsePositiveInt(%j) is a usage error (exit 2) naming the flag", (text, message) => {
    let caught: unknown;
    try {
      parsePositiveInt(text, "--max-jobs");
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(UsageError);
    expect((caught as UsageError).message).toBe(message);
    expect((caught as UsageError).exitCode).toBe(ExitCode.usage);
  });

  it("parsePositiveInt accepts 1 and up", () => {
    expect(parsePositiveInt("1", "--jobs")).toBe(1);
    expect(parsePositiveInt("8", "--jobs")).toBe(8);
  });
});

describe("memory limits and map sizes: one bound for the flag and the drill file", () => {
  it("a memory limit under a page is refused (0 is not 'no limit')", () => {
    expect(memoryMaxProblem(0)).toMatch(/^is below one page/);
    expect(memoryMaxProblem(4095)).toMatch(/^is below one page/);
    expect(memoryMaxProblem(4096)).toBeNull();
  });

  it("a map is at least a page and at most the host's RAM + swap", () => {
    const host = 8 * 1024 ** 3;
    expect(mapSizeProblem(4095, host)).toBe("is less than one page (4096 bytes)");
    expect(mapSizeProblem(4096, host)).toBeNull();
    expect(mapSizeProblem(host, host)).toBeNull();
    expect(mapSizeProblem(host + 1, host)).toBe("is more than this host's RAM + swap (8.0GiB): the host could never hold it");
  });

  it("with the host unknown, the page toucher's own limit (under 2^32 pages) still holds", () => {
    expect(MAX_MAP_BYTES).toBe((2 ** 32 - 1) * 4096);
    expect(mapSizeProblem(MAX_MAP_BYTES, null)).toBeNull();
    expect(mapSizeProblem(parseSize("100T", "--size"), null)).toMatch(/^is more than the page toucher can map/);
  });
});
