import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, runDir, type DrillState } from "../../src/drill/state.js";
import type { ReportDocument } from "../../src/report/render.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { parseDuration } from "../../src/units.js";
import { execa } from "execa";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";

// 20 s declared: a burst, a 2/s trickle from 1 s (10 s of it), one more at 12 s,
// a small hog at 14 s. Something the drill needs dies about 2 s in; up must not carry on to 20 s.
const DRILL = tinyDrill("upearly", {
  duration: "20s",
  phases: [
    ["0s", pack(2)],
    ["1s", pack(20, 1000, ", rate: 2, label: trickle")],
    ["12s", pack(1, 1000, ", label: after the stop")],
    ["14s", "inject: { mode: anon, size: 8M, hold: 1s }"],
  ],
});
// Jobs stream in at 500/s for 4 s: the gate is deciding when the drill stops.
const STREAM_DRILL = tinyDrill("upearly", {
  duration: "20s",
  phases: [
    ["0s", pack(2000, 1000, ", rate: 500, label: stream")],
    ["12s", pack(1, 1000, ", label: after the stop")],
    ["14s", "inject: { mode: anon, size: 8M, hold: 1s }"],
  ],
});
const CGROUP = "upearlycg";
const DECLARED_MS = 20_000;

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping drill up stops early: ${skip}`);

interface Summary {
  label: string;
  verdict: string;
  pushed_ids: string[];
  not_packed: number;
  stopped_early: Array<{ process: string; how: string; code: number | null; log: string; last_line: string | null }>;
}

describe.skipIf(skip !== null)("drill up stops when the gate or its Redis dies (real cgroup, embedded Redis)", () => {
  let root: string;
  let files: string;
  let drillFile: string;
  let streamFile: string;
  const stateDirs: string[] = [];
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-early-"));
    files = path.join(root, "files");
    mkdirSync(files);
    drillFile = path.join(root, "upearly.yaml");
    writeFileSync(drillFile, DRILL);
    streamFile = path.join(root, "upearly-stream.yaml");
    writeFileSync(streamFile, STREAM_DRILL);
  });
  afterAll(async () => {
    // Only does something when a case failed half-way: never leave a drill running.
    for (const dir of stateDirs) if (existsSync(dir)) await runDrill(["--state-dir", dir, "rollback"], { timeout: 90_000 });
    rmSync(root, { recursive: true, force: true });
  });

  /** Starts `up` (--json unless `json` is false; `extra` flags of up; `file` for another drill) and waits until it runs. */
  async function startUp(label: string, { json = true, extra = [] as string[], file = drillFile } = {}) {
    const stateDir = path.join(root, label);
    stateDirs.push(stateDir);
    const startedAt = Date.now();
    const up = runDrill(["--state-dir", stateDir, ...(json ? ["--json"] : []), "up", "--drill", file, "--parent", "self", "--name", CGROUP, "--file-dir", files, ...extra], { timeout: 120_000 });
    let state: DrillState | null = null;
    while (state?.phase !== "running") {
      if (Date.now() - startedAt > 60_000) throw new Error(`drill up did not reach running: ${JSON.stringify(state)}`);
      await sleep(100);
      state = readState(stateDir, "upearly");
    }
    return { stateDir, up, state, startedAt };
  }

  /** The trickle has started (the burst's 2 jobs and one more pushed): the drill is mid-way, not starting. */
  async function trickleStarted(state: DrillState) {
    expect((await idsGivenByQueue(state.redis.url, "jobs", 3)).length, "the trickle did not start").toBeGreaterThanOrEqual(3);
  }

  /** Starts `up`, lets the trickle start, then kills what `victim` picks. */
  async function upAndKill(label: string, victim: (state: DrillState) => number) {
    const { stateDir, up, state, startedAt } = await startUp(label);
    await trickleStarted(state);
    process.kill(victim(state), "SIGKILL");
    const result = await up;
    return { stateDir, result, state, elapsedMs: Date.now() - startedAt };
  }

  async function rollbackLosesNothing(stateDir: string, before: DrillState, pushed: string[]) {
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "upearly"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "upearly", before);
    const exported = readdirSync(path.join(stateDir, "upearly")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    assertNoJobLostInExport(path.join(stateDir, "upearly", exported[0]!), "jobs", pushed);
  }

  it("the gate SIGKILLed: up says so at once, stops packing, exits 1 naming it; rollback loses nothing", async () => {
    const { stateDir, result, state, elapsedMs } = await upAndKill("gate", (s) => s.processes.find((p) => p.role === "gate")!.pid!);
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(1);
    // It stopped, rather than packing into a queue no gate serves until 20 s.
    expect(elapsedMs, out).toBeLessThan(DECLARED_MS);
    // SIGKILLed, it wrote no error line: the last thing it did (its last decision, on gate.out) is said instead,
    // as its last output, not as the reason (QA: "…: reject_deadline_slack job=5" read as the cause).
    expect(result.stderr).toMatch(/^gate: exited \(killed by a signal\) \d+s into the drill, nothing said on stderr; its last output line: (admit|reject_\w+) job=\S+.*; the drill stops here \(log: \S+gate\.out\)$/m);
    expect(result.stderr).toMatch(/phase 1: packed (\d+) of 20 jobs; (\d+) not packed: the drill stopped before its end/);
    expect(result.stderr).not.toMatch(/phase 2: pack/);
    expect(result.stderr).toMatch(/^phase 2: not started: the drill stopped before 12s; 1 jobs not packed$/m);
    // The inject phase that never started is named too, after the pack phases, in the file's order.
    expect(result.stderr).toMatch(/^phase 2: not started.*\nphase 3: not started: the drill stopped before 14s; inject anon 8\.0MiB not run$/m);
    expect(result.stderr).not.toMatch(/phase 3: inject/);
    expect(result.stderr).toMatch(/not packed: the drill stopped first\)/);
    expect(result.stderr).toContain(`drill upearly stopped before its end: gate exited (killed by a signal)`);
    const summary = JSON.parse(result.stdout.trim().split("\n").pop()!) as Summary;
    expect(summary.verdict).toBe("stopped_early");
    // DESIGN: every number printed from a drill is labeled a lab expectation, the JSON document's too.
    expect(summary.label).toBe("lab expectation from a declared drill, not observed production");
    expect(summary.stopped_early.map((e) => e.process)).toEqual(["gate"]);
    expect(summary.stopped_early[0]).toMatchObject({ log: expect.stringMatching(/gate\.out$/), last_line: expect.stringMatching(/^(admit|reject_\w+) job=/) });
    // Every job of every phase is pushed or counted as not packed, the one that never started too.
    expect(summary.pushed_ids.length + summary.not_packed).toBe(2 + 20 + 1);
    expect(summary.not_packed).toBeGreaterThan(0);
    // up records its verdict where the report reads it (M3): the report no longer reads like a clean run.
    expect(readState(stateDir, "upearly")?.ended).toMatchObject({ verdict: "stopped_early", reason: "gate exited (killed by a signal)", notPacked: summary.not_packed });
    await rollbackLosesNothing(stateDir, state, summary.pushed_ids);
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "upearly", "--format", "md"], { timeout: 60_000 });
    expect(report.exitCode, report.stderr).toBe(0);
    expect(report.stdout).toMatch(new RegExp(`^- ended: stopped_early — gate exited \\(killed by a signal\\) \\d+ s into the drill; ${summary.not_packed} of 23 jobs not packed; rolled back at \\S+$`, "m"));
  }, 180_000);

  it("the embedded redis-server SIGKILLed: no crash, exit 1 naming redis; rollback restarts it on its AOF and loses nothing", async () => {
    const { stateDir, result, state, elapsedMs } = await upAndKill("redis", (s) => s.processes.find((p) => p.role === "redis")!.pid!);
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(1);
    expect(elapsedMs, out).toBeLessThan(DECLARED_MS);
    // Was an uncaught ioredis rejection with a stack trace.
    expect(result.stderr).not.toMatch(/Node\.js v|^\s+at /m);
    expect(result.stderr).toMatch(/^redis: gone \(pid \d+\) \d+s into the drill: no exit message in its log: killed by a signal \(SIGKILL, or the OOM killer\); its last line: .*; the drill stops here/m);
    expect(result.stderr).toMatch(/drill upearly stopped before its end: redis /);
    // Its URL is dead: no lever on it; rollback is what brings the Redis (its AOF) back.
    expect(result.stderr).not.toMatch(/Deny-all by hand|30 s later/);
    expect(result.stderr).toMatch(/^Run `drill --state-dir \S+ rollback --name upearly` before walking away: the embedded Redis is gone, .*rollback starts it again on its AOF/m);
    const summary = JSON.parse(result.stdout.trim().split("\n").pop()!) as Summary;
    expect(summary.stopped_early.map((e) => e.process)).toEqual(["redis"]);
    expect(summary.pushed_ids.length + summary.not_packed).toBe(2 + 20 + 1);
    expect((readState(stateDir, "upearly") as DrillState).phase).toBe("stopped");

    // A report restarts it on its AOF to read it; stopped by a signal meanwhile, it stops that server too
    // (QA: left running, it held the AOF and the lock, and the rollback could not pull the lever for 2 min).
    const aofDir = realpathSync(state.redis.embedded!.dir);
    const serversIn = () => readdirSync("/proc").filter((pid) => /^\d+$/.test(pid) && readLink(`/proc/${pid}/cwd`) === aofDir && readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "redis-server");
    expect(serversIn()).toEqual([]);
    const report = execa("node", [drillBin, "--state-dir", stateDir, "report", "--name", "upearly"], { reject: false, timeout: 60_000, env: { NO_COLOR: "1" } });
    for (let i = 0; i < 400 && serversIn().length === 0; i++) await sleep(25);
    expect(serversIn().length, "the report restarted no redis-server").toBe(1);
    report.kill("SIGTERM");
    const stopped = await report;
    expect(stopped.exitCode, String(stopped.stderr)).toBe(143);
    expect(String(stopped.stderr)).toContain("drill: report interrupted by SIGTERM: the redis-server it restarted on the drill's AOF is stopped");
    expect(serversIn()).toEqual([]);
    await rollbackLosesNothing(stateDir, state, summary.pushed_ids);
  }, 180_000);

  // RELIABILITY 13: a Redis that stalls mid-drill is ridden out, as the gate and
  // the worker do. up gave up at its first failed push and stopped the drill.
  it("the embedded redis-server stopped for 7 s (SIGSTOP) mid-drill: up sends the push again until it answers, and the drill runs to its end", async () => {
    // Cut to 12 s: the trickle (1 s to 11 s) still pushes on both sides of the stop; the later phases are not needed.
    const { stateDir, up, state } = await startUp("stall", { extra: ["--duration", "12s"] });
    const redis = state.processes.find((p) => p.role === "redis")!.pid!;
    await trickleStarted(state);
    process.kill(redis, "SIGSTOP");
    await sleep(7000);
    process.kill(redis, "SIGCONT");
    const result = await up;
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(0);
    expect(result.stderr).toMatch(/^phase 1: push failed: no reply from Redis \(Redis at 127\.0\.0\.1:\d+ did not answer within 5s: check whether it is paused \(CLIENT PAUSE, SIGSTOP\) or overloaded\); sending it again until Redis answers or the drill ends$/m);
    expect(result.stderr).toMatch(/^phase 1: Redis answers again; job=\d+ pushed \S+ after its first send$/m);
    expect(result.stderr).not.toMatch(/the drill stops here/);
    const summary = JSON.parse(result.stdout.trim().split("\n").pop()!) as Summary;
    expect(summary.stopped_early).toEqual([]);
    expect(summary.verdict).toBe("ran");
    // QA: each re-send took a new id, and the timed-out ones ran when Redis woke: report called those ids lost.
    const report = JSON.parse((await runDrill(["--state-dir", stateDir, "report", "--name", "upearly", "--format", "json"])).stdout) as ReportDocument;
    expect(report.jobs_where, JSON.stringify(report.notes)).toMatchObject({ ids_issued: summary.pushed_ids.length, not_found: [], duplicates: [] });
    expect(report.notes.join("\n")).not.toMatch(/on no list/);
    await rollbackLosesNothing(stateDir, state, summary.pushed_ids);
  }, 180_000);

  // QA: stopped at 4 s and resumed long after up gave up: up said Redis
  // "refused a push", pointed at a redis.log that says nothing, said a push
  // failed after "the drill stops here", blamed a --redis nobody gave, and
  // report called 4 ids lost.
  it("the embedded redis-server stopped past the drill's end (--duration 8s): up names the stop, and no id is lost once it resumes", async () => {
    const { stateDir, up, state } = await startUp("stalled", { json: false, extra: ["--duration", "8s"] });
    const redis = state.processes.find((p) => p.role === "redis")!.pid!;
    await trickleStarted(state);
    process.kill(redis, "SIGSTOP");
    let result;
    try {
      result = await up;
    } finally {
      process.kill(redis, "SIGCONT");
    }
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(1);
    const stop = /^redis: did not answer a push for (\S+) \d+s into the drill: Redis at 127\.0\.0\.1:\d+ did not answer within 5s: check whether it is paused \(CLIENT PAUSE, SIGSTOP\) or overloaded; redis-server pid (\d+) is stopped \(state T.*\); the drill stops here$/m.exec(result.stdout);
    expect(stop, out).not.toBeNull();
    expect(Number(stop![2])).toBe(redis);
    // Timed from the push's first send, not from its timeout (QA: "for 1ms" after ~5 s of silence).
    expect(parseDuration(stop![1]!, "for")).toBeGreaterThanOrEqual(4000);
    expect(out).not.toMatch(/refused a push|give --redis|DRILL_REDIS_URL/);
    // Nothing about a push after the drill stopped.
    const after = result.stdout.slice(stop!.index);
    expect(after).not.toMatch(/push failed/);
    expect(out).toMatch(/^phase 1: its last push got no reply: if Redis runs it when it answers, that job is queued under the next id/m);
    expect(result.stdout).toMatch(/^summary: not read: the drill's Redis did not answer at the drill's end; `drill --state-dir \S+ report --name upearly --format md` once it answers$/m);
    // The phases past --duration are named after those that ran, not before phase 0.
    expect(result.stdout).toMatch(/^phase 0: pack[\s\S]*^phase 2: skipped: starts at 12s, not before the drill's end at 8s\nphase 3: skipped: starts at 14s/m);
    expect(result.stderr).toMatch(/drill upearly stopped before its end: redis did not answer a push for \S+; run /);

    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "upearly", "--format", "json"]);
    expect(report.exitCode, report.stderr).toBe(0);
    const doc = JSON.parse(report.stdout) as ReportDocument;
    const where = doc.jobs_where!;
    expect(where.not_found, JSON.stringify(where)).toEqual([]);
    expect(where.duplicates).toEqual([]);
    expect(where.distinct_ids).toBe(where.ids_issued);
    // QA: "22 of 33 jobs not packed" beside 12 ids issued: the unanswered push, sent before the stop, ran once
    // Redis resumed. up records it, so the report's end line and its id count add up.
    const closing = /^drill upearly: packer stopped after (\d+) jobs \((\d+) not packed: the drill stopped first; 1 of them got no reply: queued under the next id if Redis ran it\)/m.exec(result.stdout);
    expect(closing, out).not.toBeNull();
    const ended = (doc.drill as { ended: { pushed: number; not_packed: number; unanswered_pushes: number } }).ended;
    expect(ended).toMatchObject({ pushed: Number(closing![1]), not_packed: Number(closing![2]), unanswered_pushes: 1 });
    expect(where.ids_issued).toBe(ended.pushed + 1);
    const text = await runDrill(["--state-dir", stateDir, "report", "--name", "upearly"]);
    expect(text.stdout).toContain(`; ${ended.not_packed} of ${ended.pushed + ended.not_packed} jobs not packed (1 of them got no reply to its push: queued under the next id if Redis ran it)`);
    const issued = Array.from({ length: where.ids_issued! }, (_, i) => String(i + 1));
    await rollbackLosesNothing(stateDir, state, issued);
  }, 180_000);

  // QA: Ctrl-C with the embedded redis-server stopped took ~8 s: the summary asked the stopped
  // server and waited out the 5 s connect bound. up knows the pid: it says the server is stopped.
  it("Ctrl-C with the embedded redis-server stopped: exit 130, the summary not read, naming the stopped pid; nothing lost once it resumes", async () => {
    const { stateDir, up, state } = await startUp("interrupted-stopped", { json: false });
    const redis = state.processes.find((p) => p.role === "redis")!.pid!;
    await trickleStarted(state);
    process.kill(redis, "SIGSTOP");
    let result;
    try {
      await sleep(500);
      process.kill(state.owner.pid, "SIGINT");
      result = await up;
    } finally {
      process.kill(redis, "SIGCONT");
    }
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(130);
    expect(result.stdout).toMatch(new RegExp(`^summary: not read: redis-server pid ${redis} is stopped \\(state T.*\\); \`drill --state-dir \\S+ report --name upearly --format md\` once it runs again$`, "m"));
    expect(out).not.toMatch(/summary unavailable/);
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "upearly", "--format", "json"]);
    expect(report.exitCode, report.stderr).toBe(0);
    const where = (JSON.parse(report.stdout) as ReportDocument).jobs_where!;
    expect(where.not_found, JSON.stringify(where)).toEqual([]);
    const issued = Array.from({ length: where.ids_issued! }, (_, i) => String(i + 1));
    await rollbackLosesNothing(stateDir, state, issued);
  }, 180_000);

  // QA (the worker OOM-killed by --memory-max 1M): phase 0's decision lines
  // (admit job=1, reject_packed_tokens job=2…) printed after "phase 1: not
  // started" and the summary: up left its loop without reading the gate's
  // tail. The worker is SIGKILLed here once the gate is deciding, so the stop
  // falls among decisions every time (an OOM at the worker's start often
  // comes before the gate's first).
  it("the worker killed while the gate decides: every decision made before the stop prints before the stop line, and none after the lines that close the drill", async () => {
    const { stateDir, up, state } = await startUp("decisions", { json: false, file: streamFile });
    const gateOut = path.join(runDir(stateDir, "upearly", state.runId), "gate.out");
    const decisionLine = /^(admit|reject_[a-z_]+|dead) job=\d+/;
    const decidedSoFar = () => (existsSync(gateOut) ? readFileSync(gateOut, "utf8").split("\n").filter((l) => decisionLine.test(l)) : []);
    const waitedFrom = Date.now();
    while (decidedSoFar().length < 20) {
      if (Date.now() - waitedFrom > 30_000) throw new Error(`the gate decided ${decidedSoFar().length} jobs in 30 s`);
      await sleep(50);
    }
    process.kill(state.processes.find((p) => p.role === "worker")!.pid!, "SIGKILL");
    const before = decidedSoFar();
    const result = await up;
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(1);
    const lines = result.stdout.split("\n");
    const stop = lines.findIndex((l) => /^worker: exited \(killed by a signal\) \d+s into the drill.*; the drill stops here/.test(l));
    expect(stop, out).toBeGreaterThan(-1);
    for (const line of before) {
      const at = lines.indexOf(`  ${line}`);
      expect(at, `${line} printed before the stop line\n${out}`).toBeGreaterThan(-1);
      expect(at, `${line} printed before the stop line\n${out}`).toBeLessThan(stop);
    }
    const notStarted = lines.findIndex((l) => l.startsWith("phase 1: not started: the drill stopped before 12s"));
    expect(lines[notStarted + 1], out).toMatch(/^phase 2: not started: the drill stopped before 14s; inject anon 8\.0MiB not run$/);
    const report = lines.indexOf("drill report: upearly");
    const closing = lines.findIndex((l) => l.startsWith("drill upearly: packer stopped after "));
    expect(stop).toBeLessThan(notStarted);
    expect(notStarted).toBeLessThan(report);
    expect(report).toBeLessThan(closing);
    // The gate's lines, then the phases that never ran, the summary and the closing lines.
    const lastDecision = lines.findLastIndex((l) => decisionLine.test(l.trimStart()) && l.startsWith("  "));
    expect(lastDecision, out).toBeLessThan(notStarted);
    expect(result.stderr).toContain("drill upearly stopped before its end: worker exited (killed by a signal)");
    const pushed = Array.from({ length: Number(/packer stopped after (\d+) jobs/.exec(lines[closing]!)![1]) }, (_, i) => String(i + 1));
    await rollbackLosesNothing(stateDir, state, pushed);
  }, 180_000);

  // QA: a rollback run while up ran stopped it (143), and up then told the operator to run a rollback.
  it("a rollback stops a running up: up exits 143 saying the rollback is under way, and the rollback finishes clean", async () => {
    const { stateDir, up, state } = await startUp("rolledback", { json: false });
    await trickleStarted(state);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "upearly"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const result = await up;
    const out = result.stdout + result.stderr;
    expect(result.exitCode, out).toBe(143);
    expect(result.stdout).toMatch(/^A rollback of this drill is under way \(it stopped this up\)/m);
    expect(result.stdout).not.toMatch(/^Run `|^Deny-all by hand/m);
    expect(result.stdout).toMatch(/^summary: not read: a rollback is under way/m);
    assertHostClean(stateDir, "upearly", state);
    expect((readState(stateDir, "upearly") as DrillState | null)?.phase ?? "complete").toBe("complete");
    // QA: the report of a run a rollback took over had pushed/not_packed null; up wrote them beside its logs.
    const packed = /^drill upearly: packer stopped after (\d+) jobs(?: \((\d+) not packed)?/m.exec(result.stdout);
    expect(packed, out).not.toBeNull();
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "upearly", "--format", "json"], { timeout: 60_000 });
    expect(report.exitCode, report.stderr).toBe(0);
    const ended = (JSON.parse(report.stdout) as { drill: { ended: { verdict: string; pushed: number | null; not_packed: number | null } } }).drill.ended;
    expect(ended).toMatchObject({ verdict: "rolled_back", pushed: Number(packed![1]), not_packed: Number(packed![2] ?? 0) });
  }, 180_000);
});

function readLink(file: string): string | null {
  try {
    return readlinkSync(file);
  } catch {
    return null;
  }
}
