import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseDrillFile } from "../../src/drill/drillFile.js";
import { decidedJob, injectHold, nextFollowAction, nextPackAction, splitPhases, type PackAction } from "../../src/drill/schedule.js";
import { repoRoot } from "../helpers/cli.js";

const thrash = parseDrillFile(readFileSync(path.join(repoRoot, "drills", "thrash.yaml"), "utf8"), "thrash.yaml");
const smoke = parseDrillFile(readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8"), "smoke.yaml");

/**
 * Runs a pack against a fake clock the way `up` does (waits advance the clock,
 * a push takes `pushMs`) and returns when each job was pushed and how it ended.
 */
function simulatePack(step: { jobs: number; rate?: number }, atMs: number, durationMs: number, pushMs = 5): { pushesAt: number[]; end: PackAction; endAt: number } {
  let now = atMs;
  let lastPushAt: number | null = null;
  const pushesAt: number[] = [];
  for (;;) {
    const action = nextPackAction(step, pushesAt.length, lastPushAt, now, durationMs);
    if (action.kind === "wait") {
      expect(action.ms).toBeGreaterThan(0);
      now += action.ms;
    } else if (action.kind === "push") {
      lastPushAt = now;
      pushesAt.push(now);
      now += pushMs;
    } else {
      return { pushesAt, end: action, endAt: now };
    }
  }
}

describe("the drill's phases split at its duration", () => {
  it("a --duration shorter than the file's leaves the later phases out, in start order", () => {
    const { run, skipped } = splitPhases(smoke.phases, 12_000);
    expect(run.map((p) => [p.index, p.at])).toEqual([[0, 0], [1, 5000], [2, 9000]]);
    expect(skipped.map((p) => [p.index, p.at])).toEqual([[3, 16_000], [4, 24_000]]);
  });

  it("a phase starting exactly at the end never runs; the file's own duration runs every phase", () => {
    expect(splitPhases(smoke.phases, 16_000).skipped.map((p) => p.index)).toEqual([3, 4]);
    expect(splitPhases(smoke.phases, smoke.duration).skipped).toEqual([]);
  });

  it("keeps each phase's index when the file lists them out of order", () => {
    const phases = [smoke.phases[1]!, smoke.phases[0]!];
    expect(splitPhases(phases, 60_000).run.map((p) => [p.index, p.at])).toEqual([[1, 0], [0, 5000]]);
  });
});

describe("a pack stops at the drill's end", () => {
  it("thrash with --duration 20s: the 0.5/s trickle from 5s pushes 8 jobs, the other 4 are not packed, and it stops before the end", () => {
    const trickle = thrash.phases[1]!;
    const r = simulatePack(trickle.pack!, trickle.at, 20_000);
    expect(r.pushesAt).toHaveLength(8);
    expect(r.end).toEqual({ kind: "deadline", notPacked: 4 });
    expect(Math.max(...r.pushesAt)).toBeLessThan(20_000);
    // it does not sleep out the next interval (due at ~21 s) before giving up
    expect(r.endAt).toBeLessThan(20_000);
  });

  it("the file's own duration packs every job", () => {
    const trickle = thrash.phases[1]!;
    const r = simulatePack(trickle.pack!, trickle.at, thrash.duration);
    expect(r.pushesAt).toHaveLength(12);
    expect(r.end).toEqual({ kind: "done" });
  });

  it("a burst without a rate stops between pushes once the clock passes the end", () => {
    const r = simulatePack({ jobs: 100 }, 900, 1000, 30);
    expect(r.pushesAt).toEqual([900, 930, 960, 990]);
    expect(r.end).toEqual({ kind: "deadline", notPacked: 96 });
  });

  it("a pack started late (the loop woke after the end) pushes nothing", () => {
    expect(nextPackAction({ jobs: 3 }, 0, null, 20_010, 20_000)).toEqual({ kind: "deadline", notPacked: 3 });
  });

  it("waits the rest of the interval when the next job is due before the end", () => {
    expect(nextPackAction({ jobs: 3, rate: 2 }, 1, 1000, 1200, 5000)).toEqual({ kind: "wait", ms: 300 });
    expect(nextPackAction({ jobs: 3, rate: 2 }, 1, 1000, 1500, 5000)).toEqual({ kind: "push" });
    expect(nextPackAction({ jobs: 3, rate: 2 }, 3, 1000, 1500, 5000)).toEqual({ kind: "done" });
  });
});

describe("up follows the gate until it has decided every packed job", () => {
  it.each([
    ["reject_packed_tokens job=7 packed=36012 limit=32000", "7"],
    ["admit job=12 packed=4000 limit=32000 attempt=1", "12"],
    ["reject_host_pressure job=10 psi=missing", "10"],
    ["reject_deadline_slack job=9 slack_ms=420 route=dead", "9"],
    ["reject_host_pressure job=11 psi=12.40 redelivery=1", "11"],
    ["dead job=3 reason=undecodable", "3"],
    ["dead job=- reason=undecodable", null],
    ["recovered job=4 from_gate=g1 attempt=0 route=ready", null],
    ["gate: job=5 left g1's processing list before its decision (recovered by another gate); skipped", null],
    ["gate: redis unavailable (ECONNREFUSED); retrying", null],
  ])("%s → %s", (line, id) => {
    expect(decidedJob(line)).toBe(id);
  });

  it("waits while a pushed job is undecided, stops once all are, gives up at the bound naming the rest", () => {
    const pushed = ["8", "9"];
    expect(nextFollowAction(pushed, new Set(["8"]), 1000, 16_000)).toEqual({ kind: "wait" });
    expect(nextFollowAction(pushed, new Set(["8", "9", "1"]), 1000, 16_000)).toEqual({ kind: "all_decided" });
    expect(nextFollowAction(pushed, new Set(["8"]), 16_000, 16_000)).toEqual({ kind: "gave_up", undecided: ["9"] });
    expect(nextFollowAction([], new Set(), 0, 0)).toEqual({ kind: "all_decided" });
  });
});

describe("an inject phase's hold ends by the drill's end", () => {
  it("smoke with --duration 20s: the thrash hog from 9s holds 11s, not its 25s; with the file's duration it holds 25s", () => {
    const hog = smoke.phases[2]!;
    expect(hog.inject?.hold).toBe(25_000);
    const phase = { ...hog, inject: hog.inject! };
    expect(injectHold(phase, 20_000)).toEqual({ holdMs: 11_000, clipped: true });
    expect(injectHold(phase, smoke.duration)).toEqual({ holdMs: 25_000, clipped: false });
    expect(injectHold(phase, 34_000)).toEqual({ holdMs: 25_000, clipped: false });
  });
});
