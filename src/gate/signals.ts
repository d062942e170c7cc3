import type { HostRoots, Reading } from "../host/kernelFile.js";
import { readHostPsi, readPsiFile, stallRatePct, type Psi } from "../host/psi.js";
import { emptyStallWindow, nextStallWindow, stallMsP99, stallReading, type StallWindow } from "../host/stallWindow.js";
import {
  initialPressureState,
  nextPressureState,
  type AdmissionConfig,
  type AdmissionSignals,
  type GateMode,
  type PressureReadings,
  type PressureState,
} from "./policy.js";

/**
 * The gate's own sampler. Pure step `nextSignals(prev, raw, config)`; the I/O
 * (`readRawSample`) is a thin shell. The gate samples on its own interval so
 * a stall rate never spans an idle gap (a rate over a gap averages a burst away).
 */

/** avg10 lags (the kernel updates it every 2 s); the `total` delta over 3 s does not. */
export const FAST_WINDOW_MS = 3000;

export interface WorkerCgroupReading {
  /** The worker cgroup's memory.pressure (null: unreadable right now). */
  pressure: Psi | null;
  /** Swap used while the cgroup's swap is disabled (false when unknown). */
  swapLeak: boolean;
}

/**
 * Reads the worker cgroup; null when there is no worker cgroup, which is not
 * a reason to fail closed. The cgroup module supplies the real one.
 */
export type WorkerCgroupProbe = () => WorkerCgroupReading | null;

export interface RawSample {
  /** Monotonic clock (performance.now()): a wall-clock step must not null a rate or freeze PSI's age. */
  monoMs: number;
  hostPsi: Reading<Psi>;
  cgroup: WorkerCgroupReading | null;
}

interface TotalSample {
  monoMs: number;
  totalUs: number;
}

export type CgroupSignals = "read" | "unreadable" | "absent";

export interface SignalState {
  readings: PressureReadings;
  psiSomeAvg60: number | null;
  /** When host memory PSI last read (monotonic; null: never). */
  psiReadMonoMs: number | null;
  psiMissingReason: string | null;
  hostWindow: TotalSample[];
  cgWindow: TotalSample[];
  /** stall_ms_p99's window: the sidecar's step, so watch shows what the gate decides on. */
  stall: StallWindow;
  stallMsP99: number | null;
  pressure: PressureState;
  lastMonoMs: number | null;
  /** The worker cgroup's PSI at the last sample: read, there but unreadable, or no cgroup (or no file) at all. */
  cgroupSignals: CgroupSignals;
}

export function initialSignalState(): SignalState {
  return {
    readings: { psiSomeAvg10: null, stallRatePct: null, cgPsiSomeAvg10: null, cgStallRatePct: null, cgSwapLeak: false },
    psiSomeAvg60: null,
    psiReadMonoMs: null,
    psiMissingReason: "not sampled yet",
    hostWindow: [],
    cgWindow: [],
    stall: emptyStallWindow,
    stallMsP99: null,
    pressure: initialPressureState,
    lastMonoMs: null,
    cgroupSignals: "absent",
  };
}

export function nextSignals(prev: SignalState, raw: RawSample, config: AdmissionConfig): SignalState {
  // A gap of more than two intervals (gate paused, event loop stalled) resets
  // the fast windows: the next rate starts fresh instead of averaging over the gap.
  const gap = prev.lastMonoMs !== null && raw.monoMs - prev.lastMonoMs > 2 * config.intervalMs;

  const host = raw.hostPsi.ok ? raw.hostPsi.value : null;
  const hostWindow = host ? advanceWindow(gap ? [] : prev.hostWindow, raw.monoMs, host.some.total, config.intervalMs) : [];
  const cgPsi = raw.cgroup?.pressure ?? null;
  const cgWindow = cgPsi ? advanceWindow(gap ? [] : prev.cgWindow, raw.monoMs, cgPsi.some.total, config.intervalMs) : [];

  // stall_ms_p99 follows the worker cgroup when it exists, else the host. No
  // reset on a gap: its points stay valid for 60 s, and the point across the
  // gap is that time's mean stall, as the sidecar takes it.
  const stall = nextStallWindow(prev.stall, stallReading(cgPsi ? cgPsi.some.total : null, host ? host.some.total : null, raw.monoMs));

  const readings: PressureReadings = {
    psiSomeAvg10: host ? host.some.avg10 : null,
    stallRatePct: windowRate(hostWindow),
    cgPsiSomeAvg10: cgPsi ? cgPsi.some.avg10 : null,
    cgStallRatePct: windowRate(cgWindow),
    cgSwapLeak: raw.cgroup?.swapLeak ?? false,
  };
  return {
    readings,
    psiSomeAvg60: host ? host.some.avg60 : null,
    psiReadMonoMs: host ? raw.monoMs : prev.psiReadMonoMs,
    psiMissingReason: raw.hostPsi.ok ? null : `${raw.hostPsi.file}: ${raw.hostPsi.reason}`,
    hostWindow,
    cgWindow,
    stall,
    stallMsP99: stallMsP99(stall),
    pressure: nextPressureState(prev.pressure, readings, config, raw.monoMs),
    lastMonoMs: raw.monoMs,
    cgroupSignals: raw.cgroup === null ? "absent" : raw.cgroup.pressure === null ? "unreadable" : "read",
  };
}

