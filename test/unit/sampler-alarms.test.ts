import { describe, expect, it } from "vitest";
import { defaultAlarmConfig, initialAlarmState, nextAlarms, type AlarmEvent, type AlarmState } from "../../src/sampler/alarms.js";
import type { Sample, SampleFacts } from "../../src/sampler/step.js";

const NOW = 1_764_480_000_000;

/** A calm sample: every field readable, nothing over a limit. */
function sample(over: Partial<Sample> = {}): Sample {
  return {
    ts: new Date(NOW).toISOString(),
    queue_len: 2,
    queue_age_ms: 180,
    queue_head_slack_ms: 7000,
    deadline_slack_ms: 4000,
    psi_mem_some_avg10: 0.5,
    psi_mem_full_avg10: 0.1,
    psi_mem_some_total_us: 1000,
    psi_mem_some_rate: 0.5,
    cg_psi_mem_some_avg10: 0.5,
    cg_psi_mem_some_rate: 0.5,
    si: 0,
    so: 0,
    cg_swap_current: 0,
    refault_rate: 0,
    cg_mem_current: 1000,
    cg_mem_max: 2000,
    cg_mem_peak: 1500,
    cg_oom_kill: 0,
    cpu_idle_pct: 41,
    cpu_iowait_pct: 0,
    tokens_out: 10,
    retry_count: 0,
    admitted: 1,
    rejected: {},
    gate_mode: "admit",
    stall_ms_p99: 50,
    alarm: [],
    missing: [],
    ...over,
  };
}

/** Clears at the first calm sample: for tests about raising and clearing once, not about the clear delay. */
const noClearDelay = { ...defaultAlarmConfig, clearAfterMs: 0 };

const calmFacts: SampleFacts = { retriedJobs: [], retriedJobsPartial: false, cgSwapMax: 0, cgDir: "/sys/fs/cgroup/infer", cgAbsent: false, cgPsiExpected: true };

/** Runs samples one second apart; returns every event and the active list after each. */
function run(steps: Array<[Partial<Sample>, Partial<SampleFacts>?]>, config = defaultAlarmConfig) {
  let state: AlarmState = initialAlarmState;
  const events: AlarmEvent[] = [];
  const active: string[][] = [];
  steps.forEach(([over, facts], i) => {
    const r = nextAlarms(state, sample(over), { ...calmFacts, ...facts }, NOW + i * 1000, config);
    state = r.state;
    events.push(...r.events);
    active.push(r.active);
  });
  return { events, active };
}

