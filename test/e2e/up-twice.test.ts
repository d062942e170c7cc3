import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import type { ReportDocument } from "../../src/report/render.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping drill up twice: ${skip}`);

// One cgroup name per case: a case that fails half-way must not block the other.
const CGROUPS = { embedded: "uptwice-emb", given: "uptwice-given" };

/** A drill of a few seconds: three jobs, no hog. Two runs of it must not share anything. */
const drillNamed = (name: string) => tinyDrill(name, { duration: "3s", gate: "{ interval: 500ms }", phases: [["0s", pack(3, 20000)]] });

interface UpSummary {
  name: string;
  run_id: string;
  pushed_ids: string[];
}

/**
 * QA: a second `drill up` of the same drill started its embedded Redis on the
 * first run's AOF and appended to its logs: job ids went on from the first
 * run, and `drill report` (the incident note) named the new run while
 * counting the old one's decisions. With a given --redis the second run
 * inherited the queue's keys the same way.
 */
describe.skipIf(skip !== null)("drill up → rollback → up again (real cgroup)", () => {
  let root: string;
  let stateDir: string;
  let server: RedisServer | undefined;
  let redis: Redis | undefined;
  const drill = (args: string[], timeout = 90_000) => runDrill(["--state-dir", stateDir, ...args], { timeout });
  // The global --redis goes before the command, up's own --queue after it.
  const up = (file: "embedded" | "given", globals: string[] = [], own: string[] = []) =>
    drill(["--json", ...globals, "up", "--drill", path.join(root, `${file}.yaml`), "--parent", "self", "--name", CGROUPS[file], "--file-dir", root, ...own], 120_000);

  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-twice-"));
    stateDir = path.join(root, "state");
    writeFileSync(path.join(root, "embedded.yaml"), drillNamed("twiceemb"));
    writeFileSync(path.join(root, "given.yaml"), drillNamed("twicegiven"));
  });
  afterAll(async () => {
    await drill(["rollback"]);
    if (redis) await closeRedis(redis);
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
    const left = Object.values(CGROUPS).flatMap((name) => cgroupDirsLeft(realWorkerCgroup(name)));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("embedded Redis: the second run starts from nothing, keeps the first run's data, and report covers only the second run", async () => {
    const first = await up("embedded");
    expect(first.exitCode, first.stderr).toBe(0);
    const run1 = JSON.parse(first.stdout.trim().split("\n").pop()!) as UpSummary;
    const state1 = readState(stateDir, "twiceemb") as DrillState;
    const rollback1 = await drill(["rollback", "--name", "twiceemb"]);
    expect(rollback1.exitCode, rollback1.stdout + rollback1.stderr).toBe(0);
    const rolledBack1 = readState(stateDir, "twiceemb") as DrillState;

    const second = await up("embedded");
    expect(second.exitCode, second.stderr).toBe(0);
    const run2 = JSON.parse(second.stdout.trim().split("\n").pop()!) as UpSummary;
    const state2 = readState(stateDir, "twiceemb") as DrillState;
    expect(run2.run_id).not.toBe(run1.run_id);

    // A fresh queue: job ids start again at 1, as the first run's did.
    expect(run1.pushed_ids).toEqual(["1", "2", "3"]);
    expect(run2.pushed_ids).toEqual(["1", "2", "3"]);
    // Its own Redis dir; the first run's AOF is still there (nothing deleted).
    expect(state2.redis.embedded!.dir).not.toBe(state1.redis.embedded!.dir);
    expect(existsSync(path.join(state1.redis.embedded!.dir, "appendonlydir"))).toBe(true);
    // The up's own follow of gate.out printed only this run's decisions: no job beyond 3.
    expect(second.stderr).not.toMatch(/ job=[4-9]\b/);

    const live = await drill(["report", "--name", "twiceemb", "--format", "json"]);
    expect(live.exitCode, live.stderr).toBe(0);
    assertOnlyRun(JSON.parse(live.stdout) as ReportDocument, state2);

    const rollback2 = await drill(["rollback", "--name", "twiceemb"]);
    expect(rollback2.exitCode, rollback2.stdout + rollback2.stderr).toBe(0);
    expect(rollback2.stdout).toMatch(/twiceemb: LLEN [0-3] in the drain/);
    assertHostClean(stateDir, "twiceemb", state2);
    const exports = readdirSync(path.join(stateDir, "twiceemb")).filter((f) => /^final-.*\.jsonl$/.test(f)).sort();
    expect(exports).toHaveLength(2);
    assertNoJobLostInExport(path.join(stateDir, "twiceemb", exports[1]!), "jobs", run2.pushed_ids);

    // From rollback's export: still the second run alone.
    const fromExport = await drill(["report", "--name", "twiceemb", "--format", "json"]);
    expect(fromExport.exitCode, fromExport.stderr).toBe(0);
    const exported = JSON.parse(fromExport.stdout) as ReportDocument;
    expect(exported.source).toEqual({ kind: "export", where: path.join(stateDir, "twiceemb", exports[1]!) });
    assertOnlyRun(exported, state2);

    // QA: the second up replaced the run report reads without a word, and the first could not be reported again.
    expect(second.stderr).toContain(`up: drill twiceemb's previous run ${run1.run_id} (rolled back at `);
    expect(second.stderr).toMatch(new RegExp(`report --name twiceemb --run ${run1.run_id}\` the previous one`));
    const earlier = await drill(["report", "--name", "twiceemb", "--run", run1.run_id, "--format", "json"]);
    expect(earlier.exitCode, earlier.stderr).toBe(0);
    const firstRun = JSON.parse(earlier.stdout) as ReportDocument;
    expect(firstRun.source).toEqual({ kind: "export", where: path.join(stateDir, "twiceemb", exports[0]!) });
    expect(firstRun.drill).toMatchObject({ run_id: run1.run_id, phase: "complete" });
    expect(firstRun.jobs_where).toMatchObject({ ids_issued: 3, not_found: [], duplicates: [] });
    // QA: the export note said the drill's Redis was gone, which is not why an earlier run is read from its export.
    expect(firstRun.notes.join("\n")).toContain(`(run ${run1.run_id} is an earlier run: a later up replaced it)`);
    expect(firstRun.notes.join("\n")).not.toContain("is gone");
    expect(firstRun.drill?.ended?.rollback_started_at).toBe(rolledBack1.rollbackStartedAt);
    expect(firstRun.drill?.ended?.rollback_started_at).toMatch(/^\d{4}-/);
    // A --redis given beside --run is not read, and the report says so (QA: silently ignored).
    const withRedis = await drill(["--redis", "redis://127.0.0.1:1", "report", "--name", "twiceemb", "--run", run1.run_id, "--format", "json"]);
    expect(withRedis.exitCode, withRedis.stderr).toBe(0);
    expect((JSON.parse(withRedis.stdout) as ReportDocument).notes.join("\n")).toContain("(--redis redis://127.0.0.1:1 is not read for it)");
    // A state dir copied elsewhere reads its own copy of the export (QA: it read the original's), and one gone is said as such.
    const moved = path.join(root, "state-moved");
    cpSync(stateDir, moved, { recursive: true });
    const fromCopy = await runDrill(["--state-dir", moved, "report", "--name", "twiceemb", "--run", run1.run_id, "--format", "json"], { timeout: 90_000 });
    expect(fromCopy.exitCode, fromCopy.stderr).toBe(0);
    expect((JSON.parse(fromCopy.stdout) as ReportDocument).source).toEqual({ kind: "export", where: path.join(moved, "twiceemb", exports[0]!) });
    rmSync(path.join(moved, "twiceemb", exports[0]!));
    const gone = await runDrill(["--state-dir", moved, "report", "--name", "twiceemb", "--run", run1.run_id], { timeout: 90_000 });
    expect(gone.exitCode).toBe(1);
    expect(gone.stderr).toContain(`drill: run ${run1.run_id} of drill twiceemb cannot be reported: its export ${path.join(moved, "twiceemb", exports[0]!)} is gone`);
    const unknown = await drill(["report", "--name", "twiceemb", "--run", "nosuch"]);
    expect(unknown.exitCode).toBe(2);
    expect(unknown.stderr).toContain(`--run: no run nosuch of drill twiceemb kept in ${path.join(stateDir, "twiceemb", "runs")} (kept: ${run1.run_id} (created `);
    // A run dir renamed by hand is not reported under the wrong id; an unreadable kept state is listed, not dropped (QA).
    cpSync(path.join(moved, "twiceemb", "runs", run1.run_id), path.join(moved, "twiceemb", "runs", "renamed"), { recursive: true });
    const renamed = await runDrill(["--state-dir", moved, "report", "--name", "twiceemb", "--run", "renamed"], { timeout: 90_000 });
    expect(renamed.exitCode).toBe(1);
    expect(renamed.stderr).toContain(`--run renamed: ${path.join(moved, "twiceemb", "runs", "renamed", "state.json")} holds run ${run1.run_id} of drill twiceemb, not run renamed`);
    mkdirSync(path.join(moved, "twiceemb", "runs", "torn"));
    writeFileSync(path.join(moved, "twiceemb", "runs", "torn", "state.json"), "{");
    const listed = await runDrill(["--state-dir", moved, "report", "--name", "twiceemb", "--run", "nosuch"], { timeout: 90_000 });
    expect(listed.exitCode).toBe(2);
    expect(listed.stderr).toMatch(/kept: .*, torn \(unreadable: .*torn\/state\.json is not a drill state file/);
  }, 240_000);

  it("a given --redis whose queue holds an earlier run's keys: the next up refuses (exit 3) naming them, and deletes nothing", async () => {
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-up-twice" });
    const first = await up("given", ["--redis", server.url], ["--queue", "twiceq"]);
    expect(first.exitCode, first.stderr).toBe(0);
    const rollback = await drill(["--redis", server.url, "rollback", "--name", "twicegiven"]);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const state1 = readState(stateDir, "twicegiven") as DrillState;
    const before = await snapshot(redis, "twiceq");
    expect(before["twiceq:seq"]).toBe("3");

    const second = await up("given", ["--redis", server.url], ["--queue", "twiceq"]);
    expect(second.exitCode, second.stdout + second.stderr).toBe(3);
    for (const key of ["twiceq:seq", "twiceq:events", "twiceq:stats"]) expect(second.stderr).toContain(key);
    expect(second.stderr).toContain("--queue");
    // Whose they are: this state dir knows its own rolled-back run left them (QA: it hedged "or another drill's").
    expect(second.stderr).toContain(`already holds keys (those of drill twicegiven's run ${state1.runId} (exported to ${state1.rollback!.exported!}): rollback exports them and leaves them)`);
    // Refused before anything: the first run's state and every key as they were.
    expect(readState(stateDir, "twicegiven")).toEqual(state1);
    expect(await snapshot(redis, "twiceq")).toEqual(before);
  }, 240_000);
});

/** The report names run `state` and counts its three decisions, nothing from the run before. */
function assertOnlyRun(report: ReportDocument, state: DrillState): void {
  expect(report.drill?.run_id).toBe(state.runId);
  expect(report.decisions?.total, JSON.stringify(report.decisions)).toBe(3);
  const createdMs = Date.parse(state.createdAt);
  expect(Date.parse(report.window.from)).toBeGreaterThanOrEqual(createdMs);
  for (const line of [report.first_reject, report.last_reject]) {
    if (line) expect(Date.parse(line.ts!)).toBeGreaterThanOrEqual(createdMs);
  }
  // This run's admits, each finished (8 tokens at 200/s): a job of the run before would be one more.
  const admits = report.decisions!.rows.find((r) => r.reason === "admit")?.count;
  expect(admits, JSON.stringify(report.decisions)).toBeGreaterThan(0);
  expect(report.first_token, "no first-token figures").not.toBeNull();
  expect(report.first_token!.admitted).toBe(admits);
  expect(report.first_token!.finished).toBe(admits);
  expect(report.totals?.jobs_done, JSON.stringify(report.totals)).toBe(admits);
}

/** Every key of the queue with a comparable value (type and contents); gate heartbeats (TTL) expire by themselves. */
async function snapshot(redis: Redis, queue: string): Promise<Record<string, unknown>> {
  const keys = [...new Set([queue, `${queue}_drain`, ...(await redis.keys(`${queue}:*`))])].sort();
  const out: Record<string, unknown> = {};
  for (const key of keys) {
    const type = await redis.type(key);
    if (type === "none" || (await redis.pttl(key)) > 0) continue;
    if (type === "string") out[key] = await redis.get(key);
    else if (type === "list") out[key] = await redis.lrange(key, 0, -1);
    else if (type === "hash") out[key] = await redis.hgetall(key);
    else if (type === "stream") out[key] = await redis.xrange(key, "-", "+");
    else out[key] = type;
  }
  return out;
}
