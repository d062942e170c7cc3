import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { parseQueueSample } from "../../src/sampler/read.js";
import { glyphsFor } from "../../src/charset.js";
import { LiveView, formatSampleLine, formatStatusLine, sparkline } from "../../src/sampler/render.js";
import { partialAdmittedReason, type Sample } from "../../src/sampler/step.js";

const sample: Sample = {
  ts: "2025-11-30T04:12:00.000Z",
  queue_len: 123456,
  queue_age_ms: 180,
  queue_head_slack_ms: -1234567,
  deadline_slack_ms: -230,
  psi_mem_some_avg10: 12.4,
  psi_mem_full_avg10: 9.99,
  psi_mem_some_total_us: 99999999999,
  psi_mem_some_rate: 100,
  cg_psi_mem_some_avg10: 99.99,
  cg_psi_mem_some_rate: 100,
  si: 123456,
  so: 123456,
  cg_swap_current: 4096,
  refault_rate: 1234567,
  cg_mem_current: 2147483648,
  cg_mem_max: "max",
  cg_mem_peak: 2147483648,
  cg_oom_kill: 12345,
  cpu_idle_pct: 41.2,
  cpu_iowait_pct: 3,
  tokens_out: 123456789,
  retry_count: 12345,
  admitted: 1234567,
  rejected: { reject_host_pressure: 123456, reject_deadline_slack: 123456, reject_packed_tokens: 123456 },
  gate_mode: "admit",
  stall_ms_p99: 999.5,
  alarm: ["reclaim_not_underload", "retry_worker_idle", "swap_leak", "oom_kill"],
  missing: [{ field: "cg_psi_mem_some_rate", file: "/x", reason: "first sample" }],
};

