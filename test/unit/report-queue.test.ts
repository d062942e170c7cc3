import { Chalk } from "chalk";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { drillDir, writeState, type DrillState } from "../../src/drill/state.js";
import { UsageError } from "../../src/errors.js";
import { buildReport, modeFlip, rollbackDenyAll } from "../../src/report/build.js";
import { resolveDrillName } from "../../src/report/gather.js";
import { sameRedis } from "../../src/queue/redis.js";
import type { DecisionEvent, DoneEntry, ReportInputs } from "../../src/report/inputs.js";
import { renderJson, renderMarkdown, renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";

/**
 * QA on `drill report --queue`: a queue that is not the drill's was clipped
 * to the drill's run (0 decisions); the command up's "queue in use" refusal
 * prints needed --name with several drills; a --name typo blamed --queue;
 * repeated `gate mode` sets were listed as flips, as a `k=v` string in json.
 */

const plain = new Chalk({ level: 0 });
const MIN = 60_000;
const NOW = Date.parse("2025-11-30T12:00:00.000Z");

let seq = 0;
const event = (reason: string, job: string, figures: string, tsMs: number): DecisionEvent => ({ id: `${tsMs}-${seq++}`, reason, job, figures, tsMs, gate: "g1", attempt: 0 });

/** Five decisions on qa2q4, 5 minutes ago; the drill's run (on qa2q9) was created after them. */
function otherQueue(): ReportInputs {
  const at = NOW - 5 * MIN;
  return reportInputs({
    queue: "qa2q4",
    drill: { name: "qa2", rollbackCommand: "drill rollback --name qa2", runId: "qa2-3", drillFile: "qa2.yaml", createdAt: new Date(NOW - MIN).toISOString(), phase: "complete", queue: "qa2q9" },
    events: [0, 1, 2, 3, 4].map((i) => event(i === 4 ? "reject_packed_tokens" : "admit", String(i + 1), "packed=1 limit=2", at + i)),
  });
}

describe("report --queue that is not the drill's run's queue", () => {
  it("is not clipped to that run: the window is the default, every decision counted, and it says why", () => {
    // Jobs 1 and 2 finished on qa2q4 before the drill's run was created: their pace is not clipped to it either.
    const finished = (id: string, doneTs: number): DoneEntry => ({ id, firstTokenMs: 900, deadlineMs: 8000, late: false, tokensOut: 8, promptTokens: 1000, completionTokens: 8, attempt: 0, enqueueTs: NOW - 5 * MIN - 1000, firstTokenTs: doneTs - 100, doneTs });
    const r = buildReport({ ...otherQueue(), done: [finished("1", NOW - 4 * MIN), finished("2", NOW - 3 * MIN)] }, NOW, 10 * MIN);
    expect(r.window).toMatchObject({ from: new Date(NOW - 10 * MIN).toISOString(), run_start: null, clipped_to_run: false });
    expect(r.decisions?.total).toBe(5);
    expect(r.notes.join("\n")).not.toMatch(/predate|left out of the window/);
    expect(r.notes).toContain("queue qa2q4 is not run qa2-3's queue (qa2q9): the window is not clipped to the run");
    expect(renderText(r, plain)).toContain("window: last 10 min (not clipped to run qa2-3: its queue is qa2q9)");
    expect(r.drain.pace_from).toBe(new Date(NOW - 5 * MIN).toISOString()); // job 1's admit
  });

  it("the run's own queue is still clipped to the run", () => {
    const inputs = otherQueue();
    inputs.queue = "qa2q9";
    const r = buildReport(inputs, NOW, 10 * MIN);
    expect(r.window.clipped_to_run).toBe(true);
    expect(r.decisions?.total).toBe(0);
  });
});

describe("which drill a report is about", () => {
  let stateDir: string;
  beforeEach(() => {
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-queue-"));
  });
  afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

  const URL = "redis://127.0.0.1:6391";
  const stateOf = (name: string, queue: string, url = URL): DrillState => ({
    version: 1,
    name,
    runId: `${name}-1`,
    drillFile: `${name}.yaml`,
    createdAt: new Date(NOW).toISOString(),
    phase: "complete",
    queue,
    redis: { url, embedded: null },
    cgroup: { name: `${name}cg`, parent: "self", dirs: [] },
    processes: [],
    fileDir: null,
    owner: { pid: process.pid, startTime: null },
  });

  it("--redis and --queue with several drills: the queue alone, no --name needed (up's suggested command)", () => {
    writeState(stateDir, stateOf("a", "qa"));
    writeState(stateDir, stateOf("b", "qb"));
    expect(resolveDrillName(stateDir, undefined, URL, "qa4")).toEqual({ name: null, notes: [] });
    // Without --queue it is still a choice between drills.
    expect(() => resolveDrillName(stateDir, undefined, URL, undefined)).toThrow(/several drills in .*: a, b; pick one with --name \(drill --state-dir .* report --name a\), or give --queue/);
  });

  // QA: it suggested the first by name, rolled back long before, beside the one drill up.
  it("several drills: the suggested --name is the drill that is up, else the one created last", () => {
    writeState(stateDir, stateOf("a", "qa"));
    writeState(stateDir, { ...stateOf("b", "qb"), phase: "running" });
    writeState(stateDir, { ...stateOf("c", "qc"), createdAt: new Date(NOW + MIN).toISOString() });
    expect(() => resolveDrillName(stateDir, undefined, undefined, undefined)).toThrow(/several drills in .*: a, b, c; pick one with --name \(drill --state-dir .* report --name b\)/);
    writeState(stateDir, stateOf("b", "qb"));
    expect(() => resolveDrillName(stateDir, undefined, undefined, undefined)).toThrow(/report --name c\)/);
  });

  it("--redis and --queue a drill there ran on (the same Redis, however spelled): that drill", () => {
    writeState(stateDir, stateOf("a", "qa"));
    writeState(stateDir, stateOf("b", "qb", "redis://localhost:6391/0"));
    expect(resolveDrillName(stateDir, undefined, URL, "qb")).toEqual({ name: "b", notes: [] });
    // The same queue name on another Redis is not that drill's.
    expect(resolveDrillName(stateDir, undefined, "redis://127.0.0.1:6392", "qb").name).toBeNull();
    writeState(stateDir, stateOf("c", "qb"));
    const both = resolveDrillName(stateDir, undefined, URL, "qb");
    expect(both.name).toBeNull();
    expect(both.notes[0]).toContain("drills b, c in");
  });

  // QA: the only drill of the state dir, run on another Redis, gave its header and recording to this Redis's figures.
  it("--redis alone: the drill that ran on that Redis; none there: the queue alone, saying why", () => {
    writeState(stateDir, stateOf("a", "jobs"));
    expect(resolveDrillName(stateDir, undefined, URL, undefined)).toEqual({ name: "a", notes: [] });
    const other = resolveDrillName(stateDir, undefined, "redis://127.0.0.1:6392", undefined);
    expect(other.name).toBeNull();
    expect(other.notes).toEqual([`no drill of ${stateDir} ran on redis://127.0.0.1:6392 (a did not): reported as its queue alone; give --name to report a drill`]);
    // Two on that Redis: still a choice.
    writeState(stateDir, stateOf("b", "qb"));
    expect(() => resolveDrillName(stateDir, undefined, URL, undefined)).toThrow(/several drills in .*: a, b; pick one with --name/);
  });

  it("one drill on another queue: --redis --queue reports the queue, not that drill's run", () => {
    writeState(stateDir, stateOf("qa2", "qa2q9"));
    expect(resolveDrillName(stateDir, undefined, URL, "qa2q4").name).toBeNull();
    expect(resolveDrillName(stateDir, undefined, URL, "qa2q9").name).toBe("qa2");
  });

  it("--name naming no drill: rollback's message listing the drills there, even with a Redis given", () => {
    writeState(stateDir, stateOf("a", "qa"));
    mkdirSync(drillDir(stateDir, "old"), { recursive: true });
    writeFileSync(path.join(drillDir(stateDir, "old"), "final-2025-11-30T12-00-00-000Z.jsonl"), "");
    const tryIt = () => resolveDrillName(stateDir, "nosuch", URL, undefined);
    expect(tryIt).toThrow(UsageError);
    expect(tryIt).toThrow(
      `--name: no drill "nosuch" in ${stateDir} (drills there: a (complete, worker cgroup acg), old (only rollback's export left)); report on one of them (drill --state-dir ${stateDir} report --name <drill>)`,
    );
    expect(() => resolveDrillName(stateDir, "acg", URL, undefined)).toThrow(`acg is the worker cgroup of drill a: drill --state-dir ${stateDir} report --name a`);
    const empty = path.join(stateDir, "none");
    expect(() => resolveDrillName(empty, "nosuch", URL, undefined)).toThrow(`--name: no drill "nosuch" in ${empty} (no drill there)`);
  });

  it("sameRedis: spelling of one server and database", () => {
    expect(sameRedis("redis://127.0.0.1:6379", "redis://localhost")).toBe(true);
    expect(sameRedis("redis://:pw@127.0.0.1:6379/0", "redis://127.0.0.1:6379")).toBe(true);
    expect(sameRedis("redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379")).toBe(false);
    expect(sameRedis("redis://127.0.0.1:6380", "redis://127.0.0.1:6379")).toBe(false);
    // The database as ioredis selects it (QA: `?db=3` and `/3` were two servers, and `/03` another).
    expect(sameRedis("redis://127.0.0.1:7471?db=3", "redis://localhost:7471/3")).toBe(true);
    expect(sameRedis("redis://127.0.0.1:7471/03", "redis://127.0.0.1:7471/3")).toBe(true);
    expect(sameRedis("redis://127.0.0.1:7471?db=3", "redis://127.0.0.1:7471")).toBe(false);
    expect(sameRedis("/tmp/r.sock", "/tmp/r.sock?db=0")).toBe(true);
    expect(sameRedis("/tmp/r.sock?db=1", "/tmp/r.sock")).toBe(false);
  });
});

