import { formatDuration } from "../units.js";

/**
 * What a gate's or worker's own list may hold when it stops, as far as it
 * knows: "maybe" after an error, a decision or job cut short, or jobs stopped
 * in it; "if_taken_at_stop" when only the take the stop cut short could have
 * moved one; "nothing" otherwise.
 */
export type Holding = "maybe" | "if_taken_at_stop" | "nothing";

export interface UnansweredGiveBack {
  /** `gate`, `worker w1`: the line's head. */
  tag: string;
  list: string;
  heartbeat: string;
  ttlMs: number;
  /** Who recovers the list, and when: `another gate recovers it once the heartbeat expires`. */
  recovery: string;
}

/** The line for a give-back Redis did not answer, said by what the list may hold: no job lost is claimed where none was held. */
export function unansweredGiveBackLine(stop: UnansweredGiveBack, holding: Holding, why: string): string {
  if (holding === "maybe") return `${stop.tag}: could not give back ${stop.list} (${why}); ${stop.recovery}`;
  if (holding === "if_taken_at_stop") return `${stop.tag}: could not give back ${stop.list} (${why}); it holds a job only if the take the stop cut short moved one: ${stop.recovery}`;
  return `${stop.tag}: could not deregister (${why}); it held no job, and its heartbeat ${stop.heartbeat} expires by itself within ${formatDuration(stop.ttlMs)}`;
}
