// Exit codes of DESIGN.md. Commands throw; only main() turns them into a code.
export const ExitCode = {
  ok: 0,
  failed: 1,
  usage: 2,
  refused: 3,
  rollbackIncomplete: 4,
  /** SIGHUP: the terminal closed (an SSH session dropped); 128 + 1, as a shell reports it. */
  hungUp: 129,
  interrupted: 130,
  terminated: 143,
} as const;
export type ExitCodeValue = (typeof ExitCode)[keyof typeof ExitCode];

export class DrillError extends Error {
  readonly exitCode: ExitCodeValue;
  constructor(message: string, exitCode: ExitCodeValue = ExitCode.failed, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DrillError";
    this.exitCode = exitCode;
  }
}

/** Bad flag, bad drill file, bad name: exit 2, nothing touched. */
export class UsageError extends DrillError {
  constructor(message: string) {
    super(message, ExitCode.usage);
    this.name = "UsageError";
  }
}

/** The host cannot run the drill safely, or re-admit under pressure: exit 3. */
export class RefusedError extends DrillError {
  constructor(message: string) {
    super(message, ExitCode.refused);
    this.name = "RefusedError";
  }
}

/** Something is left behind: exit 4, the message says what and where. */
export class RollbackIncompleteError extends DrillError {
  constructor(message: string) {
    super(message, ExitCode.rollbackIncomplete);
    this.name = "RollbackIncompleteError";
  }
}

/** The signals that stop a drill command: Ctrl-C, a supervisor's SIGTERM, the terminal closing. */
export const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

/** 128 + the signal's number: 130, 143, 129. */
export function stopExitCode(signal: StopSignal): ExitCodeValue {
  return signal === "SIGINT" ? ExitCode.interrupted : signal === "SIGHUP" ? ExitCode.hungUp : ExitCode.terminated;
}

export class InterruptedError extends DrillError {
  constructor(signal: StopSignal) {
    super(`interrupted by ${signal}`, stopExitCode(signal));
    this.name = "InterruptedError";
  }
}

/**
 * What a refusal's errno means, in the words of strerror(3), for an operator
 * who does not know the codes by heart; null for any other code.
 */
export function refusalMeaning(code: string | undefined): string | null {
  if (code === "EACCES") return "permission denied";
  if (code === "EPERM") return "operation not permitted";
  if (code === "EROFS") return "read-only file system";
  return null;
}

/** Turns EACCES/EPERM/EROFS on a kernel file into one line that names the file. */
export function kernelWriteError(file: string, err: unknown, what = "write"): DrillError {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const meaning = refusalMeaning(code);
  if (meaning !== null) {
    return new DrillError(
      `cannot ${what} ${file}: ${code} (${meaning}: run as root, or on a host whose cgroup tree is writable)`,
      ExitCode.failed,
      { cause: err },
    );
  }
  const detail = err instanceof Error ? err.message : String(err);
  return new DrillError(`cannot ${what} ${file}: ${detail}`, ExitCode.failed, { cause: err });
}
