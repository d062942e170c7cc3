import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { findByRunId } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess, readProcessStat } from "../../src/host/process.js";
import { DrillQueue } from "../../src/queue/queue.js";
import { cgroupDirsLeft, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { assertHostClean, processesNaming, startBystander, type Bystander } from "../helpers/hostClean.js";
import { assertNoJobLost, assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping rollback fault tests: ${skip}`);

// A tiny drill: every phase early, small sizes, a few seconds long.
// A full run pushes 3 + 2 jobs.
const TINY_JOBS = 5;
// `at` the hog phase (thrash 128M for `hold`) and the second pack phase.
const tinyIn = (duration: string, at: [hog: string, hold: string, second: string]) =>
  tinyDrill("tiny", {
    duration,
    phases: [
      ["0s", pack(3, 20000)],
      [at[0], `inject: { mode: thrash, size: 128M, hold: ${at[1]} }`],
      [at[2], pack(2)],
    ],
  });
const TINY = tinyIn("3s", ["500ms", "2s", "1s"]);
// The same drill in 1 s, for the cases that wait for up's end before their fault (a rollback's): its
// 3 + 2 jobs and its hog all come before that end, and 2 s more of an up tested nothing (~2 s a case).
// TINY stays for the cases whose fault lands while up runs (a signal, a crash at a step, a second up).
const SHORT = tinyIn("1s", ["200ms", "500ms", "400ms"]);

describe.skipIf(skip !== null)("rollback under faults (RELIABILITY 8, 9, 10, 14, 15, 17)", () => {
  let root: string;
  let drillFile: string;
  let shortFile: string;
  // Unrelated, yet `pgrep -f packed` (or a match on the drill's names) would pick it: every rollback must leave it alive.
  let bystander: Bystander;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-faults-"));
    drillFile = path.join(root, "tiny.yaml");
    writeFileSync(drillFile, TINY);
    shortFile = path.join(root, "tiny-short.yaml");
    writeFileSync(shortFile, SHORT);
    bystander = await startBystander("tiny", "tinycg");
  });
  afterAll(() => {
    bystander?.stop();
    rmSync(root, { recursive: true, force: true });
    // Every case rolled back; a cgroup left now would make the next run refuse it as foreign.
    const left = cgroupDirsLeft(realWorkerCgroup("tinycg"));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  // A case that failed half-way leaves its drill up: roll it back before the next case, whose up would refuse tinycg.
  const made: string[] = [];
  const stateDirFor = (label: string) => {
    const dir = mkdtempSync(path.join(root, `${label}-`));
    made.push(dir);
    return dir;
  };
  afterEach(async () => {
    for (const dir of made.splice(0)) {
      const state = readState(dir, "tiny");
      if (state && state.phase !== "complete") await runDrill(["--state-dir", dir, "rollback"], { timeout: 60_000 });
    }
  }, 120_000);
  // `file`: TINY (3 s) unless the case only needs up to have ended (shortFile).
  const up = (stateDir: string, extra: string[] = [], file = drillFile) =>
    runDrill(["--state-dir", stateDir, ...extra, "up", "--drill", file, "--parent", "self", "--name", "tinycg"], { timeout: 60_000 });
  const rollback = (stateDir: string, extra: string[] = []) => runDrill(["--state-dir", stateDir, ...extra, "rollback"], { timeout: 60_000 });
  // runDrill maps a signal to exit -1: a crash test must see the SIGKILL itself, not any failure before the step.
  const crashed = async (args: string[], step: string) => {
    const r = await execa("node", [drillBin, "--state-dir", args[0]!, ...args.slice(1)], { reject: false, timeout: 60_000, env: { NO_COLOR: "1", DRILL_CRASH_AT: step } });
    expect(r.signal, `${args.join(" ")} at ${step}: exit ${r.exitCode} ${String(r.stderr)}`).toBe("SIGKILL");
  };
  const hostClean = (stateDir: string, before: DrillState) => assertHostClean(stateDir, "tiny", before, { cgroupName: "tinycg", bystanders: [bystander] });
  // rollback's latest export (final-<ts>.jsonl), or null when it wrote none.
  const latestExport = (stateDir: string) => {
    const exports = readdirSync(path.join(stateDir, "tiny")).filter((f) => f.startsWith("final-")).sort();
    return exports.length === 0 ? null : path.join(stateDir, "tiny", exports.at(-1)!);
  };
  // up's --json document (its last stdout line): the ids it pushed, said by the packer itself.
  const pushedIds = (stdout: string) => (JSON.parse(stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;

  it("rollback with no drill at all exits 0, three times", async () => {
    const stateDir = stateDirFor("none");
    for (let i = 0; i < 3; i++) {
      const r = await rollback(stateDir);
      // exit 4 when another drill runs on this host (rollback names it): the output says which.
      expect(r.exitCode, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/nothing to roll back/);
    }
  });

  it.each(["state", "redis-spawn", "cgroup", "gate-spawn", "worker-spawn", "watch-spawn", "hog-1-spawn"])(
    "up SIGKILLed at %s: the next rollback reaches host clean",
    async (step) => {
      const stateDir = stateDirFor(`crash-${step}`);
      await crashed([stateDir, "up", "--drill", drillFile, "--parent", "self", "--name", "tinycg"], step);
      const before = readState(stateDir, "tiny");
      expect(before, "intent was written before the act").not.toBeNull();
      // The embedded Redis is recorded (port and dir) before its spawn: from redis-spawn on, its state names it.
      if (step === "state") expect(before!.redis.embedded).toBeNull();
      else expect(before!.redis.embedded, "embedded Redis recorded").not.toBeNull();
      // The packer died with up: the ids its queue gave, read live now, are all the export may and must hold.
      const given = before!.redis.embedded ? await idsGivenByQueue(before!.redis.url, "jobs") : [];
      const rb = await rollback(stateDir);
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
      // Before the Redis existed there is nothing to drain, and no default URL is tried.
      if (step === "state") expect(rb.stdout).toMatch(/up stopped before it set up a Redis/);
      hostClean(stateDir, before as DrillState);
      const exported = latestExport(stateDir);
      if (step === "state") expect(exported).toBeNull();
      else {
        expect(exported, `no export of the recorded embedded Redis: ${rb.stdout}`).not.toBeNull();
        assertNoJobLostInExport(exported!, "jobs", given);
      }
      // At the second phase's hog the first phase's three jobs are out: the gate and worker had them.
      if (step === "hog-1-spawn") expect(given.length).toBeGreaterThanOrEqual(3);
    },
    90_000,
  );

  it.each(["deny-all", "drain", "cgroup", "stop", "re-drain", "export"])(
    "rollback SIGKILLed at %s: the next rollback reaches both invariants",
    async (step) => {
      const stateDir = stateDirFor(`rb-${step}`);
      const started = await up(stateDir, ["--json"], shortFile);
      expect(started.exitCode, started.stderr).toBe(0);
      const pushed = pushedIds(started.stdout);
      expect(pushed).toHaveLength(TINY_JOBS);
      const before = readState(stateDir, "tiny") as DrillState;
      await crashed([stateDir, "rollback"], step);
      const rb = await rollback(stateDir);
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
      hostClean(stateDir, before);
      const exports = readdirSync(path.join(stateDir, "tiny")).filter((f) => f.startsWith("final-")).sort();
      expect(exports.length).toBeGreaterThan(0);
      assertNoJobLostInExport(path.join(stateDir, "tiny", exports.at(-1)!), "jobs", pushed);
    },
    90_000,
  );

  // The embedded Redis died before the rollback: rollback restarts it on its AOF to finish the drain.
  // SIGKILLed right after that restart, the next rollback must find that server (its port was written
  // before the spawn), drain and export from it, and stop it: not refuse a second server on its AOF.
  it("rollback SIGKILLed at redis-restart (the embedded Redis it restarted): the next rollback reaches both invariants", async () => {
    const stateDir = stateDirFor("rb-redis-restart");
    const started = await up(stateDir, ["--json"], shortFile);
    expect(started.exitCode, started.stderr).toBe(0);
    const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    const before = readState(stateDir, "tiny") as DrillState;
    const server = before.processes.find((p) => p.role === "redis")!;
    const roots = new HostRoots();
    process.kill(server.pid!, "SIGKILL"); // appendfsync always: every job is in its AOF
    await waitFor(() => !isSameProcess(roots, server.pid!, server.startTime!), 10_000);
    await crashed([stateDir, "rollback"], "redis-restart");
    const restarted = readState(stateDir, "tiny") as DrillState;
    expect(restarted.redis.url, "the restarted Redis's port, written before its spawn").not.toBe(before.redis.url);
    const rb = await rollback(stateDir);
    expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    hostClean(stateDir, before);
    expect(processesNaming(before.redis.embedded!.dir), "a redis-server left on the drill's AOF").toEqual([]);
    const exports = readdirSync(path.join(stateDir, "tiny")).filter((f) => f.startsWith("final-")).sort();
    assertNoJobLostInExport(path.join(stateDir, "tiny", exports.at(-1)!), "jobs", pushed);
  }, 90_000);

  it("rollback SIGKILLed at stop-packer, with up still running its schedule: the next rollback reaches both invariants", async () => {
    const stateDir = stateDirFor("rb-stop-packer");
    const child = spawn("node", [drillBin, "--state-dir", stateDir, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", "tinycg"], { stdio: ["ignore", "pipe", "ignore"] });
    let upStdout = "";
    child.stdout.on("data", (chunk: Buffer) => (upStdout += chunk.toString()));
    const upExit = new Promise<void>((resolve) => child.once("close", () => resolve()));
    try {
      await waitFor(() => readState(stateDir, "tiny")?.phase === "running", 30_000);
      const before = readState(stateDir, "tiny") as DrillState;
      expect(isSameProcess(new HostRoots(), before.owner.pid, before.owner.startTime!), "up (the packer) still running").toBe(true);
      await crashed([stateDir, "rollback"], "stop-packer");
      const rb = await rollback(stateDir);
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
      await upExit;
      hostClean(stateDir, before);
      // The ids up itself says it pushed (its --json document once the rollback stopped it), not the export's jobs:seq.
      const pushed = pushedIds(upStdout);
      expect(pushed.length, upStdout).toBeGreaterThanOrEqual(3);
      const exported = latestExport(stateDir);
      expect(exported, rb.stdout).not.toBeNull();
      assertNoJobLostInExport(exported!, "jobs", pushed);
    } finally {
      child.kill("SIGKILL");
    }
  }, 90_000);

  it.each([
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const)("%s during up's starting phase exits %d; the rollback after it reaches both invariants", async (signal, code) => {
    const stateDir = stateDirFor(`sig-start-${signal}`);
    const child = spawn("node", [drillBin, "--state-dir", stateDir, "up", "--drill", drillFile, "--parent", "self", "--name", "tinycg"], { stdio: "ignore" });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    try {
      await waitFor(() => readState(stateDir, "tiny")?.phase === "starting", 30_000, 5);
      child.kill(signal);
      expect(await exited).toBe(code);
      const before = readState(stateDir, "tiny") as DrillState;
      expect(before.phase).not.toBe("complete");
      const rb = await rollback(stateDir);
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
      hostClean(stateDir, before);
      // Stopped while starting, up never reached its schedule: no id was pushed, and none may appear.
      const exported = latestExport(stateDir);
      if (before.redis.embedded === null) expect(exported, rb.stdout).toBeNull();
      else {
        expect(exported, `no export of the recorded embedded Redis: ${rb.stdout}`).not.toBeNull();
        assertNoJobLostInExport(exported!, "jobs", []);
      }
    } finally {
      child.kill("SIGKILL");
    }
  }, 90_000);

  it.each([
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const)("%s during up exits %d and leaves a resumable state", async (signal, code) => {
    const stateDir = stateDirFor(`sig-${signal}`);
    const child = spawn("node", ["bin/drill.js", "--state-dir", stateDir, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", "tinycg"], { stdio: ["ignore", "pipe", "ignore"] });
    let upStdout = "";
    child.stdout.on("data", (chunk: Buffer) => (upStdout += chunk.toString()));
    await waitFor(() => readState(stateDir, "tiny")?.phase === "running", 30_000);
    child.kill(signal);
    const exitCode = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
    expect(exitCode).toBe(code);
    const before = readState(stateDir, "tiny") as DrillState;
    expect(["running", "stopped"]).toContain(before.phase);
    // Two sources apart from the export: what up says it pushed, and the ids its queue gave (read live; up, the packer, is gone).
    const pushed = pushedIds(upStdout);
    expect((await idsGivenByQueue(before.redis.url, "jobs")).sort()).toEqual([...pushed].sort());
    const rb = await rollback(stateDir);
    expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    hostClean(stateDir, before);
    const exported = latestExport(stateDir);
    expect(exported, rb.stdout).not.toBeNull();
    assertNoJobLostInExport(exported!, "jobs", pushed);
  }, 90_000);

  it("the embedded Redis exits by itself at duration + 5 min and another Redis takes its port: report and rollback use the AOF and leave the other alone", async () => {
    const stateDir = stateDirFor("redis-lifetime");
    const started = await up(stateDir, ["--json"], shortFile);
    expect(started.exitCode, started.stderr).toBe(0);
    const pushed = pushedIds(started.stdout);
    expect(pushed).toHaveLength(TINY_JOBS);
    const before = readState(stateDir, "tiny") as DrillState;
    const embedded = before.redis.embedded!;
    const server = before.processes.find((p) => p.role === "redis")!;
    const roots = new HostRoots();
    const stat = readProcessStat(roots, server.pid!);
    expect(stat.ok && stat.value.comm).toMatch(/^redis-server/);
    // Its parent is the timeout that ends it: the drill's 1 s, the 5 min grace, and 30 s more (it stops last).
    const wrapper = stat.ok ? stat.value.ppid : 0;
    expect(readFileSync(`/proc/${wrapper}/cmdline`, "utf8").split("\0").slice(0, 4)).toEqual(["timeout", "--signal=TERM", "--kill-after=30s", "331s"]);
    const reportJson = async () => {
      const r = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "tiny"], { timeout: 30_000 });
      expect(r.exitCode, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { notes: string[]; decisions: { total: number } | null; first_reject: unknown };
    };
    const live = await reportJson();
    // At 301 s gate, worker and watch end their --duration; now instead.
    for (const child of before.processes.filter((p) => ["gate", "worker", "watch"].includes(p.role))) {
      if (child.pid === null || child.startTime === null || !isSameProcess(roots, child.pid, child.startTime)) continue;
      process.kill(child.pid, "SIGTERM");
      await waitFor(() => !isSameProcess(roots, child.pid!, child.startTime!), 10_000);
    }
    // What the wrapper does at 331 s, now: timeout passes SIGTERM on to redis-server.
    process.kill(wrapper, "SIGTERM");
    await waitFor(() => !isSameProcess(roots, server.pid!, server.startTime!), 10_000);

    // Its port is free now: somebody else's Redis, with somebody else's queue, starts on it.
    const foreign = await startRedisServer(embedded.port);
    const foreignClient = new Redis(foreign.url, { maxRetriesPerRequest: 0 });
    try {
      await foreignClient.rpush("jobs", "not-the-drill's");

      const fromAof = await reportJson();
      expect(fromAof.notes.join("\n")).toMatch(/embedded Redis was not running .* read from its AOF/);
      expect(live.decisions?.total).toBeGreaterThan(0);
      expect(fromAof.decisions).toEqual(live.decisions);
      expect(fromAof.first_reject).toEqual(live.first_reject);
      expect(processesNaming(embedded.dir), "report left a redis-server running").toEqual([]);

      const rb = await rollback(stateDir);
      expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
      expect(rb.stdout).toMatch(/not the drill's embedded Redis/);
      expect(rb.stdout).toMatch(/restarted on its AOF/);
      hostClean(stateDir, before);
      const exports = readdirSync(path.join(stateDir, "tiny")).filter((f) => f.startsWith("final-")).sort();
      assertNoJobLostInExport(path.join(stateDir, "tiny", exports.at(-1)!), "jobs", pushed);
      // Neither flipped, drained nor exported the other server's queue.
      expect(await foreignClient.lrange("jobs", 0, -1)).toEqual(["not-the-drill's"]);
      expect(await foreignClient.dbsize(), "the drill wrote to a Redis that is not its own").toBe(1);
    } finally {
      foreignClient.disconnect();
      await foreign.stop();
    }
  }, 90_000);
  it("two drill up with the same name at once: exactly one proceeds", async () => {
    const stateDir = stateDirFor("twice");
    const [a, b] = await Promise.all([up(stateDir, ["--json"]), up(stateDir, ["--json"])]);
    const codes = [a.exitCode, b.exitCode].sort();
    expect(codes).toEqual([0, 3]);
    expect([a.stderr, b.stderr].join("\n")).toMatch(/another drill|already up/);
    const [winner, loser] = a.exitCode === 0 ? [a, b] : [b, a];
    const won = JSON.parse(winner.stdout.trim().split("\n").pop()!) as { run_id: string; pushed_ids: string[] };
    expect(won.pushed_ids).toHaveLength(TINY_JOBS);
    // The loser ran no drill: no run, no pushes; the state (and all it records) is the winner's.
    expect(JSON.parse(loser.stdout.trim().split("\n").pop()!)).toMatchObject({ verdict: "refused", run_id: null });
    expect(loser.stdout).not.toMatch(/pushed_ids/);
    const before = readState(stateDir, "tiny") as DrillState;
    expect(before.runId).toBe(won.run_id);
    const rb = await rollback(stateDir);
    expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    hostClean(stateDir, before);
    // Exactly the winner's pushes in its Redis: a job the loser pushed would be "never pushed".
    const exported = latestExport(stateDir);
    expect(exported, rb.stdout).not.toBeNull();
    assertNoJobLostInExport(exported!, "jobs", won.pushed_ids);
  }, 90_000);

  describe("with a Redis the drill does not own", () => {
    let redis: RedisServer;
    beforeAll(async () => {
      redis = await startRedisServer();
    });
    afterAll(async () => redis.stop());

    it("Redis down during rollback: host still cleaned, exit 4 says the drain is pending; the next rollback finishes it (14)", async () => {
      const stateDir = stateDirFor("redis-down");
      const started = await up(stateDir, ["--redis", redis.url, "--json"], shortFile);
      expect(started.exitCode, started.stderr).toBe(0);
      const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
      const before = readState(stateDir, "tiny") as DrillState;
      redis.kill("SIGKILL");
      const first = await rollback(stateDir);
      expect(first.exitCode).toBe(4);
      expect(first.stderr).toMatch(/drain pending/);
      // deny-all and the drain did not happen: the next step is the rollback again, not a re-admit
      expect(first.stdout).toMatch(/Not rolled back yet: admission stays as it is/);
      expect(first.stdout).toContain("rollback --name tiny");
      expect(first.stdout).not.toMatch(/Re-enable admission|gate mode admit|report --name/);
      // processes and cgroup are gone even though the drain could not run
      for (const dir of before.cgroup?.dirs ?? []) expect(existsSync(dir), dir).toBe(false);
      const roots = new HostRoots();
      const children = before.processes.filter((p) => ["gate", "watch", "worker", "hog"].includes(p.role) && p.pid !== null && p.startTime !== null);
      expect(children.map((p) => p.role)).toEqual(expect.arrayContaining(["gate", "watch"]));
      for (const p of children) expect(isSameProcess(roots, p.pid!, p.startTime!), `${p.role} pid ${p.pid} alive after the exit-4 rollback`).toBe(false);
      expect(findByRunId(roots, before.runId), "a process with this run's DRILL_RUN_ID").toEqual([]);
      await redis.restart();
      const second = await rollback(stateDir);
      expect(second.exitCode, second.stdout + second.stderr).toBe(0);
      expect(second.stdout).toMatch(/Re-enable admission only once/);
      expect(second.stdout).not.toMatch(/Not rolled back yet/);
      hostClean(stateDir, before);
      const client = new Redis(redis.url);
      try {
        await assertNoJobLost(client, "jobs", pushed);
        // producers keep pushing after rollback: a second rollback appends, never overwrites (15)
        const drainBefore = await client.lrangeBuffer("jobs_drain", 0, -1);
        const late = await new DrillQueue(client, "jobs").push({ promptTokens: 10, completionTokens: 1, files: 1, deadlineMs: 8000, hostClass: "shared-free" });
        const third = await rollback(stateDir);
        expect(third.exitCode).toBe(0);
        const drainAfter = await client.lrangeBuffer("jobs_drain", 0, -1);
        expect(drainAfter.slice(0, drainBefore.length)).toEqual(drainBefore);
        expect(drainAfter).toHaveLength(drainBefore.length + 1);
        await assertNoJobLost(client, "jobs", [...pushed, late.id]);
        await client.flushall();
      } finally {
        client.disconnect();
      }
    }, 120_000);

    it("producers keep pushing during a rollback and after it: the second rollback drains the rest, no job lost, none twice (15)", async () => {
      const stateDir = stateDirFor("producer");
      const started = await up(stateDir, ["--redis", redis.url, "--json"], shortFile);
      expect(started.exitCode, started.stderr).toBe(0);
      const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
      const before = readState(stateDir, "tiny") as DrillState;
      const client = new Redis(redis.url);
      const producerClient = new Redis(redis.url);
      try {
        // A producer the way the packer pushes (ids from jobs:seq), one job every ~50 ms, until told to stop.
        const produced: string[] = [];
        let producing = true;
        const producer = (async () => {
          const queue = new DrillQueue(producerClient, "jobs");
          while (producing) {
            produced.push((await queue.push({ promptTokens: 10, completionTokens: 1, files: 1, deadlineMs: 8000, hostClass: "shared-free" })).id);
            await new Promise((r) => setTimeout(r, 50));
          }
        })();
        await waitFor(() => produced.length > 0, 10_000, 20);
        const atStart = produced.length;
        const first = await rollback(stateDir);
        const atEnd = produced.length;
        expect(first.exitCode, first.stdout + first.stderr).toBe(0);
        expect(atEnd - atStart, "pushes while the rollback ran").toBeGreaterThan(0);
        // and after it: these sit in jobs until the next rollback
        await waitFor(() => produced.length > atEnd + 3, 10_000, 20);
        const drainBefore = await client.lrangeBuffer("jobs_drain", 0, -1);
        producing = false;
        await producer;
        const second = await rollback(stateDir);
        expect(second.exitCode, second.stdout + second.stderr).toBe(0);
        const drainAfter = await client.lrangeBuffer("jobs_drain", 0, -1);
        expect(drainAfter.slice(0, drainBefore.length), "the second rollback rewrote the drain").toEqual(drainBefore);
        expect(await client.llen("jobs"), "pushes left in jobs after the second rollback").toBe(0);
        hostClean(stateDir, before);
        // No duplicates allowed: across drain, retry, done and dead each id is in one place.
        await assertNoJobLost(client, "jobs", [...pushed, ...produced]);
        await client.flushall();
      } finally {
        client.disconnect();
        producerClient.disconnect();
      }
    }, 120_000);

    it("a re-drain (or a later drain of late pushes) that fails is not a complete rollback: exit 4 naming it, and the next rollback drains what is left", async () => {
      const stateDir = stateDirFor("redrain-fails");
      const started = await up(stateDir, ["--redis", redis.url, "--json"], shortFile);
      expect(started.exitCode, started.stderr).toBe(0);
      const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
      const before = readState(stateDir, "tiny") as DrillState;
      const client = new Redis(redis.url);
      try {
        // A key under the worker lists' pattern that is not a list: LMOVE from it fails mid re-drain.
        await client.set("jobs:working:zz-not-a-list", "x");
        const first = await rollback(stateDir);
        expect(first.exitCode, first.stdout + first.stderr).toBe(4);
        expect(first.stderr).toMatch(/re-drain failed \(WRONGTYPE[^)]*\): jobs in jobs:admitted, jobs:processing:\*, jobs:working:\* may not be in jobs_drain/);
        for (const dir of before.cgroup?.dirs ?? []) expect(existsSync(dir), dir).toBe(false);
        expect(readState(stateDir, "tiny")?.phase).not.toBe("complete");
        // QA: the first rollback took the drill over; a later one must not move when that was (report's "ended" and window).
        const tookOver = readState(stateDir, "tiny")?.rollback?.at;
        expect(tookOver).toMatch(/^\d{4}-/);

        await client.del("jobs:working:zz-not-a-list");
        const second = await rollback(stateDir);
        expect(second.exitCode, second.stdout + second.stderr).toBe(0);
        const afterSecond = readState(stateDir, "tiny")!.rollback!;
        expect(afterSecond.at, "the second rollback rewrote when the drill was rolled back").toBe(tookOver);
        expect(Date.parse(afterSecond.lastAt!)).toBeGreaterThan(Date.parse(tookOver!));
        hostClean(stateDir, before);
        await assertNoJobLost(client, "jobs", pushed);

        // The same for the drain of what producers pushed after a complete rollback (15): a Redis out of
        // memory refuses the LMOVE; exit 4, and the next rollback (memory back) appends it to the drain.
        const late = await new DrillQueue(client, "jobs").push({ promptTokens: 10, completionTokens: 1, files: 1, deadlineMs: 8000, hostClass: "shared-free" });
        await client.config("SET", "maxmemory", "1");
        const third = await rollback(stateDir);
        await client.config("SET", "maxmemory", "0");
        expect(third.exitCode, third.stdout + third.stderr).toBe(4);
        expect(third.stderr).toMatch(/drain failed \(OOM[^)]*\): jobs pushed after the last rollback are still in jobs \(run drill --state-dir \S+ rollback --name \S+\)/);
        const fourth = await rollback(stateDir);
        expect(fourth.exitCode, fourth.stdout + fourth.stderr).toBe(0);
        expect(await client.llen("jobs")).toBe(0);
        await assertNoJobLost(client, "jobs", [...pushed, late.id]);
        // Exported again with the late job: once the operator removes the keys, the export is its only record.
        const exported = readState(stateDir, "tiny")?.rollback?.exported;
        expect(fourth.stdout + fourth.stderr).toContain(`keys to ${exported}`);
        assertNoJobLostInExport(exported!, "jobs", [...pushed, late.id]);
        // The re-drain is recorded on its own, the takeover's time kept.
        const afterRedrain = readState(stateDir, "tiny")!.rollback!;
        expect(afterRedrain.at, "the re-drain rewrote when the drill was rolled back").toBe(tookOver);
        expect(afterRedrain.redrains?.map((r) => r.exported)).toEqual([exported]);
        expect(afterRedrain.lastAt).toBe(afterRedrain.redrains![0]!.at);
        // And the report: the run ended (and was rolled back) at the first rollback; the re-drain said on its own.
        const report = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "tiny"], { timeout: 60_000 });
        expect(report.exitCode, report.stderr).toBe(0);
        const ended = (JSON.parse(report.stdout) as { drill: { ended: { rolled_back_at: string; redrains: Array<{ at: string }> } } }).drill.ended;
        expect(ended.rolled_back_at).toBe(tookOver);
        expect(ended.redrains.map((r) => r.at)).toEqual([afterRedrain.redrains![0]!.at]);
        // Nothing new since: the next rollback has nothing to do.
        const fifth = await rollback(stateDir);
        expect(fifth.exitCode).toBe(0);
        expect(readState(stateDir, "tiny")?.rollback?.exported).toBe(exported);
        await client.flushall();
      } finally {
        client.disconnect();
      }
    }, 120_000);
  });
});

async function waitFor(condition: () => boolean, timeoutMs: number, everyMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
