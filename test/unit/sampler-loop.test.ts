import { describe, expect, it } from "vitest";
import { parseProcStatCpu } from "../../src/host/cpu.js";
import { ok } from "../../src/host/kernelFile.js";
import { parsePsi } from "../../src/host/psi.js";
import { parseVmstat } from "../../src/host/vmstat.js";
import { defaultAlarmConfig } from "../../src/sampler/alarms.js";
import { initialSidecarState, nextTickAfter, runSidecar, sidecarStep, type SidecarState } from "../../src/sampler/loop.js";
import type { CgroupRaw, RawReadings } from "../../src/sampler/step.js";

const WALL = 1_764_480_000_000;

function raw(monoMs: number, cg: { oomKill: number; swapCurrent: number }): RawReadings {
  const dir = "/sys/fs/cgroup/infer";
  const cgroup: CgroupRaw = {
    dir,
    pressure: parsePsi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", `${dir}/memory.pressure`),
    hasPressure: true,
    pressureFile: `${dir}/memory.pressure`,
    current: ok(1_000_000),
    max: ok(2_000_000),
    peak: ok(1_500_000),
    oomKill: ok(cg.oomKill),
    swapCurrent: ok(cg.swapCurrent),
    swapMax: ok(0),
  };
  return {
    monoMs,
    hostPsi: parsePsi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "/proc/pressure/memory"),
    vmstat: parseVmstat("pswpin 0\npswpout 0\nworkingset_refault_anon 0\nworkingset_refault_file 0\n", "/proc/vmstat"),
    cpu: parseProcStatCpu(`cpu  ${monoMs / 10} 0 0 ${monoMs / 10} 0 0 0 0 0 0\n`, "/proc/stat"),
    cgroup: ok(cgroup),
    queue: ok({ source: "redis://127.0.0.1:6400", queue: "jobs", queueLen: 0, head: null, admitted: [], working: [], workingScanned: true, retryCandidates: [], stats: {}, mode: null, wrongTyped: [], scan: { readyLen: 0, readyScanned: 0, admittedLen: 0, admittedScanned: 0 } }),
    files: { hostPsi: "/proc/pressure/memory", vmstat: "/proc/vmstat", cpu: "/proc/stat" },
  };
}

/** Readings one monotonic second apart, each with its own wall time; returns the active alarms after each. */
function run(steps: Array<{ wallMs: number; oomKill: number; swapCurrent: number }>): string[][] {
  let state: SidecarState = initialSidecarState;
  return steps.map(({ wallMs, ...cg }, i) => {
    const step = sidecarStep(state, raw(i * 1000, cg), wallMs, defaultAlarmConfig);
    state = step.state;
    return step.sample.alarm;
  });
}

describe("sidecarStep: alarm holds and clear delays run on the monotonic clock, not the wall clock", () => {
  it("a wall clock stepped 2 min forward (NTP) does not end the oom_kill hold", () => {
    const active = run([
      { wallMs: WALL, oomKill: 0, swapCurrent: 0 },
      { wallMs: WALL + 1000, oomKill: 1, swapCurrent: 0 },
      { wallMs: WALL + 122_000, oomKill: 1, swapCurrent: 0 },
    ]);
    expect(active.map((a) => a.includes("oom_kill"))).toEqual([false, true, true]);
  });

  it("a wall clock stepped 10 s forward does not cut a clear delay short", () => {
    const active = run([
      { wallMs: WALL, oomKill: 0, swapCurrent: 8192 },
      { wallMs: WALL + 1000, oomKill: 0, swapCurrent: 0 },
      { wallMs: WALL + 12_000, oomKill: 0, swapCurrent: 0 },
    ]);
    expect(active.map((a) => a.includes("swap_leak"))).toEqual([true, true, true]);
  });

  it("the sample's ts is still wall time", () => {
    const step = sidecarStep(initialSidecarState, raw(5, { oomKill: 0, swapCurrent: 0 }), WALL, defaultAlarmConfig);
    expect(step.sample.ts).toBe(new Date(WALL).toISOString());
  });
});

// QA: 116 samples for 100 at 100 ms, 17 of them 1-3 ms after the one before (a rate over one tick: cpu_idle_pct null, 0 % stall mid-thrash).
describe("runSidecar: one reading per tick", () => {
  it("nextTickAfter: never the tick just served, even when the timer woke a hair before it; missed ticks skipped", () => {
    expect(nextTickAfter(1, 99.4, 100)).toBe(2); // woke 0.6 ms early for tick 1: the next is tick 2, not tick 1 again
    expect(nextTickAfter(1, 100.2, 100)).toBe(2);
    expect(nextTickAfter(1, 365, 100)).toBe(4); // a slow read let ticks 2 and 3 go by
    expect(nextTickAfter(0, 0.3, 100)).toBe(1);
  });

  it("an instant read at a 5 ms interval for 1 s: at most one reading per tick (ticks 0 to 200: 201)", async () => {
    const at: number[] = [];
    const readings = await runSidecar({
      read: async () => {
        at.push(performance.now());
        return raw(at.length * 5, { oomKill: 0, swapCurrent: 0 });
      },
      intervalMs: 5,
      durationMs: 1000,
      alarmConfig: defaultAlarmConfig,
      signal: new AbortController().signal,
      onSample: () => {},
      wallClock: () => WALL,
    });
    expect(readings).toBe(at.length);
    // Ticks 0..200 at most (the one on the duration's end too); the bug read again ~1 ms after a timer that woke early, tens of times a second.
    expect(readings).toBeLessThanOrEqual(201);
    expect(readings).toBeGreaterThan(0);
  });
});
