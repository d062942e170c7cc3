// The step-by-step path end to end (cgroup setup, a worker by hand, no `up`),
// rolled back with `drill rollback --queue`: the worker is stopped with its
// cgroup and gives what it held back to admitted, and the queue's re-drain
// then takes admitted too. QA: the jobs it had admitted stayed in
// <q>:admitted with exit 0 and `left: []`, for the next hand-run worker.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { execa, type ResultPromise } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeJob, type Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { workerKeys } from "../../src/worker/scripts.js";
import { cgroupDirsLeft, forceCleanup, realDrillSkipReason, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";
import { drillBin } from "../helpers/cli.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const reason = realDrillSkipReason();
if (reason) console.warn(`skipping the step-by-step rollback test: ${reason}`);

let server: RedisServer;
let redis: Redis;
let stateDir = "";
let weightsDir = "";
const name = `sbs${process.pid}`;
const stoppedName = `sbt${process.pid}`;
const plainName = `sbo${process.pid}`;
const teardownName = `sbp${process.pid}`;
const exitedName = `sbx${process.pid}`;

beforeAll(async () => {
  if (reason) return;
  stateDir = tempStateDir();
  weightsDir = mkdtempSync("/var/tmp/drill-sbs-test-");
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-sbs" });
});

afterAll(async () => {
  if (reason) return;
  try {
    await forceCleanup(realWorkerCgroup(name), stateDir);
    await forceCleanup(realWorkerCgroup(stoppedName), stateDir);
    await forceCleanup(realWorkerCgroup(plainName), stateDir);
    await forceCleanup(realWorkerCgroup(teardownName), stateDir);
    await forceCleanup(realWorkerCgroup(exitedName), stateDir);
  } finally {
    await closeRedis(redis);
    await server?.stop();
    rmSync(weightsDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
});

async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * The step-by-step path's start: `cgroup setup`, the jobs admitted (their
 * tokens in flight), and a worker run by hand in the cgroup.
 */
async function handRunWorker(cgroup: string, queue: string, workerId: string, ids: string[], completionTokens: number, concurrency: number, extra: string[] = []) {
  const env = { FORCE_COLOR: "0", NO_COLOR: "1", DRILL_STATE_DIR: stateDir };
  const setup = await execa("node", [drillBin, "cgroup", "setup", "--parent", "self", "--name", cgroup, "--memory-max", "160M"], { reject: false, env });
  expect(setup.exitCode, setup.stderr).toBe(0);
  const k = queueKeys(queue);
  for (const id of ids) {
    const job: Job = { id, prompt_tokens: 256, completion_tokens: completionTokens, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" };
    await redis.hset(k.inflight, job.id, job.prompt_tokens);
    await redis.rpush(k.admitted, encodeJob(job));
  }
  const worker: ResultPromise = execa(
    "node",
    [drillBin, "--redis", server.url, "worker", "--name", cgroup, "--parent", "self", "--queue", queue, "--worker-id", workerId, "--weights-dir", weightsDir, "--weights", "32M", "--kv-bytes-per-token", "256", "--decode-tokens-per-s", "20", "--concurrency", String(concurrency), ...extra],
    { reject: false, env, timeout: 60_000 },
  );
  return { env, k, worker };
}

describe.skipIf(reason)("rollback --queue of the step-by-step path (real cgroup, real worker, real redis)", () => {
  it("the hand-run worker is stopped with its cgroup, its job and the admitted ones join the drain, tokens released, nothing lost, exit 0", async () => {
    const started = await handRunWorker(name, "sbq", "h1", ["1", "2", "3"], 1000, 1);
    const { env, k } = started;
    let worker: ResultPromise | null = started.worker;
    try {
      // One job running (past its first token) in its working list, two waiting in admitted.
      await waitFor("a first token", async () => (await redis.hlen(workerKeys("sbq").firstToken)) === 1);
      // --name: the cgroup's, so that drills other tests or people run on this host stay out of it.
      const rollback = await execa("node", [drillBin, "--redis", server.url, "rollback", "--queue", "sbq", "--name", name], { reject: false, env, timeout: 60_000 });
      expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
      expect(rollback.stdout).toContain(`rollback cgroup ${name} (made by drill cgroup setup, in no drill):`);
      expect(rollback.stdout).toContain("ok   re-drain: moved 3 from sbq:admitted; LLEN sbq_drain = 3");
      // --queue closed and drained it: no "admission is still open" for it.
      expect(rollback.stdout).not.toContain("admission is still open");
      await worker;
      worker = null;
      expect((await redis.lrange(k.drain, 0, -1)).map((p) => (JSON.parse(p) as Job).id).sort()).toEqual(["1", "2", "3"]);
      expect(await redis.exists(k.admitted, k.working("h1"))).toBe(0);
      expect(await redis.hlen(k.inflight)).toBe(0);
      expect(await redis.get(k.mode)).toBe("reject_all");
      expect(readdirSync(weightsDir)).toEqual([]);
      expect(cgroupDirsLeft(realWorkerCgroup(name))).toEqual([]);
      await assertNoJobLost(redis, "sbq", ["1", "2", "3"]);
    } finally {
      worker?.kill("SIGKILL");
      await worker;
    }
  });

  // QA: a worker SIGSTOPped (or frozen) with its coprocess: SIGKILLed with its cgroup, it left its heartbeat for
  // up to 10 s (rollback said its jobs were "held by a live gate or worker", exit 4) and its weights file on disk.
  it("a stopped worker: killed with its cgroup, its heartbeat does not hold its jobs, its weights file is unlinked, exit 0", async () => {
    const started = await handRunWorker(stoppedName, "sbt", "h2", ["1", "2"], 3000, 2);
    const { env, k } = started;
    let worker: ResultPromise | null = started.worker;
    try {
      await waitFor("both jobs taken", async () => (await redis.llen(k.working("h2"))) === 2);
      expect(readdirSync(weightsDir).filter((f) => f.startsWith("drill-weights-h2-"))).toHaveLength(1);
      // Every task in the cgroup stopped, as a freeze leaves them: none can answer SIGTERM or clean up.
      const procs = path.join(realWorkerCgroup(stoppedName).dirs[0]!.dir, "cgroup.procs");
      const pids = readFileSync(procs, "utf8").split("\n").filter(Boolean).map(Number);
      expect(pids.length).toBeGreaterThan(0);
      for (const pid of pids) process.kill(pid, "SIGSTOP");
      const rollback = await execa("node", [drillBin, "--redis", server.url, "rollback", "--queue", "sbt", "--name", stoppedName], { reject: false, env, timeout: 60_000 });
      expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
      expect(rollback.stdout).toMatch(/; unlinked \S*drill-weights-h2-\d+-\d+\.bin/);
      expect(rollback.stdout).toContain("ok   re-drain: moved 2 from sbt:working:h2; LLEN sbt_drain = 2");
      await worker;
      worker = null;
      expect(readdirSync(weightsDir).filter((f) => f.startsWith("drill-weights-h2-"))).toEqual([]);
      expect(cgroupDirsLeft(realWorkerCgroup(stoppedName))).toEqual([]);
      await assertNoJobLost(redis, "sbt", ["1", "2"]);
    } finally {
      worker?.kill("SIGKILL");
      await worker;
    }
  });

  // QA: a plain rollback (no --queue) stopped the hand-run worker, its jobs back in <q>:admitted, and
  // said nothing of the queue: its admission stayed open with nothing to run what it admits.
  it("a plain rollback names the queue the stopped worker served, still open, and the command that closes it; that command drains every job", async () => {
    const started = await handRunWorker(plainName, "sbo", "h3", ["1", "2"], 1000, 1);
    const { env, k } = started;
    let worker: ResultPromise | null = started.worker;
    try {
      await waitFor("a first token", async () => (await redis.hlen(workerKeys("sbo").firstToken)) === 1);
      // QA: a twin with the live worker's id joined the cgroup (and mapped its weights there) before it was refused.
      const twin = await execa("node", [drillBin, "--redis", server.url, "worker", "--name", plainName, "--parent", "self", "--queue", "sbo", "--worker-id", "h3", "--weights-dir", weightsDir, "--weights", "32M"], {
        reject: false,
        env,
        timeout: 60_000,
      });
      expect(twin.exitCode, twin.stderr).toBe(3);
      expect(twin.stderr).toMatch(/worker id h3 is already running \(pid \d+, heartbeat sbo:workers:h3\)/);
      expect(twin.stderr).not.toContain("joining");
      const rollback = await execa("node", [drillBin, "rollback", "--name", plainName], { reject: false, env, timeout: 60_000 });
      expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
      const command = `drill --state-dir ${stateDir} --redis ${server.url} rollback --queue sbo`;
      expect(rollback.stdout).toContain(
        `queue sbo on ${server.url}: its worker is gone (what it held is back in sbo:admitted if it stopped on the SIGTERM; if it was killed, ` +
          `still in sbo:working:<its worker id>, which the queue's rollback re-drains), but its admission is still open: ` +
          `what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: ${command}`,
      );
      await worker;
      worker = null;
      expect((await redis.lrange(k.admitted, 0, -1)).map((p) => (JSON.parse(p) as Job).id).sort()).toEqual(["1", "2"]);
      // The command it names, as printed, closes and drains the queue.
      const close = await execa("node", [drillBin, ...command.split(" ").slice(1)], { reject: false, env, timeout: 60_000 });
      expect(close.exitCode, close.stdout + close.stderr).toBe(0);
      expect(await redis.get(k.mode)).toBe("reject_all");
      expect(await redis.llen(k.drain)).toBe(2);
      await assertNoJobLost(redis, "sbo", ["1", "2"]);
    } finally {
      worker?.kill("SIGKILL");
      await worker;
    }
  });

  // QA: the launcher's SIGKILL line pointed a hand-run worker at "the rollback of the drill up that started it".
  it("a SIGKILLed hand-run worker names the queue's rollback; the next worker of its id takes its jobs back; cgroup teardown --json lists the queue served", async () => {
    const started = await handRunWorker(teardownName, "sbp", "h4", ["1", "2"], 1000, 1);
    const { env, k } = started;
    let worker: ResultPromise | null = started.worker;
    let next: ResultPromise | null = null;
    try {
      await waitFor("a first token", async () => (await redis.hlen(workerKeys("sbp").firstToken)) === 1);
      const procs = path.join(realWorkerCgroup(teardownName).dirs[0]!.dir, "cgroup.procs");
      for (const pid of readFileSync(procs, "utf8").split("\n").filter(Boolean).map(Number)) process.kill(pid, "SIGKILL");
      const killed = await worker;
      worker = null;
      expect(killed.exitCode).toBe(1);
      expect(killed.stderr).toContain(
        `its working list is given back by the next worker with --worker-id h4, or drained by \`drill --state-dir ${stateDir} --redis ${server.url} rollback --queue sbp\``,
      );
      expect(killed.stderr).not.toContain("drill up that started it");
      expect(await redis.llen(k.working("h4"))).toBe(1);
      next = execa(
        "node",
        [drillBin, "--redis", server.url, "worker", "--name", teardownName, "--parent", "self", "--queue", "sbp", "--worker-id", "h4", "--weights-dir", weightsDir, "--weights", "32M", "--kv-bytes-per-token", "256", "--decode-tokens-per-s", "20"],
        { reject: false, env, timeout: 60_000, all: true },
      );
      let said = "";
      next.all!.on("data", (chunk: Buffer) => (said += chunk.toString()));
      // Not its heartbeat: the killed worker's is still counting down.
      await waitFor("the next worker's give-back", async () => said.includes("gave 1 job(s) left in sbp:working:h4 by a previous run back to the head of sbp:admitted"));
      // Its lever pulled already: served, but not left open.
      await redis.set(k.mode, "reject_all");
      const torn = await execa("node", [drillBin, "--json", "cgroup", "teardown", "--name", teardownName, "--parent", "self"], { reject: false, env, timeout: 60_000 });
      expect(torn.exitCode, torn.stdout + torn.stderr).toBe(0);
      expect(JSON.parse(torn.stdout)).toMatchObject({ queues_served: [{ queue: "sbp", url: server.url }], queues_left_open: [] });
      await next;
      next = null;
      await assertNoJobLost(redis, "sbp", ["1", "2"]);
    } finally {
      worker?.kill("SIGKILL");
      next?.kill("SIGKILL");
      await worker;
      await next;
    }
  });

  // QA: a worker that had stopped by itself before the rollback (--max-jobs, --idle-exit, its launcher gone) left its queue open unsaid.
  it("a worker gone before the rollback: the plain rollback still names its queue, left open, in --json with the command that closes it", async () => {
    const started = await handRunWorker(exitedName, "sbx", "h5", ["1"], 20, 1, ["--max-jobs", "1"]);
    const { env, k } = started;
    const exited = await started.worker;
    expect(exited.exitCode, String(exited.stderr)).toBe(0);
    // Admitted after it stopped: nothing runs it now.
    await redis.hset(k.inflight, "2", 256);
    await redis.rpush(k.admitted, encodeJob({ id: "2", prompt_tokens: 256, completion_tokens: 20, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" }));
    const rollback = await execa("node", [drillBin, "--json", "rollback", "--name", exitedName], { reject: false, env, timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const command = `drill --state-dir ${stateDir} --redis ${server.url} rollback --queue sbx`;
    expect(JSON.parse(rollback.stdout)).toMatchObject({ queues_left_open: [{ queue: "sbx", url: server.url, lever: "admit", command }], left: [] });
    expect(cgroupDirsLeft(realWorkerCgroup(exitedName))).toEqual([]);
    // Said once: the record goes with the cgroup.
    expect(readdirSync(path.join(stateDir, "served")).filter((f) => f.startsWith(`${exitedName}-`))).toEqual([]);
    await assertNoJobLost(redis, "sbx", ["1", "2"]);
  });
});
