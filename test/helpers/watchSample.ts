import type { WatchSample } from "../../src/report/inputs.js";

/** A recorded sidecar sample as report reads it: calm defaults, `over` for what a test is about. */
export function watchSample(tsMs: number, over: Partial<WatchSample> = {}): WatchSample {
  return {
    tsMs,
    psi_mem_some_avg10: 1,
    psi_mem_some_rate: 5,
    cg_psi_mem_some_avg10: null,
    cg_psi_mem_some_rate: null,
    cg_mem_current: 1_000_000,
    cg_mem_peak: 1_500_000,
    cg_mem_max: 2 * 1024 ** 3,
    cg_oom_kill: 0,
    cg_absent: false,
    stall_ms_p99: 100,
    cpu_idle_pct: 90,
    queue_age_ms: 0,
    deadline_slack_ms: null,
    slack_partial: false,
    si: 0,
    alarm: [],
    ...over,
  };
}
