import { ExitCode } from "./errors.js";

let installed = false;
let handedOver = false;

/**
 * From main() until the command's implementation has loaded (commands load
 * lazily: up to a second on a slow VM), SIGINT and SIGTERM say that nothing
 * was done and exit 130/143, where node's default ended drill without a word
 * (QA: Ctrl-C in the first second of a rollback or an up exited 130 silently).
 * began() hands over to the command's own handling, or node's default for a
 * command that has none. bin/drill.js installs it before it loads main.js
 * (QA: main's own imports were a silent 50-100 ms).
 *
 * The listeners stay for the life of the process: a signal that arrived while
 * they were installed is dispatched later, from the event loop, and removing
 * the last listener before that drops it (QA: a gate SIGTERMed 0.15 s after
 * its start kept deciding jobs). Handed over, they leave the signal to the
 * command's listeners, or, with none, re-raise it with node's default.
 */
export function interruptWhileStarting(): void {
  if (installed) return; // bin/drill.js installed it before loading the rest
  installed = true;
  ignoreDebuggerSignal();
  const handler = (signal: "SIGINT" | "SIGTERM") => () => {
    if (handedOver) {
      if (process.listenerCount(signal) > 1) return; // the command's own handling has it
      process.removeAllListeners(signal);
      process.kill(process.pid, signal); // node's default, as if drill had never listened
      return;
    }
    process.stderr.write(`drill: interrupted by ${signal} while starting: nothing was done\n`);
    process.exit(signal === "SIGINT" ? ExitCode.interrupted : ExitCode.terminated);
  };
  process.on("SIGINT", handler("SIGINT"));
  process.on("SIGTERM", handler("SIGTERM"));
}

let debuggerSignalIgnored = false;

/**
 * SIGUSR1 starts node's inspector by default: a debugger port on a root
 * process that holds the drill's cgroup and queue (QA). A listener of our own
 * keeps it closed (node 20 has no --disable-sigusr1); the signal does nothing.
 */
function ignoreDebuggerSignal(): void {
  if (debuggerSignalIgnored) return;
  debuggerSignalIgnored = true;
  process.on("SIGUSR1", () => {});
}

/** The command's implementation is loaded and about to act: its own handling from here on. Safe to call twice. */
export function began(): void {
  handedOver = true;
}

/**
 * Once the command has finished (its output written, its handling gone), a
 * SIGINT or SIGTERM before the process is out ends it with the command's exit
 * code and a word: node's default made a completed rollback exit 130 silently
 * (QA). Unref'd like every signal handle: it keeps nothing alive.
 */
export function exitOnLateSignal(exitCode: number): void {
  const handler = (signal: "SIGINT" | "SIGTERM") => () => {
    process.stderr.write(`drill: ${signal} after the command had finished (exit ${exitCode})\n`);
    process.exit(exitCode);
  };
  process.once("SIGINT", handler("SIGINT"));
  process.once("SIGTERM", handler("SIGTERM"));
}

/**
 * SIGINT/SIGTERM as an AbortSignal: long-running commands stop their loops,
 * clean up, then throw InterruptedError so main() exits 130 or 143.
 */
export function onInterrupt(): { signal: AbortSignal; received: () => "SIGINT" | "SIGTERM" | null; dispose: () => void } {
  const controller = new AbortController();
  let received: "SIGINT" | "SIGTERM" | null = null;
  const handler = (sig: "SIGINT" | "SIGTERM") => () => {
    received ??= sig;
    controller.abort(sig); // the reason names it, for whoever records how a run ended
  };
  const onInt = handler("SIGINT");
  const onTerm = handler("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  return {
    signal: controller.signal,
    received: () => received,
    dispose: () => {
      process.off("SIGINT", onInt);
      process.off("SIGTERM", onTerm);
    },
  };
}

/**
 * For work that must not stop half-way (rollback): the first SIGINT is only
 * acknowledged (`notice`) and the work goes on; a second SIGINT, or a SIGTERM
 * (a supervisor that wants the process gone), calls `stop`, which exits.
 */
export function finishDespiteInterrupt(notice: () => void, stop: (signal: "SIGINT" | "SIGTERM") => void): { dispose: () => void } {
  let interrupts = 0;
  const onInt = () => {
    interrupts++;
    if (interrupts === 1) notice();
    else stop("SIGINT");
  };
  const onTerm = () => stop("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  return {
    dispose: () => {
      process.off("SIGINT", onInt);
      process.off("SIGTERM", onTerm);
    },
  };
}