describe("reclaim_not_underload: CPU idle > 30 %, pressure over the limit or slack < 0, queue age < 500 ms", () => {
  it.each([
    ["host avg10 over the limit", { psi_mem_some_avg10: 12.4 }, true],
    ["host stall rate over the limit (avg10 lags)", { psi_mem_some_rate: 14 }, true],
    ["cgroup avg10 over the limit", { cg_psi_mem_some_avg10: 11 }, true],
    ["cgroup stall rate over the limit", { cg_psi_mem_some_rate: 20 }, true],
    ["slack negative, PSI calm", { deadline_slack_ms: -230 }, true],
    ["CPU busy: not the contradiction", { psi_mem_some_avg10: 12.4, cpu_idle_pct: 20 }, false],
    ["idle exactly 30 %", { psi_mem_some_avg10: 12.4, cpu_idle_pct: 30 }, false],
    ["queue age already bad: visible anyway", { psi_mem_some_avg10: 12.4, queue_age_ms: 600 }, false],
    ["avg10 exactly at the limit", { psi_mem_some_avg10: 10 }, false],
    ["host avg10 over the limit, no stall over the last interval (the tail of an ended stall)", { psi_mem_some_avg10: 12.4, psi_mem_some_rate: 0 }, false],
    ["cgroup avg10 over the limit, no stall over the last interval", { cg_psi_mem_some_avg10: 22.19, cg_psi_mem_some_rate: 0 }, false],
    ["cgroup avg10 over the limit, a little stall still going on", { cg_psi_mem_some_avg10: 22.19, cg_psi_mem_some_rate: 0.4 }, true],
    ["host avg10 over the limit, no rate yet (first sample, or its counter reset)", { psi_mem_some_avg10: 12.4, psi_mem_some_rate: null }, true],
    ["the host's rate at 0 does not set the cgroup's avg10 aside", { cg_psi_mem_some_avg10: 22.19, psi_mem_some_rate: 0 }, true],
    ["calm", {}, false],
  ] as const)("%s", (_name, over, fires) => {
    const { active } = run([[over]]);
    expect(active[0]?.includes("reclaim_not_underload")).toBe(fires);
  });

  it("prints the seed's PAGE line", () => {
    const { events } = run([[{ cpu_idle_pct: 41.2, psi_mem_some_avg10: 12.4, deadline_slack_ms: -230, queue_age_ms: 180 }]]);
    expect(events).toEqual([
      { name: "reclaim_not_underload", kind: "raised", line: "PAGE reclaim, not underload: cpu_idle=41% psi=12.40 slack_ms=-230 queue_age_ms=180 via=psi_mem_some_avg10=12.40" },
    ]);
  });

  it.each([
    ["host stall rate", { psi_mem_some_avg10: 0.23, psi_mem_some_rate: 16.26 }, "psi=0.23", "via=psi_mem_some_rate=16.26"],
    ["cgroup stall rate", { psi_mem_some_avg10: 0.23, cg_psi_mem_some_rate: 16.26 }, "psi=0.23", "via=cg_psi_mem_some_rate=16.26"],
    ["cgroup avg10, furthest past its limit", { psi_mem_some_avg10: 11, cg_psi_mem_some_avg10: 40 }, "psi=11.00", "via=cg_psi_mem_some_avg10=40.00"],
    ["slack alone", { deadline_slack_ms: -230 }, "psi=0.50", "via=deadline_slack_ms=-230"],
    ["slack with host PSI unreadable", { deadline_slack_ms: -230, psi_mem_some_avg10: null, psi_mem_some_rate: null }, "psi=missing", "via=deadline_slack_ms=-230"],
  ] as const)("psi= is host some avg10 whatever tripped (%s); via= names the tripping figure", (_name, over, psi, via) => {
    const line = run([[over]]).events[0]?.line ?? "";
    expect(line.split(" ")).toContain(psi);
    expect(line.endsWith(` ${via}`)).toBe(true);
  });

  it("respects --psi-limit and --psi-rate-limit", () => {
    const strict = { ...defaultAlarmConfig, psiLimit: 2, psiRateLimit: 50 };
    expect(run([[{ psi_mem_some_avg10: 3 }]], strict).active[0]).toContain("reclaim_not_underload");
    expect(run([[{ psi_mem_some_rate: 40 }]], strict).active[0]).not.toContain("reclaim_not_underload");
  });

  it("raised once, held while firing, cleared once", () => {
    const hot = { psi_mem_some_avg10: 15 };
    const { events, active } = run([[{}], [hot], [hot], [hot], [{}], [{}]], noClearDelay);
    expect(events.map((e) => `${e.kind} ${e.name}`)).toEqual(["raised reclaim_not_underload", "cleared reclaim_not_underload"]);
    expect(events[1]?.line).toBe("CLEAR reclaim_not_underload after 3.0s: pressure under its limits, highest psi_mem_some_avg10=0.50 and no admitted job past its deadline");
    expect(active.map((a) => a.length)).toEqual([0, 1, 1, 1, 0, 0]);
  });

  // QA: the hog exited, the CPU went idle, and the page fired on a decaying cgroup avg10 of 22 with both rates at 0.0 %.
  it("a stall that ended: the decaying avg10 neither raises the page nor holds it; the CLEAR names it as the tail", () => {
    const hog = { cg_psi_mem_some_avg10: 18, cg_psi_mem_some_rate: 35 };
    const ended = { cg_psi_mem_some_avg10: 22.19, cg_psi_mem_some_rate: 0, psi_mem_some_rate: 0 };
    const { events, active } = run([[hog], [ended], [ended], [ended], [ended], [ended], [ended]]);
    expect(active.map((a) => a.length)).toEqual([1, 1, 1, 1, 1, 1, 0]);
    expect(events.map((e) => e.line)).toEqual([
      "PAGE reclaim, not underload: cpu_idle=41% psi=0.50 slack_ms=4000 queue_age_ms=180 via=cg_psi_mem_some_rate=35.00",
      "CLEAR reclaim_not_underload after 6.0s: pressure under its limits, highest psi_mem_some_avg10=0.50 and no admitted job past its deadline; cg_psi_mem_some_avg10=22.19 is the tail of a stall that ended (no stall over the last interval)",
    ]);
    // Every figure still counted at 0: said so, not as "highest psi_mem_some_rate=0.00" beside the tail.
    const calm = { ...ended, psi_mem_some_avg10: 0 };
    expect(run([[hog], [calm], [calm], [calm], [calm], [calm], [calm]]).events.at(-1)?.line).toBe(
      "CLEAR reclaim_not_underload after 6.0s: pressure under its limits (every stall rate at 0.00) and no admitted job past its deadline; cg_psi_mem_some_avg10=22.19 is the tail of a stall that ended (no stall over the last interval)",
    );
    // Idle CPU after the stall ended: no page at all.
    expect(run([[ended], [ended], [ended]]).events).toEqual([]);
  });

  it("one calm sample does not clear it: it clears after clearAfterMs of calm, so one incident pages once", () => {
    const hot = { psi_mem_some_avg10: 12.4 };
    // 1 s apart: a one-sample CPU burst (idle 7 %) in the middle, then 6 s calm.
    const { events, active } = run([[hot], [hot], [{ ...hot, cpu_idle_pct: 7 }], [hot], [{}], [{}], [{}], [{}], [{}], [{}]]);
    expect(events.map((e) => `${e.kind} ${e.name}`)).toEqual(["raised reclaim_not_underload", "cleared reclaim_not_underload"]);
    expect(active.map((a) => a.length)).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
    expect(events[1]?.line).toMatch(/^CLEAR reclaim_not_underload after 9\.0s: pressure under its limits/);
  });

  // QA 5: it cleared at peak pressure only because a hog took the idle CPU, and the bare CLEAR read as "safe".
  // DESIGN's rule stays (the alarm is the contradiction, idle CPU beside pressure); the CLEAR line says why and what is still bad.
  it("CPU went busy while pressure stays over: CLEAR says the CPU is no longer idle and that pressure is still over, with the figures", () => {
    const hot = { psi_mem_some_avg10: 12, cg_psi_mem_some_rate: 30 };
    const busy = { psi_mem_some_avg10: 29, cg_psi_mem_some_rate: 43, cpu_idle_pct: 13 };
    const { events } = run([[hot], [busy], [busy], [busy], [busy], [busy], [busy]]);
    expect(events.map((e) => e.line)).toEqual([
      "PAGE reclaim, not underload: cpu_idle=41% psi=12.00 slack_ms=4000 queue_age_ms=180 via=cg_psi_mem_some_rate=30.00",
      "CLEAR reclaim_not_underload after 6.0s: cpu no longer idle (cpu_idle=13%); pressure still over its limit (cg_psi_mem_some_rate=43.00)",
    ]);
  });

  it.each([
    ["queue age went bad", { queue_age_ms: 812, deadline_slack_ms: -230 }, ": queue age no longer looks fine (queue_age_ms=812); a job still past its deadline (deadline_slack_ms=-230)"],
    ["CPU busy, PSI unreadable", { cpu_idle_pct: 5, psi_mem_some_avg10: null, psi_mem_some_rate: null }, ": cpu no longer idle (cpu_idle=5%); pressure unknown (PSI unreadable)"],
    ["CPU busy and pressure gone", { cpu_idle_pct: 5, cg_psi_mem_some_avg10: 2 }, ": cpu no longer idle (cpu_idle=5%); pressure under its limits, highest cg_psi_mem_some_avg10=2.00 and no admitted job past its deadline"],
  ] as const)("CLEAR names every condition that stopped holding (%s)", (_name, over, why) => {
    const { events } = run([[{ psi_mem_some_avg10: 12 }], [over]], noClearDelay);
    expect(events[1]?.line).toBe(`CLEAR reclaim_not_underload after 1.0s${why}`);
  });

  it("missing inputs hold the alarm: no page, no clear", () => {
    const hot = { psi_mem_some_avg10: 15 };
    const blind = { cpu_idle_pct: null, queue_age_ms: null };
    expect(run([[blind], [{ ...hot, ...blind }]]).events).toEqual([]);
    const { events, active } = run([[hot], [blind], [blind], [hot]]);
    expect(events.map((e) => e.kind)).toEqual(["raised"]);
    expect(active.every((a) => a.includes("reclaim_not_underload"))).toBe(true);
  });
});

