import { writeErr } from "../closedStdout.js";
import { hostRoots, type GlobalOptions } from "../context.js";
import { stopExitCode, type StopSignal } from "../errors.js";
import { onInterrupt } from "../interrupt.js";
import { consoleOutput } from "../output.js";
import { validateKeyPart, validateQueueName } from "../queue/keys.js";
import { buildReport } from "../report/build.js";
import { gatherReport } from "../report/gather.js";
import { renderReport } from "../report/render.js";
import { DEFAULT_REPORT_SINCE, MAX_REPORT_SINCE_MS, parsePositiveDuration } from "../units.js";
import { resolveFormat, type RawReportOptions } from "./report.js";

export async function reportAction(g: GlobalOptions, raw: RawReportOptions): Promise<void> {
  // A look back, not a timer: as far back as the records go.
  const sinceMs = parsePositiveDuration(raw.since ?? DEFAULT_REPORT_SINCE, "--since", MAX_REPORT_SINCE_MS);
  const format = resolveFormat(raw.format, g.json);
  const queue = raw.queue === undefined ? undefined : validateQueueName(raw.queue);
  const runId = raw.run === undefined ? undefined : validateKeyPart(raw.run, "--run");
  // A report reads; stopped, it says so, and stops what it started: the redis-server it may restart on a stopped drill's AOF.
  let revived: "starting" | (() => Promise<void>) | null = null;
  let stoppedBy: StopSignal | null = null;
  const finish = async (signal: StopSignal, stop: (() => Promise<void>) | null): Promise<never> => {
    let said = "";
    if (stop) {
      try {
        await stop();
        said = ": the redis-server it restarted on the drill's AOF is stopped";
      } catch (err) {
        said = `: stopping the redis-server it restarted on the drill's AOF failed (${err instanceof Error ? err.message : String(err)})`;
      }
    }
    writeErr(`drill: report interrupted by ${signal}${said}\n`);
    process.exit(stopExitCode(signal));
  };
  const interrupt = onInterrupt();
  interrupt.signal.addEventListener(
    "abort",
    () => {
      stoppedBy = interrupt.received() ?? "SIGTERM";
      // Still starting: stopped as soon as it is up (or has failed), below.
      if (revived !== "starting") void finish(stoppedBy, revived);
    },
    { once: true },
  );
  const onRevived = (now: "starting" | (() => Promise<void>) | null): void => {
    revived = now;
    if (stoppedBy !== null && now !== "starting") void finish(stoppedBy, now);
  };
  let gathered;
  try {
    gathered = await gatherReport({ stateDir: g.stateDir, name: raw.name, queue, redisUrl: g.redisUrl, redisTyped: g.redisTyped, sinceMs, roots: hostRoots(g), recordingFile: raw.recording, runId, onRevived });
  } finally {
    interrupt.dispose();
  }
  const { inputs, nowMs } = gathered;
  const report = buildReport(inputs, nowMs, sinceMs, { sinceGiven: raw.sinceGiven });
  const output = consoleOutput(g.color && format === "text");
  const rendered = renderReport(report, format, output.color);
  if (format === "json") output.document(rendered);
  else output.out(rendered);
}
