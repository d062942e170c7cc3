import { performance } from "node:perf_hooks";
import { initialAlarmState, nextAlarms, type AlarmConfig, type AlarmEvent, type AlarmState } from "./alarms.js";
import { nextSample, type RawReadings, type Sample, type SamplerState } from "./step.js";

/** Everything the sidecar carries from one sample to the next. */
export interface SidecarState {
  sampler: SamplerState | null;
  alarms: AlarmState;
}

export const initialSidecarState: SidecarState = { sampler: null, alarms: initialAlarmState };

/**
 * Pure: readings → sample with its active alarms, plus the alarm transitions.
 * `nowMs` (wall) is the sample's `ts` and job ages; the alarms' holds and
 * clear delays run on the reading's monotonic clock, as rates do: an NTP step
 * must not clear an alarm or end an oom_kill hold.
 */
export function sidecarStep(
  prev: SidecarState,
  raw: RawReadings,
  nowMs: number,
  alarmConfig: AlarmConfig,
): { state: SidecarState; sample: Sample; events: AlarmEvent[] } {
  const { state: sampler, sample, facts } = nextSample(prev.sampler, raw, nowMs);
  const { state: alarms, events, active } = nextAlarms(prev.alarms, sample, facts, raw.monoMs, alarmConfig);
  return { state: { sampler, alarms }, sample: { ...sample, alarm: active }, events };
}

export interface SidecarLoopOptions {
  read: () => Promise<RawReadings>;
  intervalMs: number;
  alarmConfig: AlarmConfig;
  /** Stop after this many readings (undefined: until aborted or the duration ends). */
  maxReadings?: number;
  durationMs?: number;
  signal: AbortSignal;
  /** Called for every reading; `index` counts from 0. */
  onSample: (sample: Sample, events: AlarmEvent[], index: number) => void | Promise<void>;
  wallClock?: () => number;
}

/**
 * The tick after the one just served: the next on the schedule, or, when a
 * slow read let ticks go by, the first still ahead (missed ones are skipped,
 * not bunched up). Never the served tick again: a timer may fire up to a
 * millisecond before the tick by performance.now(), and a read that fast left
 * "the next tick after now" on the tick just served, so the sidecar read
 * twice 1-3 ms apart, the second a rate over one tick of /proc/stat (QA:
 * 116 samples for 100, cpu_idle_pct null, a 0 % stall rate mid-thrash).
 */
export function nextTickAfter(served: number, elapsedMs: number, intervalMs: number): number {
  return Math.max(served + 1, Math.floor(elapsedMs / intervalMs) + 1);
}

/**
 * The loop only sleeps, reads, steps. Ticks are on a fixed schedule from the
 * start (no drift from the time a sample takes); a tick missed because a read
 * was slow is skipped, not bunched up. Returns the number of readings taken.
 */
export async function runSidecar(options: SidecarLoopOptions): Promise<number> {
  const wallClock = options.wallClock ?? Date.now;
  const startMono = performance.now();
  // One abort listener for the whole run and a bare timer per tick:
  // timers/promises' sleep adds and removes an AbortSignal listener every
  // tick, a measurable share of a sample's CPU at one sample a second forever.
  let wake: (() => void) | null = null;
  let timer: NodeJS.Timeout | undefined;
  const onAbort = (): void => {
    clearTimeout(timer);
    wake?.();
  };
  options.signal.addEventListener("abort", onAbort, { once: true });
  let state = initialSidecarState;
  let index = 0;
  // The tick the last reading served (the first is tick 0, at the start).
  let tick = 0;
  try {
    for (;;) {
      if (options.signal.aborted) break;
      const raw = await options.read();
      const step = sidecarStep(state, raw, wallClock(), options.alarmConfig);
      state = step.state;
      await options.onSample(step.sample, step.events, index);
      index++;
      if (options.maxReadings !== undefined && index >= options.maxReadings) break;
      const elapsed = performance.now() - startMono;
      tick = nextTickAfter(tick, elapsed, options.intervalMs);
      const nextTick = tick * options.intervalMs;
      // A tick on the duration's end is still read: --duration 3s at 100ms is 30 samples after the seeding read, not 29 (QA).
      if (options.durationMs !== undefined && nextTick > options.durationMs) break;
      if (options.signal.aborted) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, nextTick - elapsed);
      });
      wake = null;
    }
  } finally {
    options.signal.removeEventListener("abort", onAbort);
  }
  return index;
}
