import { mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportKeys } from "../../src/drill/drain.js";
import { drillDir, writeState, type DrillState } from "../../src/drill/state.js";
import { decodeJob } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { LAB_LABEL } from "../../src/report/build.js";
import type { ReportDocument } from "../../src/report/render.js";
import { doneRecord, emptyPassStats } from "../../src/worker/plan.js";
import { runDrill } from "../helpers/cli.js";
import { freePort, startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { CALM_PSI, HOT_PSI } from "../helpers/psiText.js";
import { flat } from "../helpers/reportText.js";

/**
 * `drill report` on the built binary: decisions written by the real packer
 * and gate (fake host PSI), finished jobs written the way the worker writes
 * them (plan.ts doneRecord), a sidecar recording, then the same drill read
 * back from rollback's export with no Redis at all.
 */


let server: RedisServer;
let redis: Redis;
let tmp: string;
let n = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-e2e-report" });
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-report-e2e-"));
}, 120_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function fakeProc(text: string): string {
  const procfs = path.join(tmp, `proc${++n}`);
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  writeFileSync(path.join(procfs, "pressure", "memory"), text);
  return procfs;
}

function state(name: string, queue: string, url: string, over: Partial<DrillState> = {}): DrillState {
  return {
    version: 1,
    name,
    runId: `run-${name}`,
    drillFile: "drills/smoke.yaml",
    createdAt: new Date(Date.now() - 60_000).toISOString(),
    phase: "running",
    queue,
    redis: { url, embedded: null },
    cgroup: null,
    processes: [],
    fileDir: null,
    owner: { pid: process.pid, startTime: null },
    ...over,
  };
}

const drill = (args: string[], env: Record<string, string> = {}) => runDrill(args, { env });

