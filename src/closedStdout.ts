import { readlinkSync } from "node:fs";
import { asciiText, unicodeLocale } from "./charset.js";
// `drill rollback | head` (or `drill up --json 2>&1 | head`): the reader went
// away, the command must not. Stopped half-way, a command that changes state
// leaves it half changed: a rollback with its embedded Redis still up and the
// drain not exported, a worker with a job mid-decode, a pack with half its
// jobs pushed, a cgroup half torn down. So every command keeps running and
// drops what it prints, on stdout and stderr alike, except the ones that only
// read: those end quietly, as `head` expects of them (`drill watch | head -3`).
let survivesClosedOutput = false;
const closed = new Set<NodeJS.WriteStream>();

/** Commands (by path, `cgroup status`) that change nothing: a closed pipe ends them. Any other command survives it. */
const READ_ONLY_COMMANDS: ReadonlySet<string> = new Set(["doctor", "cgroup status", "watch", "report", "help"]);

/** Does `drill <commandPath>` keep running when the reader of its output goes away? */
export function survivesClosedOutputOf(commandPath: string): boolean {
  return !READ_ONLY_COMMANDS.has(commandPath);
}

export function surviveClosedStdout(): void {
  survivesClosedOutput = true;
}

/** A write error on stdout or stderr: true when it is a closed pipe a command survives (main exits otherwise). */
export function closedStdoutSurvived(stream: NodeJS.WriteStream, err: NodeJS.ErrnoException): boolean {
  if (!survivesClosedOutput || (err.code !== "EPIPE" && err.code !== "ERR_STREAM_DESTROYED")) return false;
  closed.add(stream);
  return true;
}

/**
 * A write error on stdout or stderr that is not a closed pipe: the file they
 * go to refused it (a full disk, an immutable file, EIO; QA: `drill up`'s
 * sidecar died with a stack trace, and up quoted "Node.js v20" as why). The
 * line that says so, naming the file; `survived`: the command goes on
 * without that stream, as on a closed pipe (it changes state), else it ends.
 */
export function outputRefused(stream: NodeJS.WriteStream, err: NodeJS.ErrnoException): { line: string | null; survived: boolean } {
  // A stream written to directly goes on failing: said the first time only.
  if (closed.has(stream)) return { line: null, survived: true };
  const name = stream === process.stderr ? "stderr" : "stdout";
  let target = "";
  try {
    target = ` (${readlinkSync(`/proc/self/fd/${stream === process.stderr ? 2 : 1}`)})`;
  } catch {
    // no /proc: the stream's name says enough
  }
  const line = `drill: cannot write to ${name}${target}: ${err.code ?? err.message}`;
  if (!survivesClosedOutput) return { line, survived: false };
  closed.add(stream);
  return { line: `${line}; what it prints there is dropped from here, the command goes on`, survived: true };
}

/** Read once: the terminal drill was started on does not change its charset under it. */
export const TERMINAL_UNICODE = unicodeLocale(process.env);

/** What a person reads, in what their terminal can show (src/charset.ts). */
export const terminalText = (text: string): string => (TERMINAL_UNICODE ? text : asciiText(text));

/** process.stdout.write unless the reader is gone: lines for a person, in the terminal's charset. */
export const writeOut = (text: string): void => writeDocument(terminalText(text));

/**
 * A --json document (or `report --format json`) as it is, whatever the
 * locale: scripts read it, and JSON is UTF-8 by definition.
 */
export const writeDocument = (text: string): void => {
  if (!closed.has(process.stdout)) process.stdout.write(text);
};

/** process.stderr.write unless the reader is gone. Nothing on stderr is a document: always in the terminal's charset. */
export const writeErr = (text: string): void => {
  if (!closed.has(process.stderr)) process.stderr.write(terminalText(text));
};
