import { describe, expect, it } from "vitest";
import { parseProcStatCpu } from "../../src/host/cpu.js";
import { fail, ok } from "../../src/host/kernelFile.js";
import { parsePsi } from "../../src/host/psi.js";
import { parseVmstat } from "../../src/host/vmstat.js";
import { percentile } from "../../src/util/stats.js";
import { nextSample, type CgroupRaw, type QueueRaw, type RawReadings, type Sample, type SamplerState } from "../../src/sampler/step.js";

const NOW = 1_764_480_000_000;

const psi = (avg10: number, total: number, full = true) =>
  parsePsi(
    `some avg10=${avg10.toFixed(2)} avg60=0.00 avg300=0.00 total=${total}\n` +
      (full ? `full avg10=${(avg10 / 2).toFixed(2)} avg60=0.00 avg300=0.00 total=${Math.floor(total / 2)}\n` : ""),
    "/proc/pressure/memory",
  );
const vmstat = (pswpin: number, pswpout: number, refaultAnon: number, refaultFile: number) =>
  parseVmstat(`nr_free_pages 1000\npswpin ${pswpin}\npswpout ${pswpout}\nworkingset_refault_anon ${refaultAnon}\nworkingset_refault_file ${refaultFile}\n`, "/proc/vmstat");
// user nice system idle iowait irq softirq steal
const cpu = (idle: number, iowait: number, busy: number) => parseProcStatCpu(`cpu  ${busy} 0 0 ${idle} ${iowait} 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n`, "/proc/stat");

