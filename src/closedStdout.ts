// `drill up | head`: the reader went away, the drill must not (its children
// would run on with nobody packing or following them). Commands that opt in
// keep running and drop what they print; every other command ends quietly.
let survivesClosedStdout = false;
let stdoutClosed = false;

export function surviveClosedStdout(): void {
  survivesClosedStdout = true;
}

/** A write error on stdout or stderr: true when it is the closed stdout a command survives (main exits otherwise). */
export function closedStdoutSurvived(stream: NodeJS.WriteStream, err: NodeJS.ErrnoException): boolean {
  if (stream !== process.stdout || !survivesClosedStdout || (err.code !== "EPIPE" && err.code !== "ERR_STREAM_DESTROYED")) return false;
  stdoutClosed = true;
  return true;
}

/** process.stdout.write unless the reader is gone. */
export const writeOut = (text: string): void => {
  if (!stdoutClosed) process.stdout.write(text);
};