describe("render", () => {
  it("every line of the live view fits 80 columns, even with wide values", () => {
    const view = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    for (let i = 0; i < 20; i++) view.frame({ ...sample, cg_mem_current: i * 1000 });
    for (const line of view.frame(sample)) expect([...line].length, line).toBeLessThanOrEqual(80);
  });

  // QA 10: at 80 columns the psi line was cut after "cg 18.00 rate 28.4…": the cgroup stall rate, the signal that trips the gate.
  const pressure: Sample = {
    ...sample,
    psi_mem_some_avg10: 100,
    psi_mem_full_avg10: 100,
    psi_mem_some_rate: 100,
    cg_psi_mem_some_avg10: 100,
    cg_psi_mem_some_rate: 100,
    stall_ms_p99: 1000,
    cg_mem_current: 1023 * 1024 * 1024,
    cg_mem_max: 1023 * 1024 * 1024,
    cg_mem_peak: 1023 * 1024 * 1024,
    cg_swap_current: 0,
    cg_oom_kill: 3,
    queue_len: 1234,
    queue_age_ms: 9999,
    queue_head_slack_ms: -9999,
    deadline_slack_ms: -9999,
    si: 99999,
    so: 99999,
    refault_rate: 99999,
    cpu_idle_pct: 100,
    cpu_iowait_pct: 100,
  };

  it("under pressure at 80 columns no value is cut: host and cgroup PSI each on one line, in full", () => {
    const view = new LiveView({ cgroup: "qaAsmoke (hybrid)", queue: "qaAjobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const lines = view.frame(pressure, { columns: 80, rows: 24 });
    for (const line of lines) {
      expect([...line].length, line).toBeLessThanOrEqual(80);
      expect(line, line).not.toContain("…");
    }
    expect(lines.find((l) => l.startsWith("psi host"))).toMatch(/^psi host some 100\.00 {2}full 100\.00 {2}rate 100\.0% +\S/);
    expect(lines.find((l) => l.startsWith("psi cg"))).toMatch(/^psi cg {3}some 100\.00 {2}rate 100\.0% {2}p99 stall 1000ms +\S/);
    const text = lines.join("\n");
    for (const value of ["1023MiB / 1023MiB", "peak 1023MiB", "oom_kill 3", "idle 100%", "iowait 100%", "si 99999/s", "so 99999/s", "refault 99999/s", "head slack -9999ms", "slack -9999ms"]) {
      expect(text).toContain(value);
    }
  });

  it("wider values than fit go on under their label, whole, never cut", () => {
    const view = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const lines = view.frame(sample, { columns: 80, rows: Infinity });
    expect(lines.join("\n")).not.toContain("…");
    expect(lines.join("\n")).toContain("packed_tokens=123456");
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(80);
  });

  it.each([
    [60, 12],
    [50, 10],
    [40, 8],
  ])("a %ix%i terminal: a layout that fits (no line wider, fewer lines than rows), the PSI figures kept whole", (columns, rows) => {
    const view = new LiveView({ cgroup: "qaAsmoke (hybrid)", queue: "qaAjobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const lines = view.frame(pressure, { columns, rows });
    expect(lines.length).toBeLessThan(rows);
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(columns);
    const text = lines.join("\n");
    expect(text).toContain("rate 100.0%");
    expect(text).not.toMatch(/rate 10?0?\.?0?…/);
    expect(text).toMatch(/^psi cg {3}some 100\.00 {2}rate 100\.0%/m);
    expect(text).toMatch(/^alarms/m);
    expect(text).not.toMatch(/[▁▂▃▄▅▆▇█]/);
  });

  it("a resize clears the screen and draws the last frame again at the new size, with the alarm lines that fit above it", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    expect(view.repaint({ columns: 60, rows: 12 })).toBe("");
    view.redraw(pressure, [{ name: "oom_kill", kind: "raised", line: "PAGE oom_kill" }], { columns: 80, rows: 24 });
    const out = view.repaint({ columns: 60, rows: 12 });
    expect(out.startsWith("\x1b[H\x1b[2J")).toBe(true);
    const lines = out.slice("\x1b[H\x1b[2J".length).trimEnd().split("\n");
    expect(lines.length).toBeLessThan(12);
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(60);
    // The next redraw moves back over the frame drawn at the new size, not the old one.
    const frameLines = view.layout(pressure, { columns: 60, rows: 12 }).length;
    expect(view.redraw(pressure, [], { columns: 60, rows: 12 }).startsWith(`\x1b[${frameLines}F\x1b[J`)).toBe(true);
  });

  // QA: a PAGE line wider than the terminal wrapped where the terminal chose, and a repaint counted it as one line.
  it("an alarm line wider than the terminal is wrapped at word breaks, every word kept; a repaint shows whole alarms only, within the height", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const page = "PAGE reclaim, not underload: cpu_idle=45% psi=6.57 slack_ms=-12887 queue_age_ms=0 via=cg_psi_mem_some_rate=21.82";
    const out = view.redraw(pressure, [{ name: "reclaim_not_underload", kind: "raised", line: page }], { columns: 60, rows: 40 });
    const all = out.split("\n");
    const alarm = all.slice(0, all.findIndex((l) => l.startsWith("drill watch")));
    expect(alarm.length).toBeGreaterThan(1);
    for (const line of alarm) expect(line.length, line).toBeLessThanOrEqual(60);
    expect(alarm[0]).toMatch(/^PAGE reclaim, not underload:/);
    expect(alarm[1]).toMatch(/^ {2}\S/);
    expect(alarm.join(" ").replace(/\s+/g, " ")).toBe(page);
    view.redraw(pressure, [{ name: "oom_kill", kind: "raised", line: "PAGE oom_kill" }], { columns: 60, rows: 40 });
    const frameLines = view.layout(pressure, { columns: 60, rows: 40 }).length;
    // Room for the one-line alarm and two lines more: the PAGE, on more, does not fit whole, so it is not shown in part.
    const repainted = view.repaint({ columns: 60, rows: frameLines + 3 }).slice("\x1b[H\x1b[2J".length).split("\n");
    expect(repainted[0]).toBe("PAGE oom_kill");
    expect(repainted.join("\n")).not.toContain("via=");
  });

  // QA: a short pane dropped a whole tier of rows at once (memory, host and jobs together), leaving lines blank.
  it("a short terminal loses one row at a time and uses every line it has; the memory row outlasts the host row", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    view.frame(pressure);
    const full = view.layout(pressure, { columns: 80, rows: Infinity }).length;
    for (const rows of [full, full - 1, full - 2]) expect(view.layout(pressure, { columns: 80, rows }).length, `rows ${rows}`).toBe(rows - 1);
    let rows = full;
    while (view.layout(pressure, { columns: 80, rows }).some((l) => l.startsWith("host "))) rows--;
    expect(view.layout(pressure, { columns: 80, rows }).some((l) => l.startsWith("memory "))).toBe(true);
  });

  // QA: once the cgroup was gone (its limit null), the trend scaled to its own small readings and drew them full height.
  it("the memory trend keeps the last limit read as its scale when the cgroup goes", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    for (let i = 0; i < 4; i++) view.frame({ ...sample, cg_mem_current: 126_976, cg_mem_max: 128 * 1024 * 1024 }, { columns: 80, rows: Infinity });
    const gone = view.frame({ ...sample, cg_mem_current: null, cg_mem_max: null }, { columns: 80, rows: Infinity });
    const memory = gone.find((l) => l.startsWith("memory"))!;
    expect(memory).toContain("▁▁▁▁");
    expect(memory).not.toMatch(/[▂▃▄▅▆▇█]/);
  });

  it("erase: the frame goes, and the next redraw does not move back over lines printed in between", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const first = view.redraw(sample, []);
    expect(view.erase()).toBe(`\x1b[${first.trimEnd().split("\n").length}F\x1b[J`);
    expect(view.redraw(sample, [])).not.toContain("\x1b[");
  });

  it("before the first sample a line says when it comes; the first frame draws over it", () => {
    const view = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const waiting = view.waiting({ columns: 80, rows: 24 });
    expect(waiting).toBe("drill watch  cgroup infer (hybrid)  queue jobs  first sample in 1s\n");
    expect(view.redraw(sample, []).startsWith("\x1b[1F\x1b[J")).toBe(true);
    // Narrow terminals: wrapped, never wider, and the first frame moves back over every line of it.
    const narrow = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const lines = narrow.waiting({ columns: 30, rows: 24 }).trimEnd().split("\n");
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(30);
    expect(narrow.redraw(sample, [], { columns: 30, rows: 24 }).startsWith(`\x1b[${lines.length}F\x1b[J`)).toBe(true);
  });

  it("redraw moves back over the previous frame only from the second frame on", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    expect(view.redraw(sample, [])).not.toContain("\x1b[");
    expect(view.redraw(sample, [{ name: "oom_kill", kind: "raised", line: "PAGE oom_kill" }])).toMatch(/^\x1b\[\d+F\x1b\[JPAGE oom_kill\n/); // eslint-disable-line no-control-regex
  });

  it("first frame: rates not computed yet are 'from the next sample', not listed as missing", () => {
    const view = new LiveView({ cgroup: "qa (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const notYet = ["psi_mem_some_rate", "cg_psi_mem_some_rate", "si", "so", "refault_rate", "cpu_idle_pct", "cpu_iowait_pct", "stall_ms_p99"];
    const first: Sample = { ...sample, si: null, so: null, refault_rate: null, missing: notYet.map((field) => ({ field, file: "/proc/vmstat", reason: "first sample" })) };
    const lines = view.frame(first);
    expect(lines.join("\n")).not.toMatch(/^missing/m);
    expect(lines).toContain("rates    from the next sample");
    expect(lines.find((l) => l.startsWith("host"))).toMatch(/^host {5}idle 41% {2}iowait 3% {2}si n\/a {2}so n\/a {2}refault n\/a$/);

    // A field that is really unreadable is still missing, beside the pending rates.
    const mixed = view.frame({ ...first, cg_mem_current: null, missing: [...first.missing, { field: "cg_mem_current", file: "/sys/fs/cgroup/qa", reason: "missing" }] });
    expect(mixed).toContain("missing  1: cg_mem_current");
    expect(mixed).toContain("rates    from the next sample");
    // The second sample onwards: nothing pending.
    expect(view.frame({ ...sample, missing: [] }).join("\n")).not.toMatch(/^(missing|rates)/m);
  });

  it.each([
    [[1, 2, 3, 4, 5, 6, 7, 8], "▁▂▃▄▅▆▇█"],
    [[5, 5, 5], "▁▁▁"],
    [[0, null, 10], "▁ █"],
    [[null, null], "  "],
  ])("sparkline %j", (values, expected) => {
    expect(sparkline(values)).toBe(expected);
  });

  // QA: PSI easing from 0.10 to 0.08 on an idle host drew a full-height fall, read as a spike.
  it("sparkline with a scale: noise under the least span stays flat; a floor of 0 shows how high a value is", () => {
    expect(sparkline([0.1, 0.1, 0.09, 0.08], 12, { from: 0, minSpan: 10 })).toBe("▁▁▁▁");
    expect(sparkline([0, 5, 10, 20], 12, { from: 0, minSpan: 10 })).toBe("▁▃▅█");
    expect(sparkline([4000, 4003, 3998], 12, { minSpan: 1000 })).toBe("▁▁▁");
    expect(sparkline([64, 128], 12, { from: 0, minSpan: 128 })).toBe("▅█");
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    let frame: string[] = [];
    for (const psi of [0.1, 0.1, 0.09, 0.08]) frame = view.frame({ ...sample, psi_mem_some_avg10: psi });
    expect(frame.find((l) => l.startsWith("psi host"))).toMatch(/▁▁▁▁\s*$/);
  });

  it("p99 stall on the cgroup's line says when it comes from the host's PSI (no cgroup PSI to read)", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    expect(view.frame({ ...sample, stall_ms_p99: 12 }).join("\n")).toMatch(/^psi cg .*p99 stall 12ms {2,}\S/m);
    expect(view.frame({ ...sample, cg_psi_mem_some_avg10: null, cg_psi_mem_some_rate: null, stall_ms_p99: 12 }).join("\n")).toMatch(/^psi cg {3}some n\/a {2}rate n\/a {2}p99 stall 12ms \(host\)/m);
  });

  it("the gate's mode is in the view, beside what it rejected, on a small terminal too", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    expect(view.frame({ ...sample, gate_mode: "reject_all" }).join("\n")).toMatch(/^gate {5}mode reject_all {2}rejected host_pressure=123456 {2}deadline_slack=123456/m);
    expect(view.frame({ ...sample, gate_mode: "reject_all" }, { columns: 60, rows: 12 }).join("\n")).toMatch(/^gate {5}mode reject_all/m);
    expect(view.frame({ ...sample, gate_mode: null, rejected: null })).toContain("gate     mode n/a  rejected n/a");
    // QA: a lever the gate fails closed on showed `mode n/a`; it shows what the gate does, in the gate's words.
    const closed = { ...sample, gate_mode: null, missing: [{ field: "gate_mode", file: "redis://h:1 jobs:mode", reason: "the gate reads it as reject_all (fail closed): mode_type=hash" }] };
    expect(view.frame(closed).join("\n")).toMatch(/^gate {5}mode reject_all mode_type=hash {2}rejected /m);
    expect(formatSampleLine(closed)).toContain(" gate_mode=reject_all mode_type=hash ");
    // Redis not read: unknown, not a guess.
    const unread = { ...sample, gate_mode: null, missing: [{ field: "gate_mode", file: "redis://h:1", reason: "not connected (reconnecting)" }] };
    expect(view.frame(unread).join("\n")).toMatch(/^gate {5}mode n\/a {2}rejected /m);
    expect(formatSampleLine(unread)).toContain(" gate_mode=n/a ");
    expect(formatSampleLine({ ...sample, gate_mode: "reject_all" })).toContain(" gate_mode=reject_all ");
  });

  // QA 18: the piped line printed cg_mem=26451968 and stall_ms_p99=206.53 where the view shows MiB and whole ms.
  it("the piped line uses the view's units: memory in MiB, whole ms, rates in % as the view", () => {
    const line = formatSampleLine({ ...sample, cg_mem_current: 26451968, stall_ms_p99: 206.53, psi_mem_some_rate: 23.28, cg_psi_mem_some_rate: 28.44 });
    expect(line).toContain(" cg_mem=25.2MiB ");
    expect(line).toContain(" stall_ms_p99=207 ");
    expect(line).toContain(" psi_rate=23.3% ");
    expect(line).toContain(" cg_psi_rate=28.4% ");
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const shown = view.frame({ ...sample, cg_mem_current: 26451968, stall_ms_p99: 206.53, psi_mem_some_rate: 23.28, cg_psi_mem_some_rate: 28.44 }).join("\n");
    for (const same of ["25.2MiB", "207ms", "23.3%", "28.4%"]) expect(shown).toContain(same);
  });

  // Rounded to whole percent, 9.6 read as the gate's 10.00 limit and a real 0.4 stall as none.
  it("drill up's status line gives stall rates to one decimal, as watch does", () => {
    const line = formatStatusLine({ ...sample, psi_mem_some_rate: 9.6, cg_psi_mem_some_rate: 0.4 });
    expect(line.split(" ")).toEqual(expect.arrayContaining(["rate=9.6%", "cg_rate=0.4%"]));
    expect(formatStatusLine({ ...sample, psi_mem_some_rate: null, cg_psi_mem_some_rate: null })).toContain(" rate=n/a cg_rate=n/a ");
  });

  it("the piped line has the runbook's names and no colour", () => {
    const line = formatSampleLine(sample);
    expect(line).toContain("queue_age_ms=180 slack_ms=-230 psi=12.40");
    expect(line).toContain("missing=cg_psi_mem_some_rate");
    expect(line).not.toMatch(/\x1b/); // eslint-disable-line no-control-regex
  });
});

