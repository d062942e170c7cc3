import { CommanderError, type Command } from "commander";
import { buildProgram } from "./cli.js";
import { DrillError, ExitCode } from "./errors.js";
import { writeSync } from "node:fs";
import { closedStdoutSurvived, outputRefused, survivesClosedOutputOf, surviveClosedStdout, terminalText, writeErr } from "./closedStdout.js";
import { foreignRecordRefusal } from "./util/ownFiles.js";
import { answeredWithRefusal, refusalText } from "./queue/refusal.js";
import { began, exitOnLateSignal, interruptWhileStarting } from "./interrupt.js";

/** The one exit point: commands throw typed errors, this maps them to codes. */
export async function main(argv: string[]): Promise<number> {
  interruptWhileStarting();
  const exitCode = await runCommand(argv);
  began(); // --help, a usage error: nothing began
  exitOnLateSignal(exitCode);
  return exitCode;
}

async function runCommand(argv: string[]): Promise<number> {
  // DRILL_TEST_START_DELAY_MS (tests): a start as slow as a loaded VM's, for a signal to land in it.
  const startDelayMs = Number(process.env.DRILL_TEST_START_DELAY_MS ?? 0);
  if (startDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, startDelayMs));
  // Only the options before a `--` are drill's.
  const end = argv.indexOf("--");
  const json = (end < 0 ? argv : argv.slice(0, end)).includes("--json");
  // `drill cgroup status | head -4`: a closed pipe ends the output, not the process with a stack;
  // a command that changes state goes on without it (closedStdout.ts says which).
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (err: NodeJS.ErrnoException) => {
      if (closedStdoutSurvived(stream, err)) return;
      if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
      if (err.code === "ERR_STREAM_DESTROYED") return; // a stream that failed before: said then
      const refused = outputRefused(stream, err);
      // Said on the other stream, one line, no stack trace; never on a --json stdout, which carries JSON only (QA).
      const other = stream === process.stderr ? (json ? null : 1) : 2;
      try {
        if (refused.line !== null && other !== null) writeSync(other, terminalText(`${refused.line}\n`));
      } catch {
        // neither takes it: the exit code says it
      }
      if (!refused.survived) process.exit(ExitCode.failed);
    });
  }
  const program = buildProgram(json);
  let ran = "";
  program.hook("preAction", (_program, action) => {
    ran = commandPath(action);
    if (survivesClosedOutputOf(ran)) surviveClosedStdout();
  });
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === "number" ? process.exitCode : ExitCode.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // commander already printed its message. --help, --version and `drill help` are not
      // errors; help shown because no subcommand was given (`drill cgroup`) is (exitCode 1).
      if (err.code === "commander.helpDisplayed" || err.code === "commander.version") return ExitCode.ok;
      if (err.code === "commander.help" && err.exitCode === 0) return ExitCode.ok;
      return ExitCode.usage;
    }
    // A record drill did not write: bad input to a command that does not undo, not rollback's 4 (foreignRecordRefusal).
    const said = foreignRecordRefusal(err, ran);
    if (said instanceof DrillError) {
      writeErr(`drill: ${said.message}\n`);
      return said.exitCode;
    }
    // Redis answered with a refusal no command turned into its own words (OOM, READONLY, an ACL): said, not a stack trace.
    if (answeredWithRefusal(err)) {
      writeErr(`drill: redis refused: ${refusalText(err)}\n`);
      return ExitCode.failed;
    }
    writeErr(`drill: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return ExitCode.failed;
  }
}

/** `gate mode` for the command that runs `drill gate mode admit`: its names below the program. */
function commandPath(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(" ");
}