function cgroup(over: Partial<CgroupRaw> = {}): CgroupRaw {
  return {
    dir: "/sys/fs/cgroup/infer",
    pressure: parsePsi("some avg10=1.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "/sys/fs/cgroup/infer/memory.pressure"),
    hasPressure: true,
    pressureFile: "/sys/fs/cgroup/infer/memory.pressure",
    current: ok(1_000_000),
    max: ok(2_147_483_648),
    peak: ok(1_500_000),
    oomKill: ok(0),
    swapCurrent: ok(0),
    swapMax: ok(0),
    ...over,
  };
}

function job(fields: Record<string, unknown>): Buffer {
  return Buffer.from(
    JSON.stringify({ id: "7", prompt_tokens: 24000, completion_tokens: 256, files: 8, enqueue_ts: NOW - 180, deadline_ms: 8000, attempt: 0, host_class: "shared-free", ...fields }),
  );
}

/** Lists read whole unless `over` says otherwise. */
function queue(over: Partial<QueueRaw> = {}): QueueRaw {
  const admitted = over.admitted ?? [];
  const queueLen = over.queueLen ?? 0;
  const scan = { readyLen: queueLen, readyScanned: queueLen, admittedLen: admitted.length, admittedScanned: admitted.length };
  return { source: "redis://127.0.0.1:6400", queue: "jobs", queueLen, head: null, admitted, working: [], workingScanned: true, retryCandidates: [], stats: {}, mode: null, wrongTyped: [], scan, ...over };
}

function raw(monoMs: number, over: Partial<RawReadings> = {}): RawReadings {
  return {
    monoMs,
    hostPsi: psi(1, 0),
    vmstat: vmstat(0, 0, 0, 0),
    cpu: cpu(Math.round(monoMs / 10), 0, Math.round(monoMs / 10)), // ticks advance with time
    cgroup: ok(cgroup()),
    queue: ok(queue()),
    files: { hostPsi: "/proc/pressure/memory", vmstat: "/proc/vmstat", cpu: "/proc/stat" },
    ...over,
  };
}

/** Two readings: returns the second sample. */
function pair(first: RawReadings, second: RawReadings, nowMs = NOW): Sample {
  const a = nextSample(null, first, nowMs - (second.monoMs - first.monoMs));
  return nextSample(a.state, second, nowMs).sample;
}

const missingFields = (s: Sample) => s.missing.map((m) => m.field);
const reasonOf = (s: Sample, field: string) => s.missing.find((m) => m.field === field)?.reason;

describe("nextSample: first sample", () => {
  const { sample } = nextSample(null, raw(0, { hostPsi: psi(12.4, 5_000_000), cgroup: ok(cgroup({ current: ok(123) })) }), NOW);
  it.each(["si", "so", "refault_rate", "psi_mem_some_rate", "cg_psi_mem_some_rate", "cpu_idle_pct", "cpu_iowait_pct", "stall_ms_p99"] as const)(
    "%s is null with reason 'first sample'",
    (field) => {
      expect(sample[field]).toBeNull();
      expect(reasonOf(sample, field)).toBe("first sample");
    },
  );
  it("levels are read as they are", () => {
    expect(sample).toMatchObject({ ts: new Date(NOW).toISOString(), psi_mem_some_avg10: 12.4, psi_mem_full_avg10: 6.2, psi_mem_some_total_us: 5_000_000, cg_mem_current: 123, cg_oom_kill: 0 });
  });
});

describe("nextSample: rates from counter deltas", () => {
  it.each([
    // name, first, second, field, expected
    ["si pages/s from pswpin", raw(0, { vmstat: vmstat(100, 0, 0, 0) }), raw(2000, { vmstat: vmstat(300, 0, 0, 0) }), "si", 100],
    ["so pages/s from pswpout", raw(0, { vmstat: vmstat(0, 10, 0, 0) }), raw(500, { vmstat: vmstat(0, 15, 0, 0) }), "so", 10],
    ["refault_rate from anon + file", raw(0, { vmstat: vmstat(0, 0, 100, 900) }), raw(1000, { vmstat: vmstat(0, 0, 150, 1250) }), "refault_rate", 400],
    ["psi_mem_some_rate: stall % of the interval", raw(0, { hostPsi: psi(1, 1_000_000) }), raw(1000, { hostPsi: psi(1, 1_300_000) }), "psi_mem_some_rate", 30],
    ["psi rate capped at 100 %", raw(0, { hostPsi: psi(1, 0) }), raw(1000, { hostPsi: psi(1, 5_000_000) }), "psi_mem_some_rate", 100],
    [
      "cg_psi_mem_some_rate from the cgroup's total",
      raw(0, { cgroup: ok(cgroup({ pressure: psi(1, 2_000_000) })) }),
      raw(2000, { cgroup: ok(cgroup({ pressure: psi(1, 2_250_000) })) }),
      "cg_psi_mem_some_rate",
      12.5,
    ],
    ["cpu_idle_pct: idle only", raw(0, { cpu: cpu(100, 100, 100) }), raw(1000, { cpu: cpu(141, 110, 149) }), "cpu_idle_pct", 41],
    ["cpu_iowait_pct apart", raw(0, { cpu: cpu(100, 100, 100) }), raw(1000, { cpu: cpu(141, 110, 149) }), "cpu_iowait_pct", 10],
    ["stall_ms_p99 from the cgroup's total (ms per s)", raw(0, { cgroup: ok(cgroup({ pressure: psi(1, 0) })) }), raw(1000, { cgroup: ok(cgroup({ pressure: psi(1, 180_000) })) }), "stall_ms_p99", 180],
  ] as const)("%s", (_name, first, second, field, expected) => {
    const sample = pair(first, second);
    expect(sample[field]).toBe(expected);
    expect(missingFields(sample)).not.toContain(field);
  });

  it("stall_ms_p99 falls back to host PSI when the worker cgroup has none", () => {
    const noCg = fail("/sys/fs/cgroup/memory/infer", "worker cgroup does not exist");
    const sample = pair(raw(0, { hostPsi: psi(1, 0), cgroup: noCg }), raw(1000, { hostPsi: psi(1, 250_000), cgroup: noCg }));
    expect(sample.stall_ms_p99).toBe(250);
  });

  it("uses the monotonic clock for elapsed time, not the wall clock", () => {
    const a = nextSample(null, raw(0, { vmstat: vmstat(0, 0, 0, 0) }), NOW);
    // Wall clock jumped back an hour; monotonic says 1 s passed.
    const b = nextSample(a.state, raw(1000, { vmstat: vmstat(50, 0, 0, 0) }), NOW - 3_600_000);
    expect(b.sample.si).toBe(50);
  });
});

describe("nextSample: counter reset → null + missing", () => {
  it.each([
    ["si", raw(0, { vmstat: vmstat(500, 0, 0, 0) }), raw(1000, { vmstat: vmstat(10, 0, 0, 0) })],
    ["psi_mem_some_rate", raw(0, { hostPsi: psi(1, 9_000_000) }), raw(1000, { hostPsi: psi(1, 100) })],
    ["cg_psi_mem_some_rate", raw(0, { cgroup: ok(cgroup({ pressure: psi(1, 9_000_000) })) }), raw(1000, { cgroup: ok(cgroup({ pressure: psi(1, 5) })) })],
  ] as const)("%s", (field, first, second) => {
    const sample = pair(first, second);
    expect(sample[field]).toBeNull();
    expect(reasonOf(sample, field)).toMatch(/^counter reset/);
  });

  it("cpu counters going back: null, never 0", () => {
    const sample = pair(raw(0, { cpu: cpu(500, 10, 500) }), raw(1000, { cpu: cpu(100, 10, 100) }));
    expect(sample.cpu_idle_pct).toBeNull();
    expect(missingFields(sample)).toContain("cpu_idle_pct");
  });

  it("a recreated cgroup restarts the stall window", () => {
    let state: SamplerState | null = null;
    const totals = [0, 400_000, 800_000, 10]; // 400 ms/s twice, then reset
    let sample: Sample | null = null;
    totals.forEach((total, i) => {
      const step = nextSample(state, raw(i * 1000, { cgroup: ok(cgroup({ pressure: psi(1, total) })) }), NOW + i * 1000);
      state = step.state;
      sample = step.sample;
    });
    expect(sample!.stall_ms_p99).toBeNull();
    expect(state!.stall.points).toEqual([]);
  });
});

describe("nextSample: unreadable → null + missing, never 0", () => {
  const cases: Array<[string, Partial<RawReadings>, string[], string]> = [
    ["host PSI", { hostPsi: fail("/proc/pressure/memory", "missing") }, ["psi_mem_some_avg10", "psi_mem_full_avg10", "psi_mem_some_total_us", "psi_mem_some_rate"], "/proc/pressure/memory"],
    ["vmstat", { vmstat: fail("/proc/vmstat", "unreadable (EACCES)") }, ["si", "so", "refault_rate"], "/proc/vmstat"],
    ["/proc/stat", { cpu: fail("/proc/stat", "no aggregate cpu line") }, ["cpu_idle_pct", "cpu_iowait_pct"], "/proc/stat"],
    [
      "no worker cgroup",
      { cgroup: fail("/sys/fs/cgroup/infer", "worker cgroup does not exist") },
      ["cg_psi_mem_some_avg10", "cg_psi_mem_some_rate", "cg_swap_current", "cg_mem_current", "cg_mem_max", "cg_mem_peak", "cg_oom_kill"],
      "/sys/fs/cgroup/infer",
    ],
    ["one cgroup file", { cgroup: ok(cgroup({ peak: fail("/sys/fs/cgroup/infer/memory.peak", "missing") })) }, ["cg_mem_peak"], "/sys/fs/cgroup/infer/memory.peak"],
    [
      "legacy v1 has no cgroup PSI",
      { cgroup: ok(cgroup({ pressure: fail("/sys/fs/cgroup/memory/infer/memory.pressure", "legacy cgroup v1 has no per-cgroup PSI"), hasPressure: false })) },
      ["cg_psi_mem_some_avg10", "cg_psi_mem_some_rate"],
      "/sys/fs/cgroup/memory/infer/memory.pressure",
    ],
    [
      "Redis unreachable",
      { queue: fail("redis://127.0.0.1:6400", "not connected (reconnecting)") },
      ["queue_len", "queue_age_ms", "queue_head_slack_ms", "deadline_slack_ms", "tokens_out", "retry_count", "admitted", "rejected", "gate_mode"],
      "redis://127.0.0.1:6400",
    ],
  ];
  it.each(cases)("%s", (_name, broken, fields, file) => {
    const sample = pair(raw(0, broken), raw(1000, broken));
    for (const field of fields) {
      expect(sample[field as keyof Sample], field).toBeNull();
      expect(sample.missing.find((m) => m.field === field)?.file, field).toBe(file);
    }
    // Everything else still sampled.
    expect(sample.missing.map((m) => m.field).sort()).toEqual([...fields].sort());
  });

  it("a PSI file without a full line: full is missing, some is fine", () => {
    const sample = nextSample(null, raw(0, { hostPsi: psi(3, 100, false) }), NOW).sample;
    expect(sample.psi_mem_some_avg10).toBe(3);
    expect(sample.psi_mem_full_avg10).toBeNull();
    expect(reasonOf(sample, "psi_mem_full_avg10")).toMatch(/no full line/);
  });
});

describe("nextSample: what the alarms learn about the worker cgroup", () => {
  const pressureFile = "/sys/fs/cgroup/infer/memory.pressure";
  it.each([
    ["there, PSI read", ok(cgroup()), { cgAbsent: false, cgPsiExpected: true }],
    ["not there", fail("/sys/fs/cgroup/infer", "worker cgroup does not exist"), { cgAbsent: true, cgPsiExpected: false }],
    ["there, PSI unreadable", ok(cgroup({ pressure: fail(pressureFile, "unreadable (EACCES)") })), { cgAbsent: false, cgPsiExpected: true }],
    ["there, no PSI file (hybrid twin nobody created)", ok(cgroup({ pressure: fail(pressureFile, "missing") })), { cgAbsent: false, cgPsiExpected: false }],
    ["legacy v1", ok(cgroup({ pressure: fail(pressureFile, "legacy cgroup v1 has no per-cgroup PSI"), hasPressure: false })), { cgAbsent: false, cgPsiExpected: false }],
  ] as const)("%s", (_name, reading, expected) => {
    expect(nextSample(null, raw(0, { cgroup: reading }), NOW).facts).toMatchObject(expected);
  });
});

describe("nextSample: stall_ms_p99 over the last 60 s", () => {
  it("a burst counts for 60 s, then leaves the window", () => {
    let state: SamplerState | null = null;
    let total = 0;
    const p99At: number[] = [];
    for (let i = 0; i <= 62; i++) {
      if (i === 1) total += 900_000; // 900 ms stalled in second 1
      else if (i > 1) total += 10_000; // 10 ms/s afterwards
      const step = nextSample(state, raw(i * 1000, { cgroup: ok(cgroup({ pressure: psi(1, total) })) }), NOW + i * 1000);
      state = step.state;
      p99At[i] = step.sample.stall_ms_p99 ?? -1;
    }
    expect(p99At[1]).toBe(900);
    expect(p99At[60]).toBe(900); // the burst at t=1 s is 59 s old
    expect(p99At[61]).toBe(10); // 60 s old: out
    expect(state!.stall.points.length).toBe(60);
  });

  it.each([
    [[], null],
    [[5], 5],
    [Array.from({ length: 100 }, (_, i) => i + 1), 99],
    [Array.from({ length: 200 }, (_, i) => i + 1), 198],
  ])("p99 nearest rank (%#)", (values, expected) => {
    expect(percentile(values, 99)).toBe(expected);
  });
});

describe("nextSample: queue fields", () => {
  it("age and head slack from the oldest job; empty queue has age 0 and no head slack", () => {
    const withHead = nextSample(null, raw(0, { queue: ok(queue({ queueLen: 3, head: job({ enqueue_ts: NOW - 180, deadline_ms: 8000 }) })) }), NOW).sample;
    expect(withHead).toMatchObject({ queue_len: 3, queue_age_ms: 180, queue_head_slack_ms: 7820 });
    const empty = nextSample(null, raw(0), NOW).sample;
    expect(empty).toMatchObject({ queue_len: 0, queue_age_ms: 0, queue_head_slack_ms: null, deadline_slack_ms: null });
    expect(missingFields(empty)).not.toContain("queue_age_ms");
  });

  it("deadline_slack_ms: the smallest over admitted and held jobs still waiting for a first token", () => {
    const q = queue({
      admitted: [job({ id: "a", enqueue_ts: NOW - 1000, deadline_ms: 8000 }), job({ id: "b", enqueue_ts: NOW - 8230, deadline_ms: 8000 })],
      working: [
        job({ id: "c", enqueue_ts: NOW - 9000, deadline_ms: 8000, first_token_ts: NOW - 5000 }), // already served its first token
        job({ id: "d", enqueue_ts: NOW - 7000, deadline_ms: 8000 }),
      ],
    });
    expect(nextSample(null, raw(0, { queue: ok(q) }), NOW).sample.deadline_slack_ms).toBe(-230);
  });

  it("counters from jobs:stats; absent counters are 0 (never incremented); rejected by reason", () => {
    const q = queue({ stats: { tokens_out: "1234", admitted: "5", reject_host_pressure: "3", reject_deadline_slack: "1", jobs_done: "4" } });
    const sample = nextSample(null, raw(0, { queue: ok(q) }), NOW).sample;
    expect(sample).toMatchObject({ tokens_out: 1234, retry_count: 0, admitted: 5, rejected: { reject_deadline_slack: 1, reject_host_pressure: 3 } });
  });

  // QA: a stats value of 400 digits (HSET by hand) read as Infinity: `tokens_out=Infinity` piped, a JSON null with no missing entry.
  it("a stats counter past what a count can be is null + missing, never Infinity", () => {
    const huge = "9".repeat(400);
    const q = queue({ stats: { tokens_out: huge, reject_host_pressure: huge, reject_deadline_slack: "1" } });
    const sample = nextSample(null, raw(0, { queue: ok(q) }), NOW).sample;
    expect(sample.tokens_out).toBeNull();
    expect(reasonOf(sample, "tokens_out")).toMatch(/tokens_out is not a count/);
    expect(sample.rejected).toEqual({ reject_deadline_slack: 1 });
  });

  it("an undecodable head: age null + missing, the rest still read", () => {
    const q = queue({ queueLen: 1, head: Buffer.from([0xff, 0xfe]) });
    const sample = nextSample(null, raw(0, { queue: ok(q) }), NOW).sample;
    expect(sample.queue_len).toBe(1);
    expect(sample.queue_age_ms).toBeNull();
    expect(reasonOf(sample, "queue_age_ms")).toMatch(/invalid_utf8/);
    // QA: the entry named "redis://… mode", a place no redis-cli command reads; it names the key.
    expect(sample.missing.find((m) => m.field === "queue_age_ms")?.file).toBe("redis://127.0.0.1:6400 LINDEX jobs 0");
  });

  // QA 6: after `gate mode reject_all` neither the TTY view nor the JSON sample said so.
  it.each([
    [null, "admit"],
    ["admit", "admit"],
    ["reject_all", "reject_all"],
  ] as const)("gate_mode from <q>:mode %j, as the gate reads it: %s", (mode, expected) => {
    const sample = nextSample(null, raw(0, { queue: ok(queue({ mode })) }), NOW).sample;
    expect(sample.gate_mode).toBe(expected);
    expect(missingFields(sample)).not.toContain("gate_mode");
  });

  // The gate's words for a lever that is not a mode (modeValueField): mode_value=…, mode_type=….
  it.each([
    ["reject-all", "mode_value=reject-all"],
    ["(a hash)", "mode_type=hash"],
    ["", 'mode_value=""'],
  ])("a <q>:mode that is not a mode (%j): gate_mode null + missing, saying the gate fails closed and what is there", (mode, held) => {
    const sample = nextSample(null, raw(0, { queue: ok(queue({ mode })) }), NOW).sample;
    expect(sample.gate_mode).toBeNull();
    expect(reasonOf(sample, "gate_mode")).toBe(`the gate reads it as reject_all (fail closed): ${held}`);
    expect(sample.missing.find((m) => m.field === "gate_mode")?.file).toBe("redis://127.0.0.1:6400 jobs:mode");
  });

  // QA: `jobs` a string (or jobs:stats a list) made watch call Redis unreachable and null every queue field.
  it.each([
    ["ready", "jobs is a string, not a list", ["queue_len", "queue_age_ms", "queue_head_slack_ms"]],
    ["stats", "jobs:stats is a list, not a hash", ["tokens_out", "retry_count", "admitted", "rejected"]],
    ["admitted", "jobs:admitted is a hash, not a list", ["deadline_slack_ms"]],
    ["events", "jobs:events is a string, not a stream", []],
    // QA: a worker's list of another type was skipped in silence; its jobs are not counted, so the smallest slack is not known.
    ["working", "jobs:working:w1 is a string, not a list", ["deadline_slack_ms"]],
  ] as const)("a wrong-typed %s key: only its fields are null, in missing naming the key; the rest still read", (role, reason, fields) => {
    const key = reason.split(" ")[0]!;
    const q = queue({
      queueLen: 2,
      head: job({ enqueue_ts: NOW - 180, deadline_ms: 8000 }),
      admitted: [job({ id: "a", enqueue_ts: NOW - 1000, deadline_ms: 8000 })],
      stats: { tokens_out: "1234", admitted: "5", reject_host_pressure: "3" },
      mode: "reject_all",
      wrongTyped: [{ role, key, reason: `${reason} (drill never writes that there)` }],
    });
    const sample = nextSample(null, raw(0, { queue: ok(q) }), NOW).sample;
    const all = { queue_len: 2, queue_age_ms: 180, queue_head_slack_ms: 7820, deadline_slack_ms: 7000, tokens_out: 1234, retry_count: 0, admitted: 5, rejected: { reject_host_pressure: 3 }, gate_mode: "reject_all" };
    const expected: Record<string, unknown> = { ...all };
    for (const field of fields) expected[field] = null;
    expect(sample).toMatchObject(expected);
    const queueMissing = sample.missing.filter((m) => m.field in all);
    // QA: the entry named the Redis only; it names the key, as the other queue entries do.
    expect(queueMissing).toEqual(fields.map((field) => ({ field, file: `redis://127.0.0.1:6400 ${key}`, reason: `redis key ${reason} (drill never writes that there)` })));
  });

  it("a wrong-typed worker registry nulls deadline_slack_ms only when the working lists come from it", () => {
    const wrongTyped = [{ role: "workers" as const, key: "jobs:workers", reason: "jobs:workers is a string, not a hash (drill never writes that there)" }];
    const admitted = [job({ id: "a", enqueue_ts: NOW - 1000, deadline_ms: 8000 })];
    expect(nextSample(null, raw(0, { queue: ok(queue({ admitted, wrongTyped, workingScanned: true })) }), NOW).sample.deadline_slack_ms).toBe(7000);
    const registry = nextSample(null, raw(0, { queue: ok(queue({ admitted, wrongTyped, workingScanned: false })) }), NOW).sample;
    expect(registry.deadline_slack_ms).toBeNull();
    expect(reasonOf(registry, "deadline_slack_ms")).toBe("redis key jobs:workers is a string, not a hash (drill never writes that there)");
  });

  it("retried jobs are passed to the alarms", () => {
    const q = queue({ retryCandidates: [job({ id: "9", attempt: 1 }), job({ id: "10", attempt: 0 })] });
    const { facts } = nextSample(null, raw(0, { queue: ok(q) }), NOW);
    expect(facts.retriedJobs).toEqual([{ id: "9", attempt: 1, host_class: "shared-free" }]);
    expect(facts.retriedJobsPartial).toBe(false);
  });

  // QA (scale): past SAMPLE_LIST_SCAN_CAP admitted jobs the sample read the oldest 2000 only and printed
  // deadline_slack_ms=3478592 with missing [] while a job further back had 594 354 ms left.
  it("an admitted list read only in part: deadline_slack_ms null + missing saying how much was read, never the slack of the part", () => {
    const admitted = [job({ id: "a", enqueue_ts: NOW - 1000, deadline_ms: 3_600_000 })];
    const working = [job({ id: "w", enqueue_ts: NOW - 1000, deadline_ms: 8000 })];
    const scan = { readyLen: 0, readyScanned: 0, admittedLen: 9893, admittedScanned: 2000 };
    const { sample, facts } = nextSample(null, raw(0, { queue: ok(queue({ admitted, working, scan })) }), NOW);
    expect(sample.deadline_slack_ms).toBeNull();
    expect(sample.missing.filter((m) => m.field === "deadline_slack_ms")).toEqual([
      { field: "deadline_slack_ms", file: "redis://127.0.0.1:6400 jobs:admitted", reason: "read the oldest 2000 of 9893 admitted jobs (a sample reads at most 2000): a smaller slack further back is not seen" },
    ]);
    // A retried job further back is not seen either: none found is not none there.
    expect(facts.retriedJobsPartial).toBe(true);
    const readyCut = nextSample(null, raw(0, { queue: ok(queue({ admitted, scan: { readyLen: 50_000, readyScanned: 2000, admittedLen: 1, admittedScanned: 1 } })) }), NOW);
    expect(readyCut.sample.deadline_slack_ms).toBe(3_599_000); // the admitted list was read whole
    expect(readyCut.facts.retriedJobsPartial).toBe(true);
  });
});
