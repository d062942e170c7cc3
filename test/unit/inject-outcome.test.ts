import { describe, expect, it } from "vitest";
import { describeOutcome, runPeak, type InjectReport, type RunPeakFacts } from "../../src/commands/inject.run.js";

const M = 1024 * 1024;

describe("runPeak: this run's cgroup peak, never the lifetime one passed off as it", () => {
  const none: RunPeakFacts = { resetPeak: null, lifetimeBefore: null, lifetimeAfter: null, sampledMax: null };
  it.each<[string, RunPeakFacts, ReturnType<typeof runPeak>]>([
    ["v2 memory.peak reset for our fd: exact", { ...none, resetPeak: 33 * M, lifetimeBefore: 64 * M, lifetimeAfter: 64 * M, sampledMax: 32 * M }, { bytes: 33 * M, basis: "reset" }],
    ["the lifetime peak rose during the run: it is this run's", { ...none, lifetimeBefore: 10 * M, lifetimeAfter: 64 * M, sampledMax: 40 * M }, { bytes: 64 * M, basis: "lifetime_peak_rose" }],
    // The QA walkthrough: a 128M hog OOM-killed at 64M, then a 32M one: not "peak 64.0MiB".
    ["a lifetime peak from an earlier run: only the sampled usage, a lower bound", { ...none, lifetimeBefore: 64 * M, lifetimeAfter: 64 * M, sampledMax: 32.4 * M }, { bytes: 32.4 * M, basis: "sampled" }],
    ["nothing readable: unknown, not 0", { ...none, lifetimeBefore: 64 * M }, { bytes: null, basis: null }],
  ])("%s", (_name, facts, expected) => expect(runPeak(facts)).toEqual(expected));
});

function report(overrides: Partial<InjectReport>): InjectReport {
  return {
    outcome: "packed", name: "qa-inj", mode: "anon", page_toucher: "c", size_bytes: 32 * M, hold_ms: 1000, held_ms: 1010, detached: false, pid: 4242, start_time: 1, joined: true, oom_score_adj: 1000,
    touched_bytes: 32 * M, packed_bytes: 32 * M, fill_ms: null, passes: 0, cgroup: "/sys/fs/cgroup/qa-inj", cg_mem_max: 64 * M, cg_mem_max_effective: 64 * M,
    cg_mem_peak: 64 * M, run_peak_bytes: 32.4 * M, run_peak_basis: "sampled", cg_oom_kill_before: 1, cg_oom_kill_after: 1, stall_rates_pct: [], samples: [],
    stall: { holdSeconds: 0, holdMedianPct: null, holdMaxPct: null, holdSecondsOver: 0, thresholdPct: 5 },
    pressure_file: null, file: null, file_left: null, state_file: null, exit: { code: 0, signal: null, description: "exited 0" }, message: "",
    ...overrides,
  };
}

describe("describeOutcome", () => {
  it("oom_killed says where it was killed, of what size, against which limit", () => {
    const text = describeOutcome(report({ outcome: "oom_killed", size_bytes: 128 * M, touched_bytes: 60 * M, packed_bytes: null, cg_oom_kill_before: 0, cg_oom_kill_after: 1, exit: { code: null, signal: "SIGKILL", description: "killed by SIGKILL" } }));
    expect(text).toMatch(/^oom_killed: OOM-killed at 60\.0MiB of 128MiB \(cgroup limit 64\.0MiB\); pid 4242; cgroup oom_kill 0 → 1\. Admission was already late\.$/);
  });

  it("oom_killed before the first progress line: this run's peak when exact, else says it is unknown", () => {
    // QA: touched_bytes was 0 in --json, a figure nobody measured: null until the hog's first progress line.
    const killed = { outcome: "oom_killed" as const, size_bytes: 128 * M, touched_bytes: null, packed_bytes: null };
    expect(describeOutcome(report({ ...killed, run_peak_bytes: 64 * M, run_peak_basis: "lifetime_peak_rose" }))).toContain("OOM-killed at about 64.0MiB (this run's cgroup peak) of 128MiB (cgroup limit 64.0MiB)");
    expect(describeOutcome(report({ ...killed, run_peak_bytes: 3 * M, run_peak_basis: "sampled" }))).toContain("OOM-killed at an unknown size (before its first progress line) of 128MiB");
  });

  // QA: a 3 s hold said "≥5% in 0/2 s" and nowhere how long the fill took.
  it("packed says how long the fill took, and that the stall counts the hold's whole seconds", () => {
    const text = describeOutcome(report({ fill_ms: 180, hold_ms: 3000, stall: { holdSeconds: 2, holdMedianPct: 1.2, holdMaxPct: 2, holdSecondsOver: 0, thresholdPct: 5 } }));
    expect(text).toContain("packed: 32.0MiB touched in 0.2 s and held 3s;");
    expect(text).toContain("≥5% in 0/2 whole s of it");
  });

  // QA: a hog SIGSTOPped for 21 s of its 25 s hold said "held 25s".
  it("packed says the hold it had when a stop or a starved host stretched it past what was asked", () => {
    expect(describeOutcome(report({ hold_ms: 25_000, held_ms: 46_300 }))).toContain(" and held 46.3 s (asked 25s: the hog was stopped or starved meanwhile);");
    expect(describeOutcome(report({ hold_ms: 25_000, held_ms: 25_600 }))).toContain(" and held 25s;");
    expect(describeOutcome(report({ hold_ms: 25_000, held_ms: null }))).toContain(" and held 25s;");
  });

  // QA: a hog a rollback stopped was written "failed: hog exited 143: stopped by SIGTERM, file unlinked".
  it("stopped from outside: said as a stop, with the exit and who stops a cgroup's processes", () => {
    const text = describeOutcome(report({ outcome: "stopped", pid: 77, touched_bytes: 12 * M, exit: { code: 143, signal: null, description: "exited 143: stopped by SIGTERM, file unlinked" } }));
    expect(text).toBe("stopped: hog pid 77 stopped from outside after 12.0MiB touched (exited 143: stopped by SIGTERM, file unlinked): a rollback or cgroup teardown stops the cgroup's processes, or a kill by hand");
    expect(describeOutcome(report({ outcome: "interrupted", touched_bytes: null, file: null }))).toBe("interrupted: hog pid 4242 stopped after an unknown size");
  });

  it("packed after an earlier OOM: this run's peak, the lifetime one labelled as such", () => {
    const text = describeOutcome(report({}));
    expect(text).not.toMatch(/; peak 64\.0MiB/);
    expect(text).toContain("cgroup peak ≥32.4MiB this run (sampled; its lifetime peak 64.0MiB is from before)");
    expect(describeOutcome(report({ run_peak_bytes: 33 * M, run_peak_basis: "reset" }))).toContain("; cgroup peak 33.0MiB this run;");
    expect(describeOutcome(report({ run_peak_bytes: null, run_peak_basis: null }))).toContain("this run's peak unknown (cgroup lifetime peak 64.0MiB)");
  });
});
