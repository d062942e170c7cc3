import { Command, Option } from "commander";
import { redactUrl, resolveGlobalOptions, type GlobalsFn } from "./context.js";
import { commandFactories } from "./commands/index.js";
import { UsageError } from "./errors.js";
import { refuseNotUtf8 } from "./util/notUtf8.js";
import { writeErr, writeOut } from "./closedStdout.js";
import { terminalWidth } from "./terminalWidth.js";

export const VERSION = "0.1.0";

/**
 * `json`: --json is on the command line. Commander prints the version the
 * moment it meets --version, before it has seen a --json after it, so the
 * caller says; `drill --json --version` prints {"version": …} for a script.
 */
export function buildProgram(json = false): Command {
  const program = new Command("drill")
    .description("Rehearse shared-host burst packing on a scratch host: tight memory cgroup, memory hog, PSI sidecar, admission gate, rollback.")
    .version(json ? JSON.stringify({ version: VERSION }) : VERSION)
    .addOption(new Option("--redis <url>", "Redis URL, redis://[user:password@]host:port[/db], or a unix socket path (default: embedded for up; for the others the Redis of the drill up in --state-dir on their queue; redis://127.0.0.1:6379 only when no drill is up there)").env("DRILL_REDIS_URL"))
    .addOption(new Option("--procfs <dir>", "procfs root; every /proc file is read under it").env("DRILL_PROCFS").default("/proc"))
    .addOption(new Option("--sysfs <dir>", "sysfs root; every /sys file is read under it").env("DRILL_SYSFS").default("/sys"))
    .addOption(new Option("--state-dir <dir>", "drill state (not /run: tmpfs loses drains on reboot)").env("DRILL_STATE_DIR").default("/var/lib/drill"))
    .option("--json", "machine-readable output", false)
    .option("--no-color", "no colour in output")
    .exitOverride();
  usageErrorsAsOneLine(program, []);

  const globals: GlobalsFn = () => resolveGlobalOptions({
      ...program.opts(),
      redisSource: program.getOptionValueSource("redis"),
      procfsSource: program.getOptionValueSource("procfs"),
      sysfsSource: program.getOptionValueSource("sysfs"),
      stateDirSource: program.getOptionValueSource("stateDir"),
    });

  // Before any command acts: a value that is not UTF-8 would name another file or cgroup (refuseNotUtf8).
  // `drill help` acts on no flag: it shows help whatever DRILL_STATE_DIR holds.
  program.hook("preAction", (_program, action) => {
    if (action.name() !== "help") refuseFlagsNotUtf8(action);
  });
  for (const factory of commandFactories) program.addCommand(factory(globals));
  addHelpCommand(program);
  inheritExitOverride(program);
  return program;
}

/**
 * Every flag's value of the command run and of those above it (`drill
 * --state-dir <dir> cgroup setup --name <cgroup>`), each checked by
 * refuseNotUtf8 and named as the operator gave it: the flag, or the variable
 * commander read into it (DRILL_STATE_DIR).
 */
function refuseFlagsNotUtf8(action: Command): void {
  for (let command: Command | null = action; command !== null; command = command.parent) {
    for (const option of command.options) {
      const key = option.attributeName();
      const source = command.getOptionValueSource(key) === "env" && option.envVar !== undefined ? option.envVar : (option.long ?? option.flags);
      const value: unknown = command.getOptionValue(key);
      // A Redis URL is shown as everywhere else, its password masked.
      const shown = option.long === "--redis" ? redactUrl : undefined;
      for (const given of Array.isArray(value) ? (value as unknown[]) : [value]) if (typeof given === "string") refuseNotUtf8(source, given, shown);
    }
  }
}

/**
 * addCommand() does not copy exitOverride: errors must reach main(), not process.exit.
 * The usage hint names the whole path (`drill gate mode --help`): `drill mode --help` is no command.
 */
function inheritExitOverride(command: Command, path: string[] = []): void {
  for (const sub of command.commands) {
    const subPath = [...path, sub.name()];
    sub.exitOverride();
    usageErrorsAsOneLine(sub, subPath);
    inheritExitOverride(sub, subPath);
  }
}

/**
 * A bad command line says so as every other refusal does, in one `drill: …`
 * line on stderr, with the help of the command typed: commander's own
 * `error: …` then a hint line (and a "Did you mean" line) read as two
 * messages to a script that keeps the last line (QA). Help and usage errors
 * go through drill's own writers, as all it prints: ASCII under LANG=C (an
 * argument commander quotes back, `unknown command 'wätch'`, is the user's
 * text), and nothing written to a reader that has gone; help is as wide as
 * doctor's table (terminalWidth).
 */
function usageErrorsAsOneLine(command: Command, path: string[]): void {
  const hint = `(run drill ${[...path, ""].join(" ")}--help for usage)`;
  command.configureOutput({
    writeOut,
    writeErr,
    // Commander's own: a terminal's width, else 80, COLUMNS unread. Laid out as doctor is (QA).
    getOutHelpWidth: () => terminalWidth(process.stdout),
    getErrHelpWidth: () => terminalWidth(process.stderr),
    outputError: (str, write) => write(`drill: ${str.trim().replace(/^error: /, "").replace(/\s*\n\s*/g, " ")} ${hint}\n`),
  });
}

/**
 * `drill help gate mode` shows the help of `gate mode`: commander's own help
 * command takes one name and showed `gate`'s help for it.
 */
function addHelpCommand(program: Command): void {
  program.helpCommand(false);
  program
    .command("help")
    .argument("[command...]", "the command, e.g. gate mode")
    .description("display help for command")
    .action((names: string[]) => {
      let target = program;
      for (const [i, name] of names.entries()) {
        const sub = target.commands.find((c) => c.name() === name || c.aliases().includes(name));
        if (sub === undefined) {
          const known = target.commands.map((c) => c.name()).filter((n) => n !== "help");
          throw new UsageError(`help: no command "${["drill", ...names.slice(0, i + 1)].join(" ")}" (commands: ${known.join(", ")})`);
        }
        target = sub;
      }
      target.help();
    });
}