// QA: paged on a negative slack, it cleared with "no admitted job past its
// deadline" the sample the slack could not be read (the admitted list longer
// than a sample reads, a working list of the wrong type): unknown is not calm.
describe("reclaim_not_underload while deadline_slack_ms is unreadable: unknown, not calm", () => {
  const late = { deadline_slack_ms: -230 };
  const unread = (reason: string) => ({ deadline_slack_ms: null, missing: [{ field: "deadline_slack_ms", file: "redis://127.0.0.1:6379 jobs:admitted", reason }] });
  it.each([
    ["admitted list read only in part", "read the oldest 2000 of 9893 admitted jobs (a sample reads at most 2000): a smaller slack further back is not seen"],
    ["a working list of the wrong type", "redis key jobs:working:w1 is a string, not a list"],
  ] as const)("%s: the page holds, and clears only once slack reads again", (_name, reason) => {
    const { events, active } = run([[late], ...Array.from({ length: 8 }, (): [Partial<Sample>] => [unread(reason)]), [{}], [{}], [{}], [{}], [{}], [{}]]);
    expect(active.slice(0, 9).every((a) => a.includes("reclaim_not_underload"))).toBe(true);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
  });
  it("no job waiting (null, not missing) is calm", () => {
    const { events } = run([[late], ...Array.from({ length: 6 }, (): [Partial<Sample>] => [{ deadline_slack_ms: null }])]);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
  });
  it("pressure over its limit pages even while slack is unreadable", () => {
    const { events } = run([[{ psi_mem_some_avg10: 15, ...unread("redis key jobs:admitted is a string, not a list") }]]);
    expect(events.map((e) => e.kind)).toEqual(["raised"]);
  });
});

