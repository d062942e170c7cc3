import { describe, expect, it } from "vitest";
import { ExitCode, UsageError } from "../../src/errors.js";
import { parseDuration, parsePositiveInt, parseSize, parseWholeNumber } from "../../src/units.js";

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
  ])("%s", (text, bytes) => expect(parseSize(text, "--memory-max")).toBe(bytes));

  it.each(["", "G", "-1G", "2X", "2 G B", "1e9", "0x10", "two"])("refuses %j naming the flag, exit 2", (text) => {
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

describe("parseDuration", () => {
  it.each([
    ["8s", 8000],
    ["1500ms", 1500],
    ["10m", 600_000],
    ["1h", 3_600_000],
    ["0.5s", 500],
  ])("%s", (text, ms) => expect(parseDuration(text, "--deadline")).toBe(ms));

  it.each(["8", "", "s", "-1s", "8 sec", "8d", "1e3ms"])("refuses %j naming the flag", (text) => {
    expect(() => parseDuration(text, "--deadline")).toThrow(/^--deadline: /);
  });
});

describe("counts: parseWholeNumber (0 allowed) and parsePositiveInt (at least 1)", () => {
  it.each([
    ["0", 0],
    ["3", 3],
    [" 12 ", 12],
  ])("parseWholeNumber(%j) = %d", (text, n) => {
    expect(parseWholeNumber(text, "--retry-budget")).toBe(n);
  });

  it.each([
    ["0", "--max-jobs: must be at least 1"],
    ["-1", '--max-jobs: "-1" is not a whole number'],
    ["1.5", '--max-jobs: "1.5" is not a whole number'],
    ["", '--max-jobs: "" is not a whole number'],
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
