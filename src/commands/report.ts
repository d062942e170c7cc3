import { Command } from "commander";
import { UsageError } from "../errors.js";
import { DEFAULT_REPORT_SINCE } from "../units.js";
import type { ReportFormat } from "../report/render.js";
import type { CommandFactory } from "./index.js";
import { began } from "../interrupt.js";

export interface RawReportOptions {
  /** Not given: the last DEFAULT_REPORT_SINCE of the drill's current run. */
  since?: string;
  /** --since on the command line: the window is what it says, not clipped to the drill's current run. */
  sinceGiven?: boolean;
  format?: string;
  name?: string;
  queue?: string;
  recording?: string;
  run?: string;
}

const FORMATS: readonly ReportFormat[] = ["text", "md", "json"];

/** --format, with the global --json meaning json (and refusing a contradiction). */
export function resolveFormat(format: string | undefined, json: boolean): ReportFormat {
  if (format === undefined) return json ? "json" : "text";
  if (!(FORMATS as readonly string[]).includes(format)) throw new UsageError(`--format: "${format}" is not one of ${FORMATS.join(", ")}`);
  if (json && format !== "json") throw new UsageError(`--format ${format} contradicts --json`);
  return format as ReportFormat;
}

export const reportCommand: CommandFactory = (globals) =>
  new Command("report")
    .description("the incident-note summary of decisions and pressure (works after rollback from its export)")
    // No commander default: its "(default: 10m)" would read as --since 10m, a window that ends now.
    .option("--since <duration>", `only events, finished jobs and samples of the last <duration>, up to now or to the drill's export (default: the last ${DEFAULT_REPORT_SINCE} of the drill's current run, up to its end)`)
    .option("--format <format>", "text | md (paste into an incident doc) | json (one document); default text, json with --json")
    .option("--name <drill>", "the drill under the state dir (default: the only one there)")
    .option("--queue <name>", "Redis queue (default: the drill's, else jobs)")
    .option("--run <id>", "an earlier run of the drill (its run id, as up and report name it), read from its own export and logs (default: the drill's current run)")
    .option("--recording <file>", "a file written by watch --record, for the pressure rows and cost_proxy, instead of the drill's own watch.jsonl/watch.out (the step-by-step path has none)")
    .action(async (raw: RawReportOptions, command: Command) => {
      const { reportAction } = await import("./report.run.js");
      began();
      await reportAction(globals(), { ...raw, sinceGiven: command.getOptionValueSource("since") === "cli" });
    });