describe("reclaim_not_underload while PSI is unreadable: unknown, not calm", () => {
  const hot = { psi_mem_some_avg10: 15 };
  const noPsi = { psi_mem_some_avg10: null, psi_mem_some_rate: null, cg_psi_mem_some_avg10: null, cg_psi_mem_some_rate: null };

  it("PSI files unreadable for 8 s: the alarm holds, and pages no second time when they return", () => {
    const { events, active } = run([[hot], ...Array.from({ length: 8 }, (): [Partial<Sample>] => [noPsi]), [hot]]);
    expect(events.map((e) => `${e.kind} ${e.name}`)).toEqual(["raised reclaim_not_underload"]);
    expect(active.every((a) => a.includes("reclaim_not_underload"))).toBe(true);
  });

  it.each([
    ["host PSI unreadable, cgroup PSI calm", { psi_mem_some_avg10: null, psi_mem_some_rate: null }],
    ["host stall rate not computable", { psi_mem_some_rate: null }],
    ["cgroup PSI unreadable, host calm", { cg_psi_mem_some_avg10: null, cg_psi_mem_some_rate: null }],
  ] as const)("%s: holds", (_name, blind) => {
    const { events } = run([[hot], ...Array.from({ length: 8 }, (): [Partial<Sample>] => [blind])]);
    expect(events.map((e) => e.kind)).toEqual(["raised"]);
  });

  it("no worker cgroup PSI to read (no cgroup, legacy v1): host figures alone decide, and it clears", () => {
    const noCgPsi = { cg_psi_mem_some_avg10: null, cg_psi_mem_some_rate: null };
    const facts = { cgPsiExpected: false };
    const { events } = run([[{ ...hot, ...noCgPsi }, facts], ...Array.from({ length: 6 }, (): [Partial<Sample>, Partial<SampleFacts>] => [noCgPsi, facts])]);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
  });

  it("an unreadable sample restarts the calm period: calm on either side of it does not add up to a clear", () => {
    const blind = { cpu_idle_pct: null };
    // raised at 0 s; calm at 1-2 s; blind 3-8 s; calm from 9 s: clears at 14 s, not at 9 s.
    const steps: Array<[Partial<Sample>]> = [[hot], [{}], [{}], ...Array.from({ length: 6 }, (): [Partial<Sample>] => [blind]), ...Array.from({ length: 6 }, (): [Partial<Sample>] => [{}])];
    const { events, active } = run(steps);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
    expect(active.map((a) => a.includes("reclaim_not_underload"))).toEqual([...Array<boolean>(14).fill(true), false]);
  });

  it("CPU busy is known not to be the contradiction, PSI unreadable or not", () => {
    const { events } = run([[hot], ...Array.from({ length: 6 }, (): [Partial<Sample>] => [{ ...noPsi, cpu_idle_pct: 5 }])]);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
  });
});

