import type { ReportInputs } from "../../src/report/inputs.js";

/**
 * Report inputs with nothing in them (no drill, no events, no jobs, no
 * recording, an empty queue on a live Redis): a test gives what it is about.
 */
export function reportInputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return {
    queue: "jobs",
    source: { kind: "live", url: "redis://127.0.0.1:6390" },
    drill: null,
    events: [],
    done: [],
    stats: {},
    queueLen: 0,
    queueHead: null,
    drainLen: 0,
    recording: null,
    recordingLooked: null,
    gatherNotes: [],
    ...over,
  };
}
