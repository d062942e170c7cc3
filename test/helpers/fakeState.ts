import { writeState, type DrillState } from "../../src/drill/state.js";

/**
 * The state `drill up` would have written for a drill on a given Redis, with
 * nothing of it running (its up a pid that is not alive: start time 1): what a
 * rollback or report test needs without starting a drill. `over` sets the rest.
 */
export function writeFakeDrill(stateDir: string, name: string, queue: string, redisUrl: string, over: Partial<DrillState> = {}): DrillState {
  const state: DrillState = {
    version: 1, name, runId: `${name}-r1`, drillFile: "d.yaml", createdAt: new Date(Date.now() - 60_000).toISOString(), phase: "stopped", queue,
    redis: { url: redisUrl, embedded: null }, cgroup: null, processes: [], fileDir: null, owner: { pid: 999_999_999, startTime: 1 },
    ...over,
  };
  writeState(stateDir, state);
  return state;
}