describe("retry_worker_idle: a retried job reached this host class", () => {
  const retried = { retriedJobs: [{ id: "7", attempt: 1, host_class: "shared-free" }] };
  it("pages `retry worker_idle=1` once and clears once", () => {
    const { events } = run([[{}], [{}, retried], [{}, retried], [{}]], noClearDelay);
    expect(events.map((e) => e.line)).toEqual(["PAGE retry worker_idle=1 host_class=shared-free jobs=1 job=7 attempt=1", "CLEAR retry_worker_idle after 2.0s: no retried job of host_class=shared-free queued, admitted or running, none finished for 60s"]);
  });
  it("a retry on another host class is where it belongs", () => {
    expect(run([[{}, { retriedJobs: [{ id: "7", attempt: 1, host_class: "dedicated" }] }]]).active[0]).toEqual([]);
  });
  it("Redis unreachable holds it", () => {
    const { events } = run([[{}, retried], [{ queue_len: null }, { retriedJobs: [] }]]);
    expect(events.map((e) => e.kind)).toEqual(["raised"]);
  });
  // A list past SAMPLE_LIST_SCAN_CAP read in part: a retried job in the part not read is not seen, so none seen does not clear.
  it("lists read only in part hold it; read whole again, it clears", () => {
    const partial = { retriedJobs: [], retriedJobsPartial: true };
    const { events, active } = run([[{}, retried], [{}, partial], [{}, partial], [{}, partial], [{}]], noClearDelay);
    expect(active.map((a) => a.includes("retry_worker_idle"))).toEqual([true, true, true, true, false]);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
  });
  // QA: an idle worker takes a retried job and finishes it between two samples:
  // it is never seen queued or admitted, only as the worker's retry_count rising.
  it("a retried job the worker ran between two samples pages through retry_count, held, then clears once", () => {
    const config = { ...defaultAlarmConfig, retryHoldMs: 3000, clearAfterMs: 1000 };
    const { events, active } = run([[{ retry_count: 2 }], [{ retry_count: 3 }], ...Array.from({ length: 6 }, (): [Partial<Sample>] => [{ retry_count: 3 }])], config);
    expect(events.map((e) => e.line)).toEqual([
      "PAGE retry worker_idle=1 host_class=shared-free jobs=0 retry_count=3 (+1 finished here)",
      "CLEAR retry_worker_idle after 4.0s: no retried job of host_class=shared-free queued, admitted or running, none finished for 3.0s",
    ]);
    // raised at 1 s, held until 4 s, calm for clearAfterMs, cleared at 5 s
    expect(active.map((a) => a.includes("retry_worker_idle"))).toEqual([false, true, true, true, true, false, false, false]);
  });
  it("retry_count on watch's first sample is history, and an unreadable one is no retry", () => {
    expect(run([[{ retry_count: 4 }], [{ retry_count: 4 }], [{ retry_count: null, queue_len: null }], [{ retry_count: 4 }]]).events).toEqual([]);
  });
});