describe("mode events: the lever's history, repeats marked", () => {
  const inputs = (): ReportInputs => ({
    ...otherQueue(),
    queue: "qa2q9",
    drill: null,
    events: [
      event("mode", "", "mode=reject_all previous=unset psi=0.40", NOW - 3 * MIN),
      event("mode", "", "mode=reject_all previous=reject_all psi=missing", NOW - 2 * MIN),
      event("mode", "", "mode=admit previous=reject_all psi=3.10 forced=1", NOW - MIN),
    ],
  });

  it("a forced re-admit's avg60 is said beside avg10 (the refusal reads both: QA, 'forced over PSI' beside avg10 0.99)", () => {
    const forced = event("mode", "", "mode=admit previous=reject_all psi=0.99 forced=1 psi_avg60=3.39 by=gate_mode", NOW - MIN);
    expect(modeFlip(forced)).toMatchObject({ forced: true, psi: 0.99, psi_avg60: 3.39, by: "gate_mode" });
    const md = renderMarkdown(buildReport({ ...inputs(), events: [forced] }, NOW, 10 * MIN));
    expect(md).toContain("| admit | reject_all | 0.99 | forced over PSI (avg60 3.39), by hand (gate mode) |");
  });

  it("structured fields in json (snake_case), repeats unchanged", () => {
    const r = buildReport(inputs(), NOW, 10 * MIN);
    expect(r.mode_flips).toEqual([
      { ts: new Date(NOW - 3 * MIN).toISOString(), mode: "reject_all", previous: "unset", unchanged: false, forced: false, psi: 0.4, psi_avg60: null, by: null },
      { ts: new Date(NOW - 2 * MIN).toISOString(), mode: "reject_all", previous: "reject_all", unchanged: true, forced: false, psi: null, psi_avg60: null, by: null },
      { ts: new Date(NOW - MIN).toISOString(), mode: "admit", previous: "reject_all", unchanged: false, forced: true, psi: 3.1, psi_avg60: null, by: null },
    ]);
    const doc = JSON.parse(renderJson(r)) as { mode_flips: Array<Record<string, unknown>> };
    expect(Object.keys(doc.mode_flips[0]!).sort()).toEqual(["by", "forced", "mode", "previous", "psi", "psi_avg60", "ts", "unchanged"]);
  });

  // QA: after a hand-run `rollback --queue` (no drill record) its deny-all row read like a hand on the lever.
  it("who moved the lever (by=): rollback's deny-all, up opening admission, gate mode by hand; in json and in the table", () => {
    const base = inputs();
    const r = buildReport(
      {
        ...base,
        events: [
          event("mode", "", "mode=admit previous=unset psi=0.00 by=up", NOW - 3 * MIN),
          event("mode", "", "mode=reject_all previous=admit psi=0.20 by=gate_mode", NOW - 2 * MIN),
          event("mode", "", "mode=reject_all previous=reject_all psi=0.10 by=rollback", NOW - MIN),
        ],
      },
      NOW,
      10 * MIN,
    );
    expect(r.mode_flips?.map((m) => m.by)).toEqual(["up", "gate_mode", "rollback"]);
    const md = renderMarkdown(r);
    expect(md).toContain(`| ${new Date(NOW - 3 * MIN).toISOString()} | admit | unset | 0.00 | opened by up |`);
    expect(md).toContain(`| ${new Date(NOW - 2 * MIN).toISOString()} | reject_all | admit | 0.20 | by hand (gate mode) |`);
    expect(md).toContain(`| ${new Date(NOW - MIN).toISOString()} | reject_all | reject_all | 0.10 | (unchanged), rollback's deny-all |`);
  });

  // QA S 7: a hand-run `rollback --queue` of a live drill's queue (from another state dir) read as
  // that drill's own rollback's deny-all in its report.
  it("a hand-run rollback --queue's deny-all is by=rollback_queue: marked as that, and not the drill's own rollback's", () => {
    const events = [
      event("mode", "", "mode=admit previous=unset psi=0.00 by=up", NOW - 3 * MIN),
      event("mode", "", "mode=reject_all previous=admit psi=0.20 by=rollback_queue", NOW - 2 * MIN),
      event("mode", "", "mode=reject_all previous=reject_all psi=0.10 by=rollback", NOW - MIN),
    ];
    const cut = rollbackDenyAll(events, NOW - 4 * MIN, NOW);
    expect(cut).toMatchObject({ ts: new Date(NOW - MIN).toISOString(), by: "rollback", unchanged: true });
    const md = renderMarkdown(buildReport({ ...inputs(), events }, NOW, 10 * MIN));
    expect(md).toContain(`| ${new Date(NOW - 2 * MIN).toISOString()} | reject_all | admit | 0.20 | rollback --queue's deny-all |`);
    // An event from before `by` was recorded may still be the rollback's.
    expect(rollbackDenyAll([event("mode", "", "mode=reject_all previous=admit psi=0.20", NOW - 2 * MIN)], NOW - 4 * MIN, NOW)).toMatchObject({ by: null, unchanged: false });
  });

  it("md marks a repeat (unchanged) and a forced re-admit", () => {
    const md = renderMarkdown(buildReport(inputs(), NOW, 10 * MIN));
    expect(md).toContain("| at | mode | previous | psi avg10 | note |");
    expect(md).toContain(`| ${new Date(NOW - 2 * MIN).toISOString()} | reject_all | reject_all | n/a | (unchanged) |`);
    expect(md).toContain(`| ${new Date(NOW - 3 * MIN).toISOString()} | reject_all | unset | 0.40 |  |`);
    expect(md).toContain("| admit | reject_all | 3.10 | forced over PSI |");
  });

  it("an entry without previous: unchanged is null, not false", () => {
    expect(modeFlip({ tsMs: NOW, figures: "mode=admit psi=0.00" })).toEqual({ ts: new Date(NOW).toISOString(), mode: "admit", previous: null, unchanged: null, forced: false, psi: 0, psi_avg60: null, by: null });
  });
});
