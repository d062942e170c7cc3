import { CommanderError } from "commander";
import { describe, expect, it } from "vitest";
import { buildProgram } from "../../src/cli.js";

/** What commander prints for a bad command line: the error, then the hint to the help of the command that was typed. */
async function usageOutput(args: string[]): Promise<string> {
  const program = buildProgram();
  let written = "";
  const capture = (cmd: typeof program) => {
    cmd.configureOutput({ writeErr: (str) => (written += str), writeOut: (str) => (written += str) });
    for (const sub of cmd.commands) capture(sub);
  };
  capture(program);
  await expect(program.parseAsync(["node", "drill", ...args])).rejects.toBeInstanceOf(CommanderError);
  return written;
}

describe("a usage error's hint names the whole command path", () => {
  it.each([
    [["gate", "mode"], "(run drill gate mode --help for usage)"],
    [["gate", "mode", "admit", "x"], "(run drill gate mode --help for usage)"],
    [["cgroup", "setup", "--bogus"], "(run drill cgroup setup --help for usage)"],
    [["cgroup", "--bogus"], "(run drill cgroup --help for usage)"],
    [["pack", "--bogus"], "(run drill pack --help for usage)"],
    [["--bogus"], "(run drill --help for usage)"],
  ])("drill %j", async (args, hint) => {
    const out = await usageOutput(args);
    // One `drill: …` line, as every other refusal: the error, then the hint.
    expect(out).toMatch(/^drill: [^\n]+\n$/);
    expect(out.trimEnd().endsWith(hint)).toBe(true);
    expect(out).not.toContain("error: ");
    expect(out).not.toMatch(/run drill (mode|setup) --help/);
  });

  // QA: `error: unknown option '--bogus'` and the hint on a second line; a typo's suggestion on a third.
  it("commander's message and its suggestion are kept, on the one line", async () => {
    expect(await usageOutput(["up", "--bogus"])).toBe("drill: unknown option '--bogus' (run drill up --help for usage)\n");
    expect(await usageOutput(["watch", "--jsn"])).toMatch(/^drill: unknown option '--jsn' \(Did you mean --json\?\) \(run drill watch --help for usage\)\n$/);
    expect(await usageOutput(["gate", "mode"])).toBe("drill: missing required argument 'mode' (run drill gate mode --help for usage)\n");
  });
});
