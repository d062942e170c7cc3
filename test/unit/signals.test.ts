import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fail, HostRoots, ok } from "../../src/host/kernelFile.js";
import type { Psi } from "../../src/host/psi.js";
import { decideAdmission, defaultAdmissionConfig, formatDecisionLine } from "../../src/gate/policy.js";
import { GateSampler, initialSignalState, nextSignals, type RawSample } from "../../src/gate/signals.js";

const config = { ...defaultAdmissionConfig, intervalMs: 1000 };
const psi = (avg10: number, total: number): Psi => ({ some: { avg10, avg60: 0, avg300: 0, total }, full: null });
const host = (monoMs: number, avg10: number, total: number): RawSample => ({ monoMs, hostPsi: ok(psi(avg10, total)), cgroup: null });

describe("nextSignals", () => {
  it("computes the fast stall rate from total deltas over the 3 s window", () => {
    let state = initialSignalState();
    // 150 ms stalled per second = 15 %, while avg10 still reads 2.00
    for (let s = 0; s <= 5; s++) state = nextSignals(state, host(s * 1000, 2, s * 150_000), config);
    expect(state.readings.stallRatePct).toBeCloseTo(15, 5);
    expect(state.readings.psiSomeAvg10).toBe(2);
    expect(state.pressure.tripped).toBe(true);
    expect(state.stallMsP99).toBeCloseTo(150, 5);
  });

  // QA: with an --interval over about 6 s every earlier sample was past the window's edge, so the
  // gate never had a stall rate, not even after the second sample it waits for at start, and
  // decided on avg10 alone (which lags). A sample interval longer than the window takes the rate
  // over that one interval.
  it("an interval longer than the 3 s window: the rate is taken over the last interval, not null", () => {
    const slow = { ...config, intervalMs: 10_000 };
    let state = initialSignalState();
    for (let s = 0; s <= 2; s++) state = nextSignals(state, host(s * 10_000, 2, s * 3_000_000), slow);
    expect(state.readings.stallRatePct).toBeCloseTo(30, 5);
    expect(state.pressure.tripped).toBe(true);
    expect(state.hostWindow).toHaveLength(2);
  });

  it("a missing host PSI file is missing now, and the window starts over when it returns", () => {
    let state = nextSignals(initialSignalState(), host(0, 0, 0), config);
    state = nextSignals(state, host(1000, 0, 1000), config);
    state = nextSignals(state, { monoMs: 2000, hostPsi: fail("/proc/pressure/memory", "missing"), cgroup: null }, config);
    expect(state.readings.psiSomeAvg10).toBeNull();
    expect(state.psiMissingReason).toContain("missing");
    expect(state.readings.stallRatePct).toBeNull();
    state = nextSignals(state, host(3000, 0.5, 9_000_000), config);
    expect(state.readings.psiSomeAvg10).toBe(0.5);
    expect(state.readings.stallRatePct).toBeNull(); // no rate across the gap
    expect(state.psiReadMonoMs).toBe(3000);
  });

  it("a gap of more than two intervals resets the rate instead of averaging it away", () => {
    let state = nextSignals(initialSignalState(), host(0, 0, 0), config);
    state = nextSignals(state, host(10_000, 0, 5_000_000), config);
    expect(state.readings.stallRatePct).toBeNull();
  });

  it("the worker cgroup is optional; when present its rate counts", () => {
    let state = initialSignalState();
    for (let s = 0; s <= 3; s++) {
      state = nextSignals(state, { monoMs: s * 1000, hostPsi: ok(psi(0, 0)), cgroup: { pressure: psi(1, s * 400_000), swapLeak: false } }, config);
    }
    expect(state.readings.cgStallRatePct).toBeCloseTo(40, 5);
    expect(state.readings.stallRatePct).toBe(0);
    expect(state.pressure.tripped).toBe(true);
  });
});

describe("GateSampler: a wall-clock step", () => {
  let dir: string | null = null;
  afterEach(() => {
    vi.useRealTimers();
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = null;
  });
  const WALL = 1_764_480_000_000;
  /** A fake /proc whose pressure/memory says `total`; fake Date and performance.now, moved apart by setSystemTime. */
  function fakeHost(): { roots: HostRoots; psiTotal: (total: number) => void } {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-gsig-"));
    const procfs = path.join(dir, "proc");
    mkdirSync(path.join(procfs, "pressure"), { recursive: true });
    const psiTotal = (total: number) =>
      writeFileSync(path.join(procfs, "pressure", "memory"), `some avg10=0.00 avg60=0.00 avg300=0.00 total=${total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n`);
    psiTotal(0);
    vi.useFakeTimers({ toFake: ["Date", "performance"] });
    vi.setSystemTime(WALL);
    return { roots: new HostRoots(procfs, path.join(dir, "sys")), psiTotal };
  }

  it("stepped back an hour, PSI read 5 s ago is still stale (the age is monotonic)", () => {
    const { roots } = fakeHost();
    const sampler = new GateSampler(roots, config);
    sampler.sample();
    vi.setSystemTime(WALL - 3_600_000);
    vi.advanceTimersByTime(5000); // no sample since: the gate's loop was stuck
    const job = { id: "7", prompt_tokens: 1000, enqueue_ts: Date.now() - 100, deadline_ms: 8000 };
    const decision = decideAdmission(job, sampler.signals("admit", 0), config, Date.now());
    expect(formatDecisionLine(decision, job)).toBe("reject_host_pressure job=7 psi=missing stale_ms=5000");
  });

  it("stepped back an hour, the stall rate is still taken over the second that passed", () => {
    const { roots, psiTotal } = fakeHost();
    const sampler = new GateSampler(roots, config);
    sampler.sample();
    vi.advanceTimersByTime(1000);
    vi.setSystemTime(WALL - 3_600_000);
    psiTotal(150_000);
    const state = sampler.sample();
    expect(state.readings.stallRatePct).toBeCloseTo(15, 5);
    expect(state.stallMsP99).toBeCloseTo(150, 5);
  });
});
