import { describe, expect, it } from "vitest";
import { defaultAdmissionConfig } from "../../src/gate/policy.js";
import { initialSignalState, nextSignals, type SignalState } from "../../src/gate/signals.js";
import { fail, ok } from "../../src/host/kernelFile.js";
import { parseProcStatCpu } from "../../src/host/cpu.js";
import type { Psi } from "../../src/host/psi.js";
import { emptyStallWindow, nextStallWindow, stallMsP99, type StallReading, type StallWindow } from "../../src/host/stallWindow.js";
import { parseVmstat } from "../../src/host/vmstat.js";
import { nextSample, type CgroupRaw, type RawReadings, type SamplerState } from "../../src/sampler/step.js";

const config = { ...defaultAdmissionConfig, intervalMs: 1000 };
const psi = (total: number): Psi => ({ some: { avg10: 0, avg60: 0, avg300: 0, total }, full: null });

/** One second of readings: host PSI `some total`, and the worker cgroup's (null: no worker cgroup). */
interface Second {
  hostUs: number;
  cgUs: number | null;
}

function walk(seconds: Second[]): { gate: (number | null)[]; watch: (number | null)[]; gateState: SignalState } {
  let gateState = initialSignalState();
  let watchState: SamplerState | null = null;
  const gate: (number | null)[] = [];
  const watch: (number | null)[] = [];
  seconds.forEach(({ hostUs, cgUs }, i) => {
    const monoMs = i * 1000;
    gateState = nextSignals(gateState, { monoMs, hostPsi: ok(psi(hostUs)), cgroup: cgUs === null ? null : { pressure: psi(cgUs), swapLeak: false } }, config);
    gate.push(gateState.stallMsP99 === null ? null : Math.round(gateState.stallMsP99 * 100) / 100);
    const step = nextSample(watchState, sidecarRaw(monoMs, hostUs, cgUs), 1_764_480_000_000 + monoMs);
    watchState = step.state;
    watch.push(step.sample.stall_ms_p99);
  });
  return { gate, watch, gateState };
}

function sidecarRaw(monoMs: number, hostUs: number, cgUs: number | null): RawReadings {
  const cgroup: CgroupRaw = {
    dir: "/sys/fs/cgroup/infer",
    pressure: ok(psi(cgUs ?? 0)),
    hasPressure: true,
    pressureFile: "/sys/fs/cgroup/infer/memory.pressure",
    current: ok(0),
    max: ok(0),
    peak: ok(0),
    oomKill: ok(0),
    swapCurrent: ok(0),
    swapMax: ok(0),
  };
  return {
    monoMs,
    hostPsi: ok(psi(hostUs)),
    vmstat: parseVmstat("pswpin 0\npswpout 0\nworkingset_refault 0\n", "/proc/vmstat"),
    cpu: parseProcStatCpu(`cpu  ${monoMs / 10} 0 0 ${monoMs / 10} 0 0 0 0 0 0\n`, "/proc/stat"),
    cgroup: cgUs === null ? fail("/sys/fs/cgroup/infer", "worker cgroup does not exist") : ok(cgroup),
    queue: fail("redis://127.0.0.1:1", "not connected"),
    files: { hostPsi: "/proc/pressure/memory", vmstat: "/proc/vmstat", cpu: "/proc/stat" },
  };
}

/** `n` seconds stalling `msPerS` each, continuing the totals of `from`. */
function stalling(n: number, from: Second, host: number, cg: number | null): Second[] {
  const out: Second[] = [];
  let { hostUs, cgUs } = from;
  for (let k = 0; k < n; k++) {
    hostUs += host * 1000;
    cgUs = cg === null ? null : (cgUs ?? 0) + cg * 1000;
    out.push({ hostUs, cgUs });
  }
  return out;
}

describe("stall_ms_p99: the gate's and the sidecar's window", () => {
  it("a worker cgroup that is gone takes its stall with it (review repro: 80 % then no cgroup, host idle)", () => {
    const first = { hostUs: 0, cgUs: 0 };
    const busy = [first, ...stalling(9, first, 0, 800)];
    const gone = stalling(5, busy[busy.length - 1]!, 0, null);
    const { gate, gateState } = walk([...busy, ...gone]);
    expect(gate[9]).toBe(800);
    // The first host sample only starts the host window; then the host's 0 ms/s.
    expect(gate.slice(10)).toEqual([null, 0, 0, 0, 0]);
    expect(gateState.stall.points.length).toBe(4);
  });

  it("watch and the gate agree sample by sample: source changes, a recreated cgroup, 60 s aging", () => {
    const seconds: Second[] = [{ hostUs: 0, cgUs: null }];
    const add = (list: Second[]) => seconds.push(...list);
    add(stalling(5, seconds[seconds.length - 1]!, 50, null)); // host only
    add(stalling(1, { hostUs: seconds[seconds.length - 1]!.hostUs, cgUs: 0 }, 50, 0)); // cgroup appears
    add(stalling(10, seconds[seconds.length - 1]!, 50, 700));
    add([{ hostUs: seconds[seconds.length - 1]!.hostUs + 50_000, cgUs: 10 }]); // cgroup recreated: total went back
    add(stalling(3, seconds[seconds.length - 1]!, 50, 300));
    add(stalling(70, seconds[seconds.length - 1]!, 50, 20)); // the 300s age out
    const { gate, watch } = walk(seconds);
    expect(gate).toEqual(watch);
    expect(gate[16]).toBe(700);
    expect(gate[17]).toBeNull(); // restarted on the reset
    expect(gate[20]).toBe(300);
    expect(gate[79]).toBe(300); // 59 s after the last 300 ms/s second
    expect(gate[80]).toBe(20); // 60 s: out (both bound the window the same way)
  });
});

describe("nextStallWindow", () => {
  const at = (source: StallReading["source"], totalUs: number, monoMs: number): StallReading => ({ source, totalUs, monoMs });
  const run = (readings: (StallReading | null)[]): StallWindow => readings.reduce<StallWindow>(nextStallWindow, emptyStallWindow);

  it("a point per reading after the first, in ms stalled per second", () => {
    const w = run([at("host", 0, 0), at("host", 250_000, 1000), at("host", 300_000, 1500)]);
    expect(w.points.map((p) => p.stallMsPerS)).toEqual([250, 100]);
    expect(stallMsP99(w)).toBe(250);
  });

  it("PSI unreadable for a sample starts over, with no point across it", () => {
    const w = run([at("host", 0, 0), at("host", 900_000, 1000), null, at("host", 905_000, 3000), at("host", 915_000, 4000)]);
    expect(w.points.map((p) => p.stallMsPerS)).toEqual([10]);
  });

  it("no time passed: no point, nothing lost", () => {
    const w = run([at("host", 0, 0), at("host", 400_000, 1000), at("host", 400_000, 1000)]);
    expect(w.points.map((p) => p.stallMsPerS)).toEqual([400]);
  });

  it("leaves prev as it was", () => {
    const prev = run([at("host", 0, 0), at("host", 100_000, 1000)]);
    const copy = structuredClone(prev);
    nextStallWindow(prev, at("host", 1, 2000));
    nextStallWindow(prev, at("host", 200_000, 2000));
    expect(prev).toEqual(copy);
  });
});
