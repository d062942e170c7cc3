import { describe, expect, it } from "vitest";
import { parseProcStatCpu } from "../../src/host/cpu.js";
import { ok } from "../../src/host/kernelFile.js";
import { parsePsi } from "../../src/host/psi.js";
import { parseVmstat } from "../../src/host/vmstat.js";
import { defaultAlarmConfig } from "../../src/sampler/alarms.js";
import { initialSidecarState, sidecarStep, type SidecarState } from "../../src/sampler/loop.js";
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
    queue: ok({ source: "redis://127.0.0.1:6400", queueLen: 0, head: null, admitted: [], working: [], workingScanned: true, retryCandidates: [], stats: {}, mode: null, wrongTyped: [] }),
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
