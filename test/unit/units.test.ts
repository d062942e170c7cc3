import { describe, expect, it } from "vitest";
import { ExitCode, UsageError } from "../../src/errors.js";
import { parseDuration, parseSize } from "../../src/units.js";

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