describe("render: deadline slack not known", () => {
  // QA (scale): past 2000 admitted jobs the view showed a slack over the oldest 2000 only; now null, and the view says why.
  it("an admitted list read in part: the queue row says how much was read, not a bare n/a", () => {
    const reason = partialAdmittedReason({ readyLen: 0, readyScanned: 0, admittedLen: 9893, admittedScanned: 2000 });
    const partial: Sample = { ...sample, deadline_slack_ms: null, missing: [{ field: "deadline_slack_ms", file: "redis://h:1 jobs:admitted", reason }] };
    const view = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    const lines = view.frame(partial, { columns: 80, rows: 40 });
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(80);
    expect(lines.join("\n")).toContain("slack n/a (oldest 2000 of 9893 admitted read)");
    expect(lines.find((l) => l.startsWith("missing"))).toContain("deadline_slack_ms");
    expect(formatSampleLine(partial)).toContain(" slack_ms=n/a ");
    // Any other reason (Redis down) is the plain n/a.
    const down: Sample = { ...sample, deadline_slack_ms: null, missing: [{ field: "deadline_slack_ms", file: "redis://h:1", reason: "not connected" }] };
    expect(new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 })).frame(down).join("\n")).toMatch(/ {2}slack n\/a(\s|$)/);
  });
});