describe("swap_leak: swap used by a cgroup whose swap is disabled", () => {
  it.each([
    ["swap disabled, swap used", { cg_swap_current: 4096 }, { cgSwapMax: 0 }, true],
    ["swap disabled, none used", { cg_swap_current: 0 }, { cgSwapMax: 0 }, false],
    ["swap allowed", { cg_swap_current: 4096 }, { cgSwapMax: "max" as const }, false],
    ["host si alone is a neighbour's", { si: 500, cg_swap_current: 0 }, { cgSwapMax: 0 }, false],
  ] as const)("%s", (_name, over, facts, fires) => {
    expect(run([[over, facts]]).active[0]?.includes("swap_leak")).toBe(fires);
  });
  it("raised once and cleared once", () => {
    const leak = { cg_swap_current: 8192 };
    const { events } = run([[leak], [leak], [{ cg_swap_current: 0 }]], noClearDelay);
    expect(events.map((e) => `${e.kind} ${e.name}`)).toEqual(["raised swap_leak", "cleared swap_leak"]);
    expect(events[0]?.line).toBe("PAGE swap_leak: cg_swap_current=8192 swap_max=0 cgroup=/sys/fs/cgroup/infer");
  });
  it("the worker cgroup gone (a watch that outlives teardown): it clears, saying so, and is listed no more", () => {
    const gone: [Partial<Sample>, Partial<SampleFacts>] = [{ cg_swap_current: null }, { cgAbsent: true, cgDir: null, cgSwapMax: null, cgPsiExpected: false }];
    const { events, active } = run([[{ cg_swap_current: 8192 }], ...Array.from({ length: 10 }, () => gone)]);
    expect(events.map((e) => e.line)).toEqual(["PAGE swap_leak: cg_swap_current=8192 swap_max=0 cgroup=/sys/fs/cgroup/infer", "CLEAR swap_leak after 6.0s: worker cgroup gone"]);
    expect(active.at(-1)).toEqual([]);
  });
  it("the cgroup there with its swap files unreadable: it holds", () => {
    const blind: [Partial<Sample>, Partial<SampleFacts>] = [{ cg_swap_current: null }, { cgSwapMax: null }];
    const { events, active } = run([[{ cg_swap_current: 8192 }], ...Array.from({ length: 10 }, () => blind)]);
    expect(events.map((e) => e.kind)).toEqual(["raised"]);
    expect(active.every((a) => a.includes("swap_leak"))).toBe(true);
  });
});

