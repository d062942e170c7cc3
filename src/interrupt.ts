import { readFileSync, readlinkSync } from "node:fs";
import { writeErr } from "./closedStdout.js";
import { STOP_SIGNALS, stopExitCode, type StopSignal } from "./errors.js";

let installed = false;
/** Started by nohup (startedByNohup): SIGHUP is ignored, as nohup asked, and is not a stop signal. */
let hangupIgnored = false;
/** The stop signals this process answers: SIGHUP only when nohup did not ask to ignore it. */
const stopSignals = (): readonly StopSignal[] => (hangupIgnored ? STOP_SIGNALS.filter((s) => s !== "SIGHUP") : STOP_SIGNALS);
let handedOver = false;
/** A command's own stop handling ran and was taken off (onStopSignals' dispose): it is finishing. */
let stopHandlingEnded = false;
/** A stop signal that came after that, before main() had the exit code: said with it (exitOnLateSignal). */
let lateSignal: StopSignal | null = null;
/** How long a late signal waits for the command to return before it ends the process itself. */
const LATE_SIGNAL_GRACE_MS = 5000;

/**
 * From main() until the command's implementation has loaded (commands load
 * lazily: up to a second on a slow VM), SIGINT, SIGTERM and SIGHUP say that
 * nothing was done and exit 130/143/129, where node's default ended drill without a word
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
  if (startedByNohup(readStdioFacts())) {
    hangupIgnored = true;
    process.on("SIGHUP", () => {}); // node's default would end drill: ignored, as nohup had it
  }
  const handler = (signal: StopSignal) => () => {
    if (handedOver) {
      if (process.listenerCount(signal) > 1) return; // the command's own handling has it
      // Its handling ran and is done: the command is returning its exit code (QA: a gate's or
      // worker's second SIGHUP or SIGTERM then killed it by node's default, no code, no word).
      if (stopHandlingEnded) {
        if (lateSignal === null) {
          lateSignal = signal;
          // A backstop, unref'd: a command that does not return soon still ends, as the signal asks.
          setTimeout(() => {
            writeErr(`drill: ${signal} while the command was finishing\n`);
            process.exit(stopExitCode(signal));
          }, LATE_SIGNAL_GRACE_MS).unref();
        }
        return;
      }
      process.removeAllListeners(signal);
      process.kill(process.pid, signal); // node's default, as if drill had never listened
      return;
    }
    writeErr(`drill: interrupted by ${signal} while starting: nothing was done\n`);
    process.exit(stopExitCode(signal));
  };
  for (const signal of stopSignals()) process.on(signal, handler(signal));
}

/** What a standard stream is: the file it points at and its open flags' access mode (0 read, 1 write, 2 both). */
export interface StdioFacts {
  target: string;
  accessMode: number;
}

/**
 * nohup sets SIGHUP to be ignored for the command it runs, but node resets
 * every ignored signal to its default at start-up, so drill cannot see that:
 * it stopped (129) when the terminal closed, the one thing nohup is run for
 * (QA AB 1: `nohup drill up &` interrupted at logout). What nohup does to a
 * terminal stays visible: stdin becomes /dev/null opened write-only (GNU
 * nohup's "unreadable file"), stdout `nohup.out`. With both redirected by
 * hand nohup leaves no trace (README: use `up --detach` or setsid).
 */
export function startedByNohup(stdio: { stdin: StdioFacts | null; stdout: StdioFacts | null }): boolean {
  const stdinUnreadable = stdio.stdin !== null && stdio.stdin.target === "/dev/null" && stdio.stdin.accessMode === 1;
  const stdoutToNohupOut = stdio.stdout !== null && (stdio.stdout.target === "nohup.out" || stdio.stdout.target.endsWith("/nohup.out"));
  return stdinUnreadable || stdoutToNohupOut;
}

function readStdioFacts(): { stdin: StdioFacts | null; stdout: StdioFacts | null } {
  const facts = (fd: number): StdioFacts | null => {
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1];
      return flags === undefined ? null : { target: readlinkSync(`/proc/self/fd/${fd}`), accessMode: Number.parseInt(flags, 8) & 3 };
    } catch {
      return null; // closed, or no /proc: nothing to tell nohup by
    }
  };
  return { stdin: facts(0), stdout: facts(1) };
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
 * stop signal before the process is out ends it with the command's exit
 * code and a word: node's default made a completed rollback exit 130 silently
 * (QA). Unref'd like every signal handle: it keeps nothing alive.
 */
export function exitOnLateSignal(exitCode: number): void {
  const handler = (signal: StopSignal) => () => {
    writeErr(`drill: ${signal} after the command had finished (exit ${exitCode})\n`);
    process.exit(exitCode);
  };
  if (lateSignal !== null) handler(lateSignal)();
  for (const signal of stopSignals()) process.once(signal, handler(signal));
}

/**
 * Each stop signal to its handler, until the returned function takes them
 * off. SIGHUP is one: a closed terminal (an SSH session dropped) killed a gate
 * with the job it held, an up without its verdict, a rollback half-way (QA).
 */
export function onStopSignals(handler: (signal: StopSignal) => void): () => void {
  const listeners = stopSignals().map((signal) => [signal, () => handler(signal)] as const);
  for (const [signal, listener] of listeners) process.on(signal, listener);
  return () => {
    for (const [signal, listener] of listeners) process.off(signal, listener);
    stopHandlingEnded = true;
  };
}

/**
 * The stop signals as an AbortSignal: long-running commands stop their loops,
 * clean up, then throw InterruptedError so main() exits 130, 143 or 129.
 */
export function onInterrupt(): { signal: AbortSignal; received: () => StopSignal | null; dispose: () => void } {
  const controller = new AbortController();
  let received: StopSignal | null = null;
  const dispose = onStopSignals((sig) => {
    received ??= sig;
    controller.abort(sig); // the reason names it, for whoever records how a run ended
  });
  return { signal: controller.signal, received: () => received, dispose };
}

/**
 * For work that must not stop half-way (rollback, teardown): the first SIGINT
 * is only acknowledged and the work goes on; a second SIGINT, or a SIGTERM (a
 * supervisor that wants the process gone), calls `stop`, which exits. A
 * SIGHUP never stops it: the terminal closed (the operator walked away, or an
 * SSH session dropped), and no one is left to finish what it would leave.
 * `work` names it ("the rollback"), `halfDone` what a stop now leaves ("half done").
 */
export function finishDespiteInterrupt(work: string, halfDone: string, stop: (signal: "SIGINT" | "SIGTERM") => void): { dispose: () => void } {
  let interrupts = 0;
  let hungUp = false;
  const dispose = onStopSignals((signal) => {
    if (signal === "SIGTERM") return stop("SIGTERM");
    if (signal === "SIGHUP") {
      if (!hungUp) writeErr(`drill: SIGHUP (the terminal closed): finishing ${work} (stopping now would leave it ${halfDone}); what it prints from here may reach no one\n`);
      hungUp = true;
      return;
    }
    interrupts++;
    if (interrupts === 1) writeErr(`drill: SIGINT: finishing ${work} (stopping now would leave it ${halfDone}); Ctrl-C again to stop anyway\n`);
    else stop("SIGINT");
  });
  return { dispose };
}