/** pack 4 × 24000 → gate (calm): admit job 1, reject_packed_tokens 2-4; pack 2 more → gate (hot): reject_host_pressure. */
async function populate(queue: string): Promise<void> {
  const env = { DRILL_REDIS_URL: server.url };
  expect((await drill(["pack", "--jobs", "4", "--prompt-tokens", "24000", "--queue", queue], env)).exitCode).toBe(0);
  const calm = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "4"], env);
  expect(calm.stdout.trim().split("\n")).toEqual([
    "admit job=1 packed=24000 limit=32000",
    "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry",
    "reject_packed_tokens job=3 packed=48000 limit=32000 route=retry",
    "reject_packed_tokens job=4 packed=48000 limit=32000 route=retry",
  ]);
  expect((await drill(["pack", "--jobs", "3", "--queue", queue], env)).exitCode).toBe(0);
  const hot = await drill(["--procfs", fakeProc(HOT_PSI), "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "2"], env);
  expect(hot.stdout.trim().split("\n")).toEqual(["reject_host_pressure job=5 psi=12.40 route=retry", "reject_host_pressure job=6 psi=12.40 route=retry"]);

  // The worker's side: job 1 finished late, recorded as src/worker/plan.ts records it.
  const keys = queueKeys(queue);
  const admitted = await redis.lrangeBuffer(keys.admitted, 0, -1);
  const decoded = decodeJob(admitted[0]!);
  if (!decoded.ok) throw new Error(decoded.reason);
  // Its first token came 9120 ms after enqueue (deadline 8000): the record is dated in the past so
  // the whole job lies inside the recording and the window, as it would after a real late job.
  // Dated from its admit event, not from now: the hot gate's run in between may take seconds on a
  // loaded host, which put the admit before done and cut its slot (enqueue → done) short.
  const events = (await redis.xrange(keys.events, "-", "+")).map(([, fields]) => Object.fromEntries(fields.flatMap((f, i) => (i % 2 === 0 ? [[f, fields[i + 1]]] : []))) as Record<string, string>);
  const admit = events.find((e) => e.reason === "admit" && e.job === "1");
  if (!admit) throw new Error(`no admit event of job 1 in ${keys.events}`);
  const job = { ...decoded.job, enqueue_ts: Number(admit.ts) - 12_000 };
  const firstTokenAt = job.enqueue_ts + 9120;
  const record = doneRecord(job, "infer", firstTokenAt, firstTokenAt + 500, 256, emptyPassStats(), job.prompt_tokens * 4096);
  await redis.multi().lrem(keys.admitted, 1, admitted[0]!).rpush(keys.done, JSON.stringify(record)).hincrby(keys.stats, "tokens_out", 256).hincrby(keys.stats, "jobs_done", 1).hincrby(keys.stats, "jobs_late", 1).exec();
}

/** A sidecar recording: one sample a second around now, 10 % cgroup stall, PSI peaking at 12.40. */
function writeRecording(dir: string, startMs: number, endMs: number): void {
  const lines: string[] = [];
  for (let t = startMs, i = 0; t <= endMs; t += 1000, i++) {
    lines.push(
      JSON.stringify({
        ts: new Date(t).toISOString(),
        psi_mem_some_avg10: i === 3 ? 12.4 : 2,
        psi_mem_some_rate: 8,
        cg_psi_mem_some_avg10: 5,
        cg_psi_mem_some_rate: 10,
        cg_mem_current: 1024 ** 3,
        cg_mem_peak: 1.5 * 1024 ** 3,
        cg_mem_max: 2 * 1024 ** 3,
        cg_oom_kill: i >= 5 ? 1 : 0,
        stall_ms_p99: 120,
        alarm: i === 3 ? ["reclaim_not_underload"] : [],
        missing: [],
      }),
    );
  }
  writeFileSync(path.join(dir, "watch.jsonl"), `${lines.join("\n")}\n`);
}

describe("drill report (built binary)", () => {
  let stateDir: string;
  let queue: string;

  beforeAll(async () => {
    stateDir = path.join(tmp, "state-live");
    queue = `r${++n}`;
    await populate(queue);
    writeState(stateDir, state("lab", queue, server.url));
    const done = JSON.parse((await redis.lindex(`${queue}:done`, 0))!) as { enqueue_ts: number; done_ts: number };
    writeRecording(drillDir(stateDir, "lab"), done.enqueue_ts - 2000, Date.now());
  }, 120_000);

  it("md from the drill's live Redis: decisions, seed-format reject lines, first token, pressure, cost_proxy, drain check", async () => {
    const r = await drill(["--state-dir", stateDir, "report", "--format", "md"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const md = r.stdout;
    expect(md).not.toContain("\u001b[");
    expect(md).toContain(`> **${LAB_LABEL}**`);
    expect(md).toContain("## drill report: lab");
    expect(md).toContain("| admit | 1 | 16.7% |  |");
    expect(md).toContain("| reject_packed_tokens | 3 | 50.0% |  |");
    expect(md).toContain("| reject_host_pressure | 2 | 33.3% |  |");
    expect(md).toContain("| reject_deadline_slack | 0 | 0.0% |  |");
    expect(md).toMatch(/\| first \| \S+ \| `reject_packed_tokens job=2 packed=48000 limit=32000 route=retry` \|/);
    expect(md).toMatch(/\| last \| \S+ \| `reject_host_pressure job=6 psi=12.40 route=retry` \|/);
    expect(md).toContain("| first token p99 | 9120 ms |");
    expect(md).toContain("| p99 against deadline | over by 1120 ms |");
    expect(md).toContain("| late jobs | 1 of 1 judged (1 finished late: job=1; 0 admitted and without a first token at their deadline) |");
    expect(md).toMatch(/\| psi_mem_some_avg10 \(host\) \| 12\.40 \| \S+ \|/);
    expect(md).toMatch(/\| OOM kills \| 1 in window \(cg_oom_kill=1\) \|/);
    expect(md).toContain("| `LLEN " + queue + "` | 1 |"); // job 7 still waits
    expect(md).toContain("| rejects in window | 5 |");
    expect(md).toContain("`cost_proxy = prompt_tokens + completion_tokens + retry_count * prompt_tokens + stall_ms * workers_held / 1000`");
    // 9620 ms in its slot (enqueue → done: the admit event is dated after done here) at 10 % cgroup stall = 962 ms → 24000 + 256 + 0.962
    expect(md).toContain("| job=1 | 24000 | 256 | 0 | 962 | 100% | 1 | 24256.962 |");
  });

  it("json is one document with the same figures", async () => {
    const r = await drill(["--state-dir", stateDir, "--json", "report"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as ReportDocument;
    expect(report.label).toBe(LAB_LABEL);
    expect(report.source).toEqual({ kind: "live", where: server.url });
    expect(report.decisions?.rows.slice(0, 4).map((row) => [row.reason, row.count])).toEqual([
      ["admit", 1],
      ["reject_host_pressure", 2],
      ["reject_deadline_slack", 0],
      ["reject_packed_tokens", 3],
    ]);
    expect(report.first_reject?.line).toBe("reject_packed_tokens job=2 packed=48000 limit=32000 route=retry");
    expect(report.last_reject?.line).toBe("reject_host_pressure job=6 psi=12.40 route=retry");
    expect(report.first_token).toMatchObject({ finished: 1, p50_ms: 9120, p99_ms: 9120, late: 1, late_jobs: ["1"] });
    expect(report.totals).toEqual({ tokens_out: 256, retry_count: 0, jobs_done: 1, jobs_late: 1 }); // retry_count: retried jobs the worker ran; the 5 nacks are in nacked
    expect(report.retries).toEqual({ retry_count_total: 0, nacked_to_retry_in_window: 5, finished_after_retry: 0 });
    expect(report.pressure.peak_psi_mem_some_avg10.value).toBe(12.4);
    expect(report.pressure.alarms).toEqual([{ alarm: "reclaim_not_underload", samples: 1 }]);
    expect(report.cost_proxy?.jobs[0]?.stall_ms).toBeGreaterThan(0);
    expect(report.cost_proxy?.total).toBeGreaterThan(24256);
    expect(report.drain).toMatchObject({ queue_len: 1, head_job: "7", drain_len: 0, rejects_in_window: 5 });
    expect(report.drain.head_age_ms).toBeGreaterThanOrEqual(0);
  });

  it("--since 1ms leaves the window empty: zero decisions, nothing made up", async () => {
    const r = await drill(["--state-dir", stateDir, "report", "--format", "json", "--since", "1ms"]);
    const report = JSON.parse(r.stdout) as ReportDocument;
    expect(report.decisions?.total).toBe(0);
    expect(report.first_reject).toBeNull();
    expect(report.first_token?.p99_ms).toBeNull();
  });

  it("text by default; --redis with no drill dir reports the queue without a recording", async () => {
    const text = await drill(["--state-dir", stateDir, "report"]);
    expect(text.exitCode).toBe(0);
    expect(flat(text.stdout)).toContain("reject_packed_tokens job=2 packed=48000 limit=32000 route=retry");
    const empty = path.join(tmp, "state-empty");
    const bare = await drill(["--state-dir", empty, "--redis", server.url, "report", "--queue", queue, "--format", "json"]);
    expect(bare.exitCode, bare.stderr).toBe(0);
    const report = JSON.parse(bare.stdout) as ReportDocument;
    expect(report.drill).toBeNull();
    expect(report.pressure.recording).toBeNull();
    expect(report.pressure.peak_psi_mem_some_avg10.value).toBeNull();
    expect(report.notes.join("\n")).toContain("no recording");
  });

  it("--recording: the step-by-step path's `watch --record` file gives the pressure rows and cost_proxy; a file without samples is exit 2 naming the flag (M4)", async () => {
    const empty = path.join(tmp, "state-empty");
    const file = path.join(drillDir(stateDir, "lab"), "watch.jsonl");
    const r = await drill(["--state-dir", empty, "--redis", server.url, "report", "--queue", queue, "--recording", file, "--format", "json"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as ReportDocument;
    expect(report.pressure.recording).toBe(file);
    expect(report.pressure.peak_psi_mem_some_avg10.value).toBe(12.4);
    expect(report.cost_proxy?.jobs_costed).toBe(1);
    expect(report.notes.join("\n")).not.toContain("no recording");

    const none = path.join(tmp, "none.jsonl");
    const missing = await drill(["--state-dir", empty, "--redis", server.url, "report", "--queue", queue, "--recording", none]);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toContain(`--recording: cannot read ${none}: ENOENT`);
    const junk = path.join(tmp, "junk.jsonl");
    writeFileSync(junk, "not a sample\n");
    const noSample = await drill(["--state-dir", empty, "--redis", server.url, "report", "--queue", queue, "--recording", junk]);
    expect(noSample.exitCode).toBe(2);
    expect(noSample.stderr).toContain(`--recording: ${junk} holds no watch sample`);
  });

  it("after rollback: the export file, no Redis at all", async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const gone = path.join(tmp, "state-gone");
    writeState(gone, state("gone", queue, dead, { phase: "complete", redis: { url: dead, embedded: { dir: "/nonexistent", port: 1 } } }));
    const dir = drillDir(gone, "gone");
    const file = path.join(dir, `final-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
    await exportKeys(redis, queueKeys(queue), file);

    const md = await drill(["--state-dir", gone, "report", "--format", "md"]);
    expect(md.exitCode, md.stderr).toBe(0);
    expect(md.stdout).toContain(`export ${file}`);
    expect(md.stdout).toContain("| reject_packed_tokens | 3 | 50.0% |  |");
    expect(md.stdout).toMatch(/\| last \| \S+ \| `reject_host_pressure job=6 psi=12.40 route=retry` \|/);
    expect(md.stdout).toContain("| first token p99 | 9120 ms |");
    expect(md.stdout).toContain("| psi_mem_some_avg10 (host) | n/a (no recording) |  |");
    expect(md.stdout).toContain(`Redis not used: ${dead}`);

    const json = JSON.parse((await drill(["--state-dir", gone, "report", "--format", "json"])).stdout) as ReportDocument;
    expect(json.source).toEqual({ kind: "export", where: file });
    // The run is over (complete) with no end recorded: the window ends at its last decision or finish, before the export.
    expect(json.window.anchored).toBe("run_end");
    expect(json.notes.join("\n")).toContain("the window ends at the run's end, before the export");
    expect(md.stdout).toContain("(ends at the run's end)");
    expect(json.drain).toMatchObject({ queue_len: 1, head_job: "7", rejects_in_window: 5 });
    expect(json.cost_proxy?.jobs[0]?.stall_ms).toBeNull();
    expect(json.cost_proxy?.total).toBeNull();

    // state.json gone too (rollback's "state file gone"): the export alone still names the drill.
    rmSync(path.join(dir, "state.json"));
    expect(readdirSync(dir)).toEqual([path.basename(file)]);
    const alone = await drill(["--state-dir", gone, "report", "--format", "json"]);
    expect(alone.exitCode, alone.stderr).toBe(0);
    expect((JSON.parse(alone.stdout) as ReportDocument).drill?.name).toBe("gone");

    // `drill up` sends `watch --json` to watch.out: read as the recording when there is no watch.jsonl.
    writeRecording(dir, Date.now() - 5000, Date.now());
    renameSync(path.join(dir, "watch.jsonl"), path.join(dir, "watch.out"));
    const withOut = JSON.parse((await drill(["--state-dir", gone, "report", "--format", "json", "--since", "1h"])).stdout) as ReportDocument;
    expect(withOut.pressure.recording).toBe(path.join(dir, "watch.out"));
  });

  it("where the jobs are, live: a dead worker's working list and a dead gate's processing list are rows of their own (QA 7)", async () => {
    const q = `r${++n}`;
    const keys = queueKeys(q);
    const job = (id: string) => JSON.stringify({ id, prompt_tokens: 1000, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
    await redis
      .multi()
      .set(keys.seq, "6")
      .rpush(keys.ready, job("6"))
      .rpush(keys.processing("gdead"), job("5"))
      .rpush(keys.working("wdead"), job("2"), job("3"), job("4"))
      .set(`${q}:workers:walive`, "tok", "PX", 60_000)
      .rpush(keys.working("walive"), job("1"))
      .exec();
    const r = await drill(["--state-dir", path.join(tmp, "state-where"), "--redis", server.url, "report", "--queue", q, "--format", "json"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as ReportDocument;
    expect(report.jobs_where?.rows.map((row) => [row.key, row.count, row.holder_alive])).toEqual([
      [q, 1, null],
      [`${q}:processing:gdead`, 1, false],
      [`${q}:admitted`, 0, null],
      [`${q}:working:walive`, 1, true],
      [`${q}:working:wdead`, 3, false],
      [`${q}:done`, 0, null],
      [`${q}:dead`, 0, null],
      [`${q}_drain`, 0, null],
    ]);
    expect(report.jobs_where).toMatchObject({ total: 6, held_by_dead: 4, ids_issued: 6, not_found: [] });
    const text = await drill(["--state-dir", path.join(tmp, "state-where"), "--redis", server.url, "report", "--queue", q]);
    expect(flat(text.stdout)).toContain(`${q}:working:wdead 3 held by worker wdead: DEAD, heartbeat ${q}:workers:wdead gone;`);
  });

  it("a --queue the source holds no key of: exit 2 naming the queues it holds (QA 8); generated_at is now on an export (QA 12)", async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const dir = path.join(tmp, "state-typo");
    writeState(dir, state("typo", queue, dead, { phase: "complete", redis: { url: dead, embedded: { dir: "/nonexistent", port: 1 } } }));
    const at = Date.now() - 3_600_000;
    const file = path.join(drillDir(dir, "typo"), `final-${new Date(at).toISOString().replace(/[:.]/g, "-")}.jsonl`);
    await exportKeys(redis, queueKeys(queue), file);
    writeState(dir, state("typo", queue, dead, { phase: "complete", createdAt: new Date(at - 60_000).toISOString(), redis: { url: dead, embedded: { dir: "/nonexistent", port: 1 } } }));

    const typo = await drill(["--state-dir", dir, "report", "--queue", `${queue}x`]);
    expect(typo.exitCode).toBe(2);
    expect(typo.stderr).toContain(`holds no key of queue "${queue}x"; it holds queue ${queue} (give --queue ${queue})`);
    expect(typo.stdout).toBe("");

    const before = Date.now();
    const ok = await drill(["--state-dir", dir, "report", "--format", "json"]);
    expect(ok.exitCode, ok.stderr).toBe(0);
    const report = JSON.parse(ok.stdout) as ReportDocument;
    expect(Date.parse(report.generated_at)).toBeGreaterThanOrEqual(before - 1000);
    expect(report.window.to).toBe(new Date(at).toISOString());

    const live = await drill(["--state-dir", path.join(tmp, "state-typo-live"), "--redis", server.url, "report", "--queue", "qaNoSuchQueue"]);
    expect(live.exitCode).toBe(2);
    expect(live.stderr).toMatch(/holds no key of queue "qaNoSuchQueue"; it holds queues .*\br\d+\b/);
  });

  it("--redis --queue beside other drills: the queue, not another run's window; up's suggested command works; --name typo names the drills; a deleted queue reads the drill's export", async () => {
    const q4 = `qrq${++n}`;
    const admit = (job: string) => redis.xadd(`${q4}:events`, "*", "reason", "admit", "job", job, "figures", "packed=1000 limit=32000", "ts", String(Date.now()));
    for (const job of ["1", "2", "3", "4", "5"]) await admit(job);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const dir = path.join(tmp, "state-queue");
    // Its latest run came after q4's decisions, on a queue of its own.
    writeState(dir, state("qa2", "qrq9", server.url, { phase: "complete", createdAt: new Date().toISOString() }));
    const one = await drill(["--state-dir", dir, "--redis", server.url, "report", "--queue", q4, "--format", "json"]);
    expect(one.exitCode, one.stderr).toBe(0);
    const oneDoc = JSON.parse(one.stdout) as ReportDocument;
    expect(oneDoc.decisions?.total).toBe(5);
    expect(oneDoc.window.clipped_to_run).toBe(false);
    expect(oneDoc.drill).toBeNull();

    // Several drills: the command up's "queue in use" refusal prints, as typed.
    writeState(dir, state("other", "qrqo", server.url));
    const md = await drill(["--state-dir", dir, "--redis", server.url, "report", "--queue", q4, "--format", "md"]);
    expect(md.exitCode, md.stderr).toBe(0);
    expect(md.stdout).toContain("| admit | 5 | 100.0% |  |");

    // A --name typo with a Redis given is about the name, not --queue.
    const typo = await drill(["--state-dir", dir, "report", "--name", "nosuch"], { DRILL_REDIS_URL: server.url });
    expect(typo.exitCode).toBe(2);
    expect(typo.stderr).toContain(`--name: no drill "nosuch" in ${dir} (drills there: other (running), qa2 (complete)); report on one of them`);
    expect(typo.stderr).not.toContain("--queue");

    // A drill that ran on this queue of this Redis, rolled back (exported), its keys then deleted: its export.
    const q5 = `qrq${++n}`;
    await redis.xadd(`${q5}:events`, "*", "reason", "reject_packed_tokens", "job", "1", "figures", "packed=48000 limit=32000 route=retry", "ts", String(Date.now()));
    writeState(dir, state("gone5", q5, server.url.replace("127.0.0.1", "localhost"), { phase: "complete" }));
    const file = path.join(drillDir(dir, "gone5"), `final-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
    await exportKeys(redis, queueKeys(q5), file);
    await redis.del(`${q5}:events`);
    const fromExport = await drill(["--state-dir", dir, "--redis", server.url, "report", "--queue", q5, "--format", "json"]);
    expect(fromExport.exitCode, fromExport.stderr).toBe(0);
    const doc = JSON.parse(fromExport.stdout) as ReportDocument;
    expect(doc.source).toEqual({ kind: "export", where: file });
    expect(doc.drill?.name).toBe("gone5");
    expect(doc.decisions?.rejects).toBe(1);
    expect(doc.notes.join("\n")).toContain(`holds no key of queue ${q5} any more`);
  });

  it("errors: no drill, several drills, unreachable drill Redis without an export, bad flags", async () => {
    const several0 = () => {
      const dir = path.join(tmp, "state-one");
      writeState(dir, state("only", "qonly", server.url));
      return dir;
    };
    // A mistyped state dir is said to be missing; an empty one, empty (QA).
    const none = await drill(["--state-dir", path.join(tmp, "nothing-here"), "report"]);
    expect(none.exitCode).toBe(2);
    expect(none.stderr).toContain(`there is no drill to report on: ${path.join(tmp, "nothing-here")} does not exist, and no --redis`);
    const empty = path.join(tmp, "state-empty");
    mkdirSync(empty, { recursive: true });
    const nothing = await drill(["--state-dir", empty, "report"]);
    expect(nothing.exitCode).toBe(2);
    expect(nothing.stderr).toContain(`there is no drill to report on: ${empty} holds no <name>/state.json or <name>/final-*.jsonl`);
    const typo = await drill(["--state-dir", several0(), "report", "--name", "nope"]);
    expect(typo.exitCode).toBe(2);
    expect(typo.stderr).toContain(`--name: no drill "nope" in ${several0()} (drills there: only (running)); report on one of them`);

    const several = path.join(tmp, "state-several");
    writeState(several, state("a", "qa", server.url));
    writeState(several, state("b", "qb", server.url, { phase: "complete" }));
    const pick = await drill(["--state-dir", several, "report"]);
    expect(pick.exitCode).toBe(2);
    // With a command to copy (QA), naming the drill that is up (QA: the first by name, long rolled back).
    expect(pick.stderr).toContain(`several drills in ${several}: a, b; pick one with --name (drill --state-dir ${several} report --name a)`);

    const lost = path.join(tmp, "state-lost");
    const dead = `redis://127.0.0.1:${await freePort()}`;
    writeState(lost, state("lost", "ql", dead));
    const noSource = await drill(["--state-dir", lost, "report"]);
    expect(noSource.exitCode).toBe(1);
    expect(noSource.stderr).toContain(`no source to report on: Redis ${dead}`);
    expect(noSource.stderr).toContain(`no final-*.jsonl in ${drillDir(lost, "lost")}`);

    for (const [args, flag, code] of [
      [["report", "--since", "10"], "--since", 2],
      [["report", "--format", "html"], "--format", 2],
      [["--json", "report", "--format", "md"], "--format", 2],
      [["report", "--queue", "a*b"], "--queue", 2],
      [["report", "--name", "../x"], "--name", 2],
    ] as const) {
      const result = await drill(["--state-dir", lost, ...args]);
      expect({ args, code: result.exitCode }).toEqual({ args, code });
      expect(result.stderr).toContain(flag);
    }
  });
});
