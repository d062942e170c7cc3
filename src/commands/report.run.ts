import { hostRoots, type GlobalOptions } from "../context.js";
import { consoleOutput } from "../output.js";
import { validateKeyPart } from "../queue/keys.js";
import { buildReport } from "../report/build.js";
import { gatherReport } from "../report/gather.js";
import { renderReport } from "../report/render.js";
import { MAX_REPORT_SINCE_MS, parsePositiveDuration } from "../units.js";
import { resolveFormat, type RawReportOptions } from "./report.js";

export async function reportAction(g: GlobalOptions, raw: RawReportOptions): Promise<void> {
  // A look back, not a timer: as far back as the records go.
  const sinceMs = parsePositiveDuration(raw.since, "--since", MAX_REPORT_SINCE_MS);
  const format = resolveFormat(raw.format, g.json);
  const queue = raw.queue === undefined ? undefined : validateKeyPart(raw.queue, "--queue");
  const runId = raw.run === undefined ? undefined : validateKeyPart(raw.run, "--run");
  const { inputs, nowMs } = await gatherReport({ stateDir: g.stateDir, name: raw.name, queue, redisUrl: g.redisUrl, sinceMs, roots: hostRoots(g), recordingFile: raw.recording, runId });
  const report = buildReport(inputs, nowMs, sinceMs, { sinceGiven: raw.sinceGiven });
  const output = consoleOutput(g.color && format === "text");
  output.out(renderReport(report, format, output.color));
}