describe("parseQueueSample", () => {
  const b = (text: string) => Buffer.from(text);
  // The events part of a reply: newest id read, reject entries' fields, rejects past the cap;
  // then the list scan: ready entries scanned, LLEN admitted; then the wrong-typed keys.
  const noEvents = [b("0-0"), [], 0, 0, 0, []];
  it("maps the script's reply", () => {
    const r = parseQueueSample("redis://h:1", "jobs", [2, b("{}"), [b("a")], [b("tokens_out"), b("7"), b("admitted"), b("1")], [b("w")], [], 1, b("reject_all"), b("0-0"), [], 0, 2, 5, []]);
    expect(r).toEqual({
      ok: true,
      value: {
        queue: {
          source: "redis://h:1",
          queue: "jobs",
          queueLen: 2,
          head: b("{}"),
          admitted: [b("a")],
          working: [b("w")],
          workingScanned: true,
          retryCandidates: [],
          stats: { tokens_out: "7", admitted: "1" },
          mode: "reject_all",
          wrongTyped: [],
          scan: { readyLen: 2, readyScanned: 2, admittedLen: 5, admittedScanned: 1 },
        },
        events: { tip: b("0-0"), lines: [], beyond: 0 },
      },
    });
    expect(parseQueueSample("redis://h:1", "jobs", [0, null, [], [], [], [], 1, null, ...noEvents])).toMatchObject({ ok: true, value: { queue: { mode: null } } });
    // A key of the wrong type: named with its role, the rest of the reply still read.
    const wrong = [b("stats"), b("jobs:stats"), b("jobs:stats is a list, not a hash (drill never writes that there)")];
    expect(parseQueueSample("redis://h:1", "jobs", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0, 0, 0, wrong])).toMatchObject({
      ok: true,
      value: { queue: { wrongTyped: [{ role: "stats", key: "jobs:stats", reason: "jobs:stats is a list, not a hash (drill never writes that there)" }] } },
    });
    // A worker's list of another type: role working, the other workers' jobs still read.
    const working = [b("working"), b("jobs:working:w1"), b("jobs:working:w1 is a string, not a list (drill never writes that there)")];
    expect(parseQueueSample("redis://h:1", "jobs", [0, null, [], [], [b("w")], [], 1, null, b("0-0"), [], 0, 0, 0, working])).toMatchObject({
      ok: true,
      value: { queue: { working: [b("w")], wrongTyped: [{ role: "working", key: "jobs:working:w1", reason: "jobs:working:w1 is a string, not a list (drill never writes that there)" }] } },
    });
    // Nothing after the cursor: no tip.
    expect(parseQueueSample("redis://h:1", "jobs", [0, null, [], [], [], [], 1, null, null, [], 0, 0, 0, []])).toMatchObject({ ok: true, value: { events: { tip: null, lines: [], beyond: 0 } } });
  });
  it("maps the reject entries to the gate's lines", () => {
    const entry = ["reason", "reject_packed_tokens", "job", "7", "figures", "packed=36012 limit=32000 route=retry", "ts", "1", "gate", "g", "attempt", "0"].map(b);
    const r = parseQueueSample("redis://h:1", "jobs", [0, null, [], [], [], [], 1, null, b("17-3"), [entry], 4, 0, 0, []]);
    expect(r).toMatchObject({ ok: true, value: { events: { tip: b("17-3"), lines: ["reject_packed_tokens job=7 packed=36012 limit=32000 route=retry"], beyond: 4 } } });
  });
  it.each([
    ["not an array", "OK"],
    ["short", [1, null]],
    ["bad len", ["x", null, [], [], [], [], 1, null, ...noEvents]],
    ["bad head", [0, 5, [], [], [], [], 1, null, ...noEvents]],
    ["bad list", [0, null, ["s"], [], [], [], 1, null, ...noEvents]],
    ["bad mode", [0, null, [], [], [], [], 1, 5, ...noEvents]],
    ["no mode (the script before gate_mode)", [0, null, [], [], [], [], 1]],
    ["no events (the script before reject lines)", [0, null, [], [], [], [], 1, null]],
    ["bad events tip", [0, null, [], [], [], [], 1, null, 5, [], 0, 0, 0, []]],
    ["events entries not a list", [0, null, [], [], [], [], 1, null, b("1-0"), b("x"), 0, 0, 0, []]],
    ["an entry not a list of strings", [0, null, [], [], [], [], 1, null, b("1-0"), [[1, 2]], 0, 0, 0, []]],
    ["an entry with an odd field count", [0, null, [], [], [], [], 1, null, b("1-0"), [[b("reason")]], 0, 0, 0, []]],
    ["bad count past the cap", [0, null, [], [], [], [], 1, null, b("1-0"), [], "3", 0, 0, []]],
    ["no list scan (the script before the scan cap)", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0]],
    ["bad list scan", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0, "2", 0, []]],
    ["no wrong-typed keys (the script before it named them)", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0, 0, 0]],
    ["a wrong-typed key of no known role", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0, 0, 0, [b("mode"), b("jobs:mode"), b("x")]]],
    ["a wrong-typed key without its reason", [0, null, [], [], [], [], 1, null, b("0-0"), [], 0, 0, 0, [b("ready"), b("jobs")]]],
    ["negative count past the cap", [0, null, [], [], [], [], 1, null, b("1-0"), [], -1, 0, 0, []]],
  ])("unexpected reply (%s) is a failed reading", (_name, reply) => {
    expect(parseQueueSample("redis://h:1", "jobs", reply).ok).toBe(false);
  });
});