describe("oom_kill: the cgroup's oom_kill count rose", () => {
  it("the first reading is a baseline; a rise pages once; it clears after the hold without new kills", () => {
    const config = { ...defaultAlarmConfig, oomKillHoldMs: 3000 };
    const { events, active } = run([[{ cg_oom_kill: 2 }], [{ cg_oom_kill: 3 }], [{ cg_oom_kill: 3 }], [{ cg_oom_kill: 4 }], [{ cg_oom_kill: 4 }], [{ cg_oom_kill: 4 }], [{ cg_oom_kill: 4 }], [{ cg_oom_kill: 4 }]], config);
    expect(events.map((e) => e.kind)).toEqual(["raised", "cleared"]);
    expect(events[0]?.line).toBe("PAGE oom_kill: cg_oom_kill=3 (+1) admission was already late cgroup=/sys/fs/cgroup/infer");
    // raised at 1 s, renewed at 3 s, cleared 3 s later
    expect(active.map((a) => a.includes("oom_kill"))).toEqual([false, true, true, true, true, true, false, false]);
  });
  it("a count that went back (cgroup recreated) is a new baseline, not a kill", () => {
    expect(run([[{ cg_oom_kill: 5 }], [{ cg_oom_kill: 0 }], [{ cg_oom_kill: 0 }]]).events).toEqual([]);
  });
  it("a recreated cgroup's count is all new kills, even below the old one", () => {
    expect(run([[{ cg_oom_kill: 5 }], [{ cg_oom_kill: 1 }]]).events.map((e) => e.line)).toEqual([
      "PAGE oom_kill: cg_oom_kill=1 (+1) admission was already late cgroup=/sys/fs/cgroup/infer",
    ]);
  });
  const absent: [Partial<Sample>, Partial<SampleFacts>] = [{ cg_oom_kill: null }, { cgAbsent: true, cgDir: null }];
  it("a cgroup that appears with kills already counted after watch saw it absent pages: a new cgroup counts from 0", () => {
    const { events } = run([absent, absent, [{ cg_oom_kill: 2 }], [{ cg_oom_kill: 2 }]]);
    expect(events.map((e) => e.line)).toEqual(["PAGE oom_kill: cg_oom_kill=2 (+2) admission was already late cgroup=/sys/fs/cgroup/infer"]);
  });
  it("a cgroup that went away and came back with kills pages, whatever its old count", () => {
    expect(run([[{ cg_oom_kill: 3 }], absent, [{ cg_oom_kill: 1 }]]).events.map((e) => e.kind)).toEqual(["raised"]);
    expect(run([[{ cg_oom_kill: 3 }], absent, [{ cg_oom_kill: 0 }]]).events).toEqual([]);
  });
  it("a count there on watch's very first sample is a baseline, not a kill", () => {
    expect(run([[{ cg_oom_kill: 7 }], [{ cg_oom_kill: 7 }]]).events).toEqual([]);
  });
  it("an unreadable count does not page", () => {
    expect(run([[{ cg_oom_kill: 1 }], [{ cg_oom_kill: null }], [{ cg_oom_kill: 1 }]]).events).toEqual([]);
  });
  it("an unreadable count (cgroup there) is not calm: the alarm holds past its hold, and clears on the next readable count", () => {
    const unreadable = Array.from({ length: 70 }, (): [Partial<Sample>] => [{ cg_oom_kill: null }]);
    const { events, active } = run([[{ cg_oom_kill: 0 }], [{ cg_oom_kill: 1 }], ...unreadable, [{ cg_oom_kill: 1 }]]);
    expect(events.map((e) => e.line)).toEqual([
      "PAGE oom_kill: cg_oom_kill=1 (+1) admission was already late cgroup=/sys/fs/cgroup/infer",
      "CLEAR oom_kill after 71s: no new kill for 60s (cg_oom_kill=1)",
    ]);
    expect(active.map((a) => a.includes("oom_kill"))).toEqual([false, ...Array<boolean>(71).fill(true), false]);
  });
  it("a kill while the count turns unreadable still pages for its hold", () => {
    const config = { ...defaultAlarmConfig, oomKillHoldMs: 3000 };
    const { active } = run([[{ cg_oom_kill: 0 }], [{ cg_oom_kill: 1 }], [{ cg_oom_kill: null }], [{ cg_oom_kill: null }]], config);
    expect(active.map((a) => a.includes("oom_kill"))).toEqual([false, true, true, true]);
  });
  it("the worker cgroup gone: the alarm clears when its hold ends, saying so (not 'no new kill' with n/a)", () => {
    const gone = Array.from({ length: 61 }, () => absent);
    const { events, active } = run([[{ cg_oom_kill: 0 }], [{ cg_oom_kill: 1 }], ...gone]);
    expect(events.map((e) => e.line)).toEqual([
      "PAGE oom_kill: cg_oom_kill=1 (+1) admission was already late cgroup=/sys/fs/cgroup/infer",
      "CLEAR oom_kill after 60s: worker cgroup gone",
    ]);
    expect(active.at(-1)).toEqual([]);
  });
});
