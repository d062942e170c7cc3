import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import type { Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { workerKeys } from "../../src/worker/scripts.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: up pushed the phase at 0s right after spawning gate, worker and watch.
// The first jobs waited for the gate's cold start (it decides only after its
// second pressure sample, one interval in) and that tooling start-up read as
// the drill's queue age and first-token latency. The gate's interval here is
// 1 s: its cold start is at least that, on top of starting Node.
const NAME = "uprdy";
const CGROUP = "uprdycg";
const CGROUP_INTERRUPTED = "uprdyicg";
const DRILL = tinyDrill(NAME, { duration: "2s", gate: "{ psi_rate_limit: 5, interval: 1s }", phases: [["0s", pack(1)]] });
// A 5 s interval: a wait long enough to interrupt.
const SLOW_GATE_DRILL = tinyDrill(NAME, { duration: "2s", gate: "{ psi_rate_limit: 5, interval: 5s }", phases: [["0s", pack(1)]] });
/** The runbook's healthy lab pattern: queue_age_ms under 500. */
const HEALTHY_QUEUE_AGE_MS = 500;

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping drill up waits for gate and worker: ${skip}`);

interface Summary {
  verdict: string;
  pushed_ids: string[];
  not_packed: number;
  ready_ms: number | null;
}

describe.skipIf(skip !== null)("drill up starts the schedule once gate and worker are ready (real cgroup, real redis-server)", () => {
  let root: string;
  let server: RedisServer;
  let redis: Redis;
  const stateDirs: string[] = [];
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-ready-"));
    writeFileSync(path.join(root, "ready.yaml"), DRILL);
    writeFileSync(path.join(root, "slow-gate.yaml"), SLOW_GATE_DRILL);
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-up-ready" });
  });
  afterAll(async () => {
    // Only does something when a case failed half-way: never leave a drill running.
    for (const dir of stateDirs) if (readState(dir, NAME)?.phase !== "complete") await runDrill(["--state-dir", dir, "rollback"], { timeout: 90_000 });
    await closeRedis(redis);
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
    for (const cgroup of [CGROUP, CGROUP_INTERRUPTED]) expect(cgroupDirsLeft(realWorkerCgroup(cgroup))).toEqual([]);
  });

  /** up's args on its own state dir and queue (up refuses a queue an earlier run left keys on). */
  function upArgs(label: string, file: string, cgroup: string): { stateDir: string; args: string[] } {
    const stateDir = path.join(root, label);
    stateDirs.push(stateDir);
    const args = ["--state-dir", stateDir, "--json", "--redis", server.url, "up", "--drill", path.join(root, file), "--parent", "self", "--name", cgroup, "--queue", label, "--file-dir", root];
    return { stateDir, args };
  }

  async function rollbackLosesNothing(stateDir: string, pushed: string[]): Promise<void> {
    const before = readState(stateDir, NAME) as DrillState;
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", NAME], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, NAME, before);
    const exported = readdirSync(path.join(stateDir, NAME)).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    assertNoJobLostInExport(path.join(stateDir, NAME, exported[0]!), before.queue, pushed);
  }

  it("the first job's queue age at its gate decision is well under the gate's cold start: the clock starts once the gate decides and the worker takes jobs", async () => {
    const queue = "ready";
    const { stateDir, args } = upArgs(queue, "ready.yaml", CGROUP);
    const up = await runDrill(args, { timeout: 120_000 });
    expect(up.exitCode, up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as Summary;
    expect(summary.verdict).toBe("ran");
    expect(summary.pushed_ids).toHaveLength(1);

    // From what the drill recorded: the first decision, and the job it decided.
    const keys = queueKeys(queue);
    const first = summary.pushed_ids[0]!;
    const events = await redis.xrange(keys.events, "-", "+");
    const decision = events.map(([, fields]) => fieldsOf(fields)).find((e) => e.job === first && e.reason !== "mode");
    expect(decision, JSON.stringify(events)).toBeDefined();
    const job = await findJob(redis, queue, first);
    const queueAgeAtDecision = Number(decision!.ts) - job.enqueue_ts;
    expect(queueAgeAtDecision).toBeGreaterThanOrEqual(0);
    expect(queueAgeAtDecision, `job=${first} waited ${queueAgeAtDecision} ms for its decision`).toBeLessThan(HEALTHY_QUEUE_AGE_MS);
    // Both said they were ready before the job was enqueued: the gate registers
    // (`started`) after its cold-start samples, the worker after its weights.
    const gate = Object.values(await redis.hgetall(keys.gates)).map((v) => JSON.parse(v) as { started: number });
    expect(gate).toHaveLength(1);
    expect(gate[0]!.started).toBeLessThanOrEqual(job.enqueue_ts);
    const worker = JSON.parse((await redis.hget(workerKeys(queue).workers, CGROUP)) ?? "{}") as { ready_at?: number };
    expect(worker.ready_at).toBeLessThanOrEqual(job.enqueue_ts);

    // What up said, and the wait it reports: the gate's cold start, its first interval at least.
    expect(up.stderr).toMatch(/^waiting for gate and worker to be ready \(.*up to \d+s\): the schedule's clock starts then$/m);
    expect(up.stderr).toMatch(/^gate and worker ready after \d+\.\d s: the schedule's clock starts now/m);
    expect(summary.ready_ms).toBeGreaterThanOrEqual(1000);
    expect(queueAgeAtDecision).toBeLessThan(summary.ready_ms! / 2);

    await rollbackLosesNothing(stateDir, summary.pushed_ids);
  }, 120_000);

  // SIGHUP: the terminal up ran in closed (an SSH session dropped); QA: it died without its verdict, the state "running".
  it.each([
    ["SIGINT", 130],
    ["SIGHUP", 129],
  ] as const)("interrupted by %s while it waits: exit %d, no job pushed, every phase said not started, the state stopped and rolled back clean", async (signal, code) => {
    const queue = `interrupted-${signal}`;
    const { stateDir, args } = upArgs(queue, "slow-gate.yaml", CGROUP_INTERRUPTED);
    const up = execa("node", [drillBin, ...args], { reject: false, timeout: 120_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    // Every child spawned (watch is the last): up waits for the gate's 5 s cold start now.
    const startedAt = Date.now();
    for (;;) {
      const state = readState(stateDir, NAME);
      if (state?.processes.find((p) => p.role === "watch")?.pid) break;
      if (Date.now() - startedAt > 60_000 || up.exitCode !== null) throw new Error(`up did not spawn its children: ${JSON.stringify(state)}`);
      await sleep(100);
    }
    await sleep(500);
    expect(readState(stateDir, NAME)?.phase).toBe("starting");
    up.kill(signal);
    const result = await up;
    const stderr = String(result.stderr);
    expect(result.exitCode, stderr).toBe(code);
    expect(stderr).toMatch(/^waiting for gate and worker to be ready/m);
    expect(stderr).not.toMatch(/ready after/);
    expect(stderr).not.toMatch(/^phase 0: pack/m);
    expect(stderr).toMatch(/^phase 0: not started: the drill stopped before 0s; 1 jobs not packed$/m);
    const summary = JSON.parse(String(result.stdout).trim().split("\n").pop()!) as Summary;
    expect(summary).toMatchObject({ verdict: "interrupted", pushed_ids: [], not_packed: 1, ready_ms: null });
    expect(await redis.exists(queueKeys(queue).seq)).toBe(0);
    const state = readState(stateDir, NAME) as DrillState;
    expect(state.phase).toBe("stopped");
    expect(state.ended).toMatchObject({ verdict: "interrupted", pushed: 0, notPacked: 1, reason: `up was stopped by ${signal}` });

    await rollbackLosesNothing(stateDir, []);
  }, 120_000);
});

function fieldsOf(flat: string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
  return fields;
}

/** The job as pushed (its enqueue_ts), wherever it is now: done, with the worker, admitted, or routed on. */
async function findJob(redis: Redis, queue: string, id: string): Promise<Pick<Job, "id" | "enqueue_ts">> {
  const keys = queueKeys(queue);
  const lists = [keys.done, keys.admitted, keys.working(CGROUP), keys.retry("dedicated"), keys.dead, keys.ready];
  for (const list of lists) {
    for (const text of await redis.lrange(list, 0, -1)) {
      const job = JSON.parse(text) as { id?: string; enqueue_ts?: number };
      if (job.id === id && typeof job.enqueue_ts === "number") return { id, enqueue_ts: job.enqueue_ts };
    }
  }
  throw new Error(`job=${id} is on none of ${lists.join(", ")}`);
}