describe("the live view under a non-UTF-8 locale (LANG=C)", () => {
  const NON_ASCII = /[^\x20-\x7e]/u;
  const ASCII_BARS = glyphsFor(false).bars;

  it("sparkline draws the same levels in the bars it is given", () => {
    expect(sparkline([0, 5, 10, null], 4, {}, ASCII_BARS)).toBe(`${ASCII_BARS[0]}${ASCII_BARS[4]}${ASCII_BARS[7]} `);
    expect(sparkline([0, 5, 10, null], 4)).toBe("▁▅█ ");
  });

  it.each([80, 60, 40, 12])("at %d columns: no byte outside printable ASCII (trends, cut values, reject and alarm lines), no line wider", (columns) => {
    const view = new LiveView({ cgroup: "infer (hybrid)", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }), false);
    for (let i = 0; i < 20; i++) view.frame({ ...sample, psi_mem_some_avg10: i, cg_mem_current: i * 1_000_000, deadline_slack_ms: i * 100 });
    // Text from outside drill's code can carry anything: a reject line's figures, an alarm's line.
    const rejects = { lines: ["reject_host_pressure job=8 psi=12.40 ≥ 10.00 → dead", "reject_packed_tokens job=9 packed=36012 limit=32000 route=retry"], more: 2 };
    const out = view.redraw(sample, [{ name: "oom_kill", kind: "raised", line: "PAGE oom_kill 3 → 4 … café" }], { columns, rows: Infinity }, rejects);
    const lines = out.trimEnd().split("\n"); // the first redraw: nothing to move back over
    for (const line of lines) {
      expect(line, line).not.toMatch(NON_ASCII);
      expect(line.length, line).toBeLessThanOrEqual(columns);
    }
    const text = lines.join("\n");
    if (columns === 80) {
      expect(text).toMatch(/^psi host .* [_.:\-=+*#]{16}$/m); // the trend, in ASCII levels
      expect(text).toContain("psi=12.40 >= 10.00 -> dead");
      expect(text).toContain("PAGE oom_kill 3 -> 4 ... caf?");
    }
    if (columns === 12) expect(text).toContain("..."); // a segment longer than the width, cut with an ASCII mark
  });

  it("UTF-8 (the default) keeps the Unicode bars", () => {
    const view = new LiveView({ cgroup: "infer", queue: "jobs", intervalMs: 1000 }, new Chalk({ level: 0 }));
    for (let i = 0; i < 5; i++) view.frame({ ...sample, psi_mem_some_avg10: i * 2 });
    expect(view.frame(sample).join("\n")).toMatch(/[▁▂▃▄▅▆▇█]/);
  });
});
