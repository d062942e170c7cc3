import { describe, expect, it } from "vitest";
import type { Command } from "commander";
import { execa } from "execa";
import { drillBin, runDrill } from "../helpers/cli.js";
import { buildProgram, VERSION } from "../../src/cli.js";
import { writeErr, writeOut } from "../../src/closedStdout.js";

/** Every command and subcommand, as the words typed before --help. */
function commandPaths(command: Command, path: string[] = []): string[][] {
  return [path, ...command.commands.filter((c) => c.name() !== "help").flatMap((c) => commandPaths(c, [...path, c.name()]))];
}

// A group typed without its subcommand is a usage error (exit 2, help on
// stderr); asking for help is not (exit 0, help on stdout).
describe("help and a missing subcommand", () => {
  it.each([[[]], [["cgroup"]]])("drill %j: exit 2, the help on stderr", async (args) => {
    const r = await runDrill(args);
    expect(r.exitCode).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^Usage: drill /);
  });

  it.each([
    [["help"], "Usage: drill [options] [command]"],
    [["help", "cgroup"], "Usage: drill cgroup [options] [command]"],
    [["help", "gate", "mode"], "Usage: drill gate mode [options] <mode>"],
    [["cgroup", "--help"], "Usage: drill cgroup [options] [command]"],
  ])("drill %j: exit 0, that command's help", async (args, usage) => {
    const r = await runDrill(args);
    expect(r.exitCode).toBe(0);
    expect(r.stdout.split("\n")[0]).toBe(usage);
  });

  it("drill help gate nosuch: exit 2 naming what exists", async () => {
    const r = await runDrill(["help", "gate", "nosuch"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain('no command "drill gate nosuch" (commands: mode)');
  });

  it.each([
    [["--version"], "0.1.0"],
    [["--json", "--version"], '{"version":"0.1.0"}'],
    [["--version", "--json"], '{"version":"0.1.0"}'],
  ])("drill %j: exit 0, the version (JSON with --json, wherever it stands)", async (args, out) => {
    const r = await runDrill(args);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe(out);
    expect(r.stdout).toBe(args.includes("--json") ? JSON.stringify({ version: VERSION }) : VERSION);
  });

  // Text added after commander's own (addHelpText) is not wrapped by it: an 80-column terminal broke it mid-word.
  it.each(commandPaths(buildProgram()))("drill %s --help fits 80 columns", async (...path) => {
    const r = await runDrill([...path, "--help"], { env: { COLUMNS: "80" } });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.split("\n").filter((line) => line.length > 80)).toEqual([]);
  });
});

// Help and usage errors are commander's text, but printed as drill prints
// everything: through its writers (ASCII under LANG=C, nothing to a reader
// that has gone). QA: `drill wätch` under LANG=C quoted the word back raw.
describe("help and usage errors under the terminal's charset", () => {
  const NOT_ASCII = /[\u0080-\u{10ffff}]/u;
  const locale = (LANG: string) => ({ env: { LANG, LC_ALL: undefined, LC_CTYPE: undefined } });

  it("every command writes its help and errors with drill's writers", () => {
    const all = (c: Command): Command[] => [c, ...c.commands.flatMap(all)];
    for (const command of all(buildProgram())) {
      const out = command.configureOutput();
      expect([command.name(), out.writeOut, out.writeErr]).toEqual([command.name(), writeOut, writeErr]);
    }
  });

  it.each([
    [["wätch"], "drill: unknown command 'w?tch' (Did you mean watch?) (run drill --help for usage)"],
    [["up", "--drill", "é.yaml", "--bögus"], "drill: unknown option '--b?gus' (run drill up --help for usage)"],
  ])("LANG=C: drill %j is exit 2, one line, ASCII; UTF-8 quotes the argument as typed", async (args, line) => {
    const ascii = await runDrill(args, locale("C"));
    expect(ascii.exitCode).toBe(2);
    expect(ascii.stdout).toBe("");
    expect(ascii.stderr).toBe(line);
    const utf8 = await runDrill(args, locale("C.UTF-8"));
    expect(utf8.exitCode).toBe(2);
    expect(utf8.stderr).toBe(line.replace("w?tch", "wätch").replace("--b?gus", "--bögus"));
  });

  it.each([[["--help"]], [["help", "gate", "mode"]], [["cgroup"]]])("drill %j: the same help and exit code under LANG=C as under UTF-8, ASCII", async (args) => {
    const ascii = await runDrill(args, locale("C"));
    const utf8 = await runDrill(args, locale("C.UTF-8"));
    expect(ascii.exitCode).toBe(utf8.exitCode);
    expect([ascii.stdout, ascii.stderr]).toEqual([utf8.stdout, utf8.stderr]);
    expect(ascii.stdout + ascii.stderr).not.toMatch(NOT_ASCII);
  });
});

// QA: piped, help was 80 columns whatever COLUMNS said, while doctor's table
// followed it: both are laid out by terminalWidth (a terminal's width, else
// COLUMNS of 1-4 digits, else 80).
describe("help as wide as doctor's table", () => {
  const widest = (text: string): number => Math.max(...text.split("\n").map((l) => l.length));

  it.each([["120", 120], ["100", 100]])("piped, COLUMNS=%s: up to %i columns, on stdout and (a missing subcommand) on stderr", async (columns, width) => {
    const help = await runDrill(["--help"], { env: { COLUMNS: columns } });
    expect(widest(help.stdout), help.stdout).toBeLessThanOrEqual(width);
    expect(widest(help.stdout), help.stdout).toBeGreaterThan(80);
    const missing = await runDrill(["cgroup"], { env: { COLUMNS: columns } });
    expect(missing.exitCode).toBe(2);
    expect(widest(missing.stderr), missing.stderr).toBeGreaterThan(80);
    expect(widest(missing.stderr), missing.stderr).toBeLessThanOrEqual(width);
  });

  it.each(["", "0", "wide", "10000"])("piped, COLUMNS=%j: 80 columns, as with none", async (columns) => {
    const help = await runDrill(["--help"], { env: { COLUMNS: columns } });
    const none = await runDrill(["--help"], { env: { COLUMNS: undefined } });
    expect(help.stdout).toBe(none.stdout);
    expect(widest(help.stdout)).toBeLessThanOrEqual(80);
  });

  it("on a 100-column terminal: 100 wide, a stale COLUMNS=50 aside", async () => {
    const r = await execa("script", ["-qfec", `stty cols 100 rows 50; node '${drillBin}' --help`, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", COLUMNS: "50" } });
    const out = String(r.stdout).replaceAll("\r\n", "\n");
    expect(widest(out), out).toBeGreaterThan(80);
    expect(widest(out), out).toBeLessThanOrEqual(100);
  });
});