function advanceWindow(window: TotalSample[], monoMs: number, totalUs: number, intervalMs: number): TotalSample[] {
  const last = window[window.length - 1];
  // A counter that went backwards is a recreated cgroup: start over.
  const kept = last !== undefined && totalUs < last.totalUs ? [] : window;
  // Keep one sample at the window's far edge (+ half an interval of jitter).
  const horizon = FAST_WINDOW_MS + intervalMs / 2;
  const inWindow = kept.filter((s) => monoMs - s.monoMs <= horizon);
  // An interval longer than the window: the rate over the last interval (QA: with --interval
  // over about 6 s no earlier sample was kept, and the gate never had a rate).
  const previous = kept[kept.length - 1];
  return [...(inWindow.length === 0 && previous !== undefined ? [previous] : inWindow), { monoMs, totalUs }];
}

function windowRate(window: TotalSample[]): number | null {
  const first = window[0];
  const last = window[window.length - 1];
  if (first === undefined || last === undefined || first === last) return null;
  return stallRatePct(first.totalUs, last.totalUs, last.monoMs - first.monoMs);
}

/**
 * The policy's view: signals plus what only Redis knows (mode, in-flight
 * tokens). PSI's age is taken here, on the sampler's monotonic clock.
 */
export function admissionSignals(state: SignalState, mode: GateMode, inflightTokens: number | null, monoNowMs: number): AdmissionSignals {
  return {
    ...state.readings,
    mode,
    psiAgeMs: state.psiReadMonoMs === null ? null : monoNowMs - state.psiReadMonoMs,
    psiMissingReason: state.psiMissingReason,
    stallMsP99: state.stallMsP99,
    inflightTokens,
    pressure: state.pressure,
  };
}

/** A probe that reads only a memory.pressure file; a missing file means no worker cgroup. */
export function pressureFileProbe(file: string): WorkerCgroupProbe {
  return () => {
    const reading = readPsiFile(file);
    if (reading.ok) return { pressure: reading.value, swapLeak: false };
    return reading.reason === "missing" ? null : { pressure: null, swapLeak: false };
  };
}

export function readRawSample(roots: HostRoots, probe: WorkerCgroupProbe | null, monoMs: number): RawSample {
  let cgroup: WorkerCgroupReading | null = null;
  try {
    cgroup = probe ? probe() : null;
  } catch {
    cgroup = null; // the worker cgroup is optional: a failing probe must not stop admission
  }
  return { monoMs, hostPsi: readHostPsi(roots, "memory"), cgroup };
}

/**
 * Holds the latest state; the gate loop calls sample() on its own interval.
 * Sample times are monotonic; the wall clock is only for a job's slack.
 */
export class GateSampler {
  private current: SignalState = initialSignalState();
  constructor(
    private readonly roots: HostRoots,
    private readonly config: AdmissionConfig,
    private readonly probe: WorkerCgroupProbe | null = null,
    private readonly monoNow: () => number = () => performance.now(),
  ) {}
  sample(): SignalState {
    this.current = nextSignals(this.current, readRawSample(this.roots, this.probe, this.monoNow()), this.config);
    return this.current;
  }
  get state(): SignalState {
    return this.current;
  }
  /**
   * Host PSI read, but no stall rate: its fast window started over (PSI back
   * after missing, or a gap of more than two intervals) and holds one sample.
   * avg10 alone lags (DESIGN): the gate waits for the next sample first.
   */
  get awaitingRate(): boolean {
    return this.current.readings.psiSomeAvg10 !== null && this.current.readings.stallRatePct === null;
  }
  /** How long ago host PSI was last read (null: never). */
  psiAgeMs(): number | null {
    return this.current.psiReadMonoMs === null ? null : this.monoNow() - this.current.psiReadMonoMs;
  }
  /** The signals a decision made now sees. */
  signals(mode: GateMode, inflightTokens: number | null): AdmissionSignals {
    return admissionSignals(this.current, mode, inflightTokens, this.monoNow());
  }
}
