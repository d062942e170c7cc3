// `drill up | head` (or `drill up --json 2>&1 | head`): the reader went away,
// the drill must not (its children would run on with nobody packing or
// following them). Commands that opt in keep running and drop what they
// print, on stdout and stderr alike; every other command ends quietly.
let survivesClosedOutput = false;
const closed = new Set<NodeJS.WriteStream>();

export function surviveClosedStdout(): void {
  survivesClosedOutput = true;
}

/** A write error on stdout or stderr: true when it is a closed pipe a command survives (main exits otherwise). */
export function closedStdoutSurvived(stream: NodeJS.WriteStream, err: NodeJS.ErrnoException): boolean {
  if (!survivesClosedOutput || (err.code !== "EPIPE" && err.code !== "ERR_STREAM_DESTROYED")) return false;
  closed.add(stream);
  return true;
}

/** process.stdout.write unless the reader is gone. */
export const writeOut = (text: string): void => {
  if (!closed.has(process.stdout)) process.stdout.write(text);
};

/** process.stderr.write unless the reader is gone. */
export const writeErr = (text: string): void => {
  if (!closed.has(process.stderr)) process.stderr.write(text);
};
