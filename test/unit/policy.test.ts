import { describe, expect, it } from "vitest";
import {
  decideAdmission,
  defaultAdmissionConfig,
  formatDecisionLine,
  initialPressureState,
  leverAction,
  nextPressureState,
  type AdmissionDecision,
  type AdmissionSignals,
  type PressureReadings,
} from "../../src/gate/policy.js";

const NOW = 1_764_480_010_000;
const config = { ...defaultAdmissionConfig, intervalMs: 1000 };
const job = { id: "7", prompt_tokens: 24000, enqueue_ts: NOW - 100, deadline_ms: 8000 };

function signals(overrides: Partial<AdmissionSignals> = {}): AdmissionSignals {
  return {
    mode: "admit",
    psiSomeAvg10: 0.4,
    stallRatePct: 0,
    cgPsiSomeAvg10: null,
    cgStallRatePct: null,
    cgSwapLeak: false,
    psiAgeMs: 200,
    psiMissingReason: null,
    stallMsP99: null,
    inflightTokens: 0,
    pressure: initialPressureState,
    ...overrides,
  };
}

describe("decideAdmission: the seed's order", () => {
  const table: { name: string; signals: Partial<AdmissionSignals>; job?: Partial<typeof job>; kind: AdmissionDecision["kind"]; line: string }[] = [
    { name: "calm host, nothing in flight", signals: {}, kind: "admit", line: "admit job=7 packed=24000 limit=32000" },
    { name: "one 24000 job in flight", signals: { inflightTokens: 24000 }, kind: "reject_packed_tokens", line: "reject_packed_tokens job=7 packed=48000 limit=32000" },
    { name: "exactly at the cap is admitted", signals: { inflightTokens: 8000 }, kind: "admit", line: "admit job=7 packed=32000 limit=32000" },
    { name: "the runbook's 36012", signals: { inflightTokens: 12012 }, kind: "reject_packed_tokens", line: "reject_packed_tokens job=7 packed=36012 limit=32000" },
    { name: "psi over the limit", signals: { psiSomeAvg10: 12.4 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=12.40" },
    { name: "psi exactly 10.00 is not over", signals: { psiSomeAvg10: 10 }, kind: "admit", line: "admit job=7 packed=24000 limit=32000" },
    { name: "fast stall rate while avg10 lags", signals: { psiSomeAvg10: 6.5, stallRatePct: 14.2 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=6.50 stall_rate=14.20" },
    { name: "worker cgroup psi", signals: { cgPsiSomeAvg10: 15 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=0.40 cg_psi=15.00" },
    { name: "worker cgroup stall rate", signals: { cgStallRatePct: 30 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=0.40 cg_stall_rate=30.00" },
    { name: "swap used with swap disabled", signals: { cgSwapLeak: true }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=0.40 swap_leak=1" },
    { name: "psi missing fails closed", signals: { psiSomeAvg10: null, psiAgeMs: null }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=missing" },
    { name: "psi older than 2 intervals", signals: { psiAgeMs: 2500 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=missing stale_ms=2500" },
    { name: "psi 2 intervals old is still fresh", signals: { psiAgeMs: 2000 }, kind: "admit", line: "admit job=7 packed=24000 limit=32000" },
    { name: "reject_all first", signals: { mode: "reject_all", psiSomeAvg10: 0.4 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=0.40 mode=reject_all" },
    { name: "reject_all beats missing psi", signals: { mode: "reject_all", psiSomeAvg10: null }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=missing mode=reject_all" },
    { name: "slack under 1500", signals: {}, job: { enqueue_ts: NOW - 7580 }, kind: "reject_deadline_slack", line: "reject_deadline_slack job=7 slack_ms=420" },
    { name: "deadline already past: negative slack, not malformed", signals: {}, job: { enqueue_ts: NOW - 8230 }, kind: "reject_deadline_slack", line: "reject_deadline_slack job=7 slack_ms=-230" },
    { name: "slack under stall p99 + 500", signals: { stallMsP99: 3000 }, job: { enqueue_ts: NOW - 5000 }, kind: "reject_deadline_slack", line: "reject_deadline_slack job=7 slack_ms=3000 stall_ms_p99=3000" },
    { name: "pressure before slack", signals: { psiSomeAvg10: 12.4 }, job: { enqueue_ts: NOW - 7580 }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=12.40" },
    { name: "slack before packed tokens", signals: { inflightTokens: 24000 }, job: { enqueue_ts: NOW - 7580 }, kind: "reject_deadline_slack", line: "reject_deadline_slack job=7 slack_ms=420" },
    { name: "tripped pressure holds below the limit", signals: { psiSomeAvg10: 4, pressure: { tripped: true, calmSinceMs: NOW - 1000 } }, kind: "reject_host_pressure", line: "reject_host_pressure job=7 psi=4.00 hysteresis=1" },
    { name: "in-flight unknown: admit candidate, Lua decides", signals: { inflightTokens: null }, kind: "admit", line: "admit job=7 packed=unknown limit=32000" },
  ];
  for (const row of table) {
    it(row.name, () => {
      const decision = decideAdmission({ ...job, ...row.job }, signals(row.signals), config, NOW);
      expect(decision.kind).toBe(row.kind);
      expect(formatDecisionLine(decision, { id: "7" })).toBe(row.line);
    });
  }

  it("formats the runbook lines exactly", () => {
    expect(formatDecisionLine({ kind: "reject_host_pressure", psi: 12.4, trigger: "psi_avg10", figure: null }, { id: "8" })).toBe("reject_host_pressure job=8 psi=12.40");
    expect(formatDecisionLine({ kind: "reject_deadline_slack", slackMs: 420, limitMs: 1500, stallMsP99: null }, { id: "9" })).toBe("reject_deadline_slack job=9 slack_ms=420");
    expect(formatDecisionLine({ kind: "reject_host_pressure", psi: "missing", trigger: "psi_missing", figure: null }, { id: "10" })).toBe("reject_host_pressure job=10 psi=missing");
    expect(formatDecisionLine({ kind: "reject_host_pressure", psi: 0.4, trigger: "reject_all", figure: null }, { id: "11" })).toBe("reject_host_pressure job=11 psi=0.40 mode=reject_all");
    expect(formatDecisionLine({ kind: "reject_packed_tokens", packed: 36012, limit: 32000 }, { id: "7", attempt: 2 })).toBe("reject_packed_tokens job=7 packed=36012 limit=32000 attempt=2");
  });
});

describe("nextPressureState: trips at once, clears after 5 s below half", () => {
  const calm: PressureReadings = { psiSomeAvg10: 1, stallRatePct: 1, cgPsiSomeAvg10: null, cgStallRatePct: null, cgSwapLeak: false };
  const hot: PressureReadings = { ...calm, psiSomeAvg10: 12.4 };
  const between: PressureReadings = { ...calm, psiSomeAvg10: 7 };

  it("walks through trip, hold, and clear", () => {
    const steps: [PressureReadings, number, boolean][] = [
      [calm, 0, false],
      [hot, 1000, true],
      [between, 2000, true], // below the limit, above half: still tripped
      [calm, 3000, true], // calm since 3000
      [calm, 7000, true], // 4 s calm
      [between, 7500, true], // calm broken: the 5 s start over
      [calm, 8000, true],
      [calm, 12_999, true],
      [calm, 13_000, false], // 5 s calm
      [between, 14_000, false], // untripped and under the limit: stays admitted
    ];
    let state = initialPressureState;
    for (const [readings, at, tripped] of steps) {
      state = nextPressureState(state, readings, config, at);
      expect({ at, tripped: state.tripped }).toEqual({ at, tripped });
    }
  });

  it("host PSI unreadable is not calm: the latch holds, and PSI 7 afterwards is still rejected", () => {
    const unread: PressureReadings = { ...calm, psiSomeAvg10: null, stallRatePct: null };
    let state = nextPressureState(initialPressureState, hot, config, 0);
    expect(state.tripped).toBe(true);
    // /proc/pressure/memory unreadable for 10 s, twice the clear time.
    for (let at = 1000; at <= 10_000; at += 1000) {
      state = nextPressureState(state, unread, config, at);
      expect({ at, tripped: state.tripped }).toEqual({ at, tripped: true });
    }
    expect(state.calmSinceMs).toBeNull(); // no calm time was seen
    state = nextPressureState(state, between, config, 11_000);
    expect(state.tripped).toBe(true);
    const decision = decideAdmission(job, signals({ psiSomeAvg10: 7, psiAgeMs: 0, pressure: state }), config, NOW);
    expect(formatDecisionLine(decision, job)).toBe("reject_host_pressure job=7 psi=7.00 hysteresis=1");
  });

  it("the calm clock starts when host PSI is read again, not before", () => {
    let state = nextPressureState(initialPressureState, hot, config, 0);
    state = nextPressureState(state, calm, config, 1000); // calm since 1000
    state = nextPressureState(state, { ...calm, psiSomeAvg10: null, stallRatePct: null }, config, 2000);
    state = nextPressureState(state, { ...calm, stallRatePct: null }, config, 3000); // PSI back, no rate yet
    state = nextPressureState(state, calm, config, 4000); // calm since 4000
    state = nextPressureState(state, calm, config, 8999);
    expect(state.tripped).toBe(true);
    state = nextPressureState(state, calm, config, 9000);
    expect(state.tripped).toBe(false);
  });

  it("an absent worker cgroup counts as calm: the latch still clears on host readings alone", () => {
    let state = nextPressureState(initialPressureState, hot, config, 0);
    state = nextPressureState(state, calm, config, 1000);
    state = nextPressureState(state, calm, config, 6000);
    expect(state).toEqual({ tripped: false, calmSinceMs: 1000 });
  });

  it("a fast stall rate trips it too, and so does a swap leak", () => {
    expect(nextPressureState(initialPressureState, { ...calm, stallRatePct: 11 }, config, 0).tripped).toBe(true);
    expect(nextPressureState(initialPressureState, { ...calm, cgSwapLeak: true }, config, 0).tripped).toBe(true);
  });
});

describe("gate mode lever (leverAction)", () => {
  it.each([
    ["admit under pressure from reject_all: refused", "admit", { calm: false, force: false, current: "reject_all" }, "refuse"],
    ["admit under pressure, lever already admit: said, not refused", "admit", { calm: false, force: false, current: "admit" }, "already_admit"],
    ["admit under pressure, lever never set (the gate admits): said, not refused", "admit", { calm: false, force: false, current: null }, "already_admit"],
    ["admit under pressure, --force: flipped", "admit", { calm: false, force: true, current: "reject_all" }, "flip"],
    ["admit when calm: flipped", "admit", { calm: true, force: false, current: "admit" }, "flip"],
    ["reject_all under pressure: flipped", "reject_all", { calm: false, force: false, current: "admit" }, "flip"],
  ] as const)("%s", (_n, mode, facts, expected) => {
    expect(leverAction(mode, facts)).toBe(expected);
  });
});
