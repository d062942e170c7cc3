import { describe, expect, it } from "vitest";
import { fail, ok } from "../../src/host/kernelFile.js";
import type { Psi } from "../../src/host/psi.js";
import { defaultAdmissionConfig } from "../../src/gate/policy.js";
import { initialSignalState, nextSignals, type RawSample } from "../../src/gate/signals.js";

const config = { ...defaultAdmissionConfig, intervalMs: 1000 };
const psi = (avg10: number, total: number): Psi => ({ some: { avg10, avg60: 0, avg300: 0, total }, full: null });
const host = (atMs: number, avg10: number, total: number): RawSample => ({ atMs, hostPsi: ok(psi(avg10, total)), cgroup: null });

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

  it("a missing host PSI file is missing now, and the window starts over when it returns", () => {
    let state = nextSignals(initialSignalState(), host(0, 0, 0), config);
    state = nextSignals(state, host(1000, 0, 1000), config);
    state = nextSignals(state, { atMs: 2000, hostPsi: fail("/proc/pressure/memory", "missing"), cgroup: null }, config);
    expect(state.readings.psiSomeAvg10).toBeNull();
    expect(state.psiMissingReason).toContain("missing");
    expect(state.readings.stallRatePct).toBeNull();
    state = nextSignals(state, host(3000, 0.5, 9_000_000), config);
    expect(state.readings.psiSomeAvg10).toBe(0.5);
    expect(state.readings.stallRatePct).toBeNull(); // no rate across the gap
    expect(state.psiSampledAtMs).toBe(3000);
  });

  it("a gap of more than two intervals resets the rate instead of averaging it away", () => {
    let state = nextSignals(initialSignalState(), host(0, 0, 0), config);
    state = nextSignals(state, host(10_000, 0, 5_000_000), config);
    expect(state.readings.stallRatePct).toBeNull();
  });

  it("the worker cgroup is optional; when present its rate counts", () => {
    let state = initialSignalState();
    for (let s = 0; s <= 3; s++) {
      state = nextSignals(state, { atMs: s * 1000, hostPsi: ok(psi(0, 0)), cgroup: { pressure: psi(1, s * 400_000), swapLeak: false } }, config);
    }
    expect(state.readings.cgStallRatePct).toBeCloseTo(40, 5);
    expect(state.readings.stallRatePct).toBe(0);
    expect(state.pressure.tripped).toBe(true);
  });
});
