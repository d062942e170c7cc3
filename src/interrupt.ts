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
