import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.js";
import { Chalk } from "chalk";
import { renderReport } from "../../src/report/render.js";
import type { ReportInputs, WatchSample } from "../../src/report/inputs.js";

const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const MIN = 60_000;

function sample(tsMs: number, over: Partial<WatchSample> = {}): WatchSample {
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
    alarm: [],
    ...over,
  };
}

function inputs(over: Partial<ReportInputs> = {}): ReportInputs {
  return {
    queue: "jobs",
    source: { kind: "live", url: "redis://127.0.0.1:6390" },
    drill: { name: "smoke", runId: "r1", drillFile: "drills/smoke.yaml", createdAt: new Date(NOW - 5 * MIN).toISOString(), phase: "stopped" },
    events: [],
    done: [],
    stats: {},
    queueLen: 0,
    queueHead: null,
    drainLen: 0,
    recording: { file: "/s/smoke/watch.out", samples: [], badLines: 0 },
    recordingLooked: "/s/smoke/watch.out",
    gatherNotes: [],
    ...over,
  };
}

describe("OOM kills with the worker cgroup read now (up stops before watch's next sample)", () => {
  const samples = [sample(NOW - 4 * MIN, { cg_oom_kill: 0 }), sample(NOW - 10_000, { cg_oom_kill: 0 })];
  const file = "/sys/fs/cgroup/x/infer/memory.events";

  it("counts the kills read after the last sample, and says where the figure came from", () => {
    const r = buildReport(inputs({ recording: { file: "/s/smoke/watch.out", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: 2, reason: null } }), NOW, 10 * MIN);
    expect(r.pressure.oom_kills_in_window).toBe(2);
    expect(r.pressure.cg_oom_kill_end).toBe(2);
    expect(r.notes.join("\n")).toContain(`OOM kills counted to ${new Date(NOW).toISOString()} from ${file}`);
    expect(renderReport(r, "text", new Chalk({ level: 0 }))).toContain("2 in window (memory.events oom_kill=2)");
  });

  it("a read that agrees with the recording adds no note; an unreadable one keeps the recording's figure", () => {
    const same = buildReport(inputs({ recording: { file: "w", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: 0, reason: null } }), NOW, 10 * MIN);
    expect(same.pressure.oom_kills_in_window).toBe(0);
    expect(same.notes.join("\n")).not.toContain("OOM kills counted");
    const bad = buildReport(inputs({ recording: { file: "w", samples, badLines: 0 }, cgroupNow: { tsMs: NOW, file, oomKill: null, reason: "EACCES" } }), NOW, 10 * MIN);
    expect(bad.pressure.oom_kills_in_window).toBe(0);
    expect(bad.notes.join("\n")).toContain("could not be read");
  });

  it("with no recorded reading, the counter is shown but the window's kills stay n/a (no baseline), never 0", () => {
    const r = buildReport(inputs({ recording: null, cgroupNow: { tsMs: NOW, file, oomKill: 2, reason: null } }), NOW, 10 * MIN);
    expect(r.pressure.oom_kills_in_window).toBeNull();
    expect(r.pressure.cg_oom_kill_end).toBe(2);
  });
});

