import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os, { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { freePort } from "../../src/drill/embeddedRedis.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: the step-by-step path (cgroup setup, pack, gate, worker by hand, no
// `up`): `drill rollback` tore down the cgroup and left the queue admitting
// with its jobs waiting; `rollback --queue` was "unknown option".

let server: RedisServer;
let redis: Redis;
let root: string;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-rollback-queue" });
  root = mkdtempSync(path.join(tmpdir(), "drill-rollback-queue-"));
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const drill = (args: string[], url = server.url) => runDrill(["--redis", url, "--state-dir", path.join(root, "state"), ...args], { timeout: 30_000 });

describe("drill rollback --queue (built binary, own redis-server)", () => {
  it("deny-all and the waiting jobs appended to the drain; again: nothing moved, the drain kept; then the re-admit and report commands", async () => {
    const pack = await drill(["pack", "--queue", "sbs", "--jobs", "3"]);
    expect(pack.exitCode, pack.stderr).toBe(0);
    const first = await drill(["rollback", "--queue", "sbs"]);
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toContain(`rollback queue sbs on ${server.url} (--queue; a gate or worker run by hand keeps running, unless in a cgroup setup cgroup, torn down below):`);
    expect(first.stdout).toMatch(/ok {3}deny-all: mode reject_all \(was .*\): gates now reject every job as reject_host_pressure mode=reject_all/);
    expect(first.stdout).toContain("ok   drain: moved 3 from sbs; LLEN sbs_drain = 3");
    expect(first.stdout).toContain(`drill --state-dir ${path.join(root, "state")} --redis ${server.url} gate mode admit --queue sbs`);
    // QA: the hint named avg10 only, while gate mode admit also refuses on avg60.
    expect(first.stdout).toContain("Re-enable admission only once PSI avg10 and avg60 both stay under 1.00 (gate mode admit refuses otherwise):");
    expect(first.stdout).toContain(`report --queue sbs --format md`);
    expect(first.stdout).not.toMatch(/nothing to roll back/);
    expect(await redis.get("sbs:mode")).toBe("reject_all");
    expect(await redis.llen("sbs")).toBe(0);
    const ids = (await redis.lrange("sbs_drain", 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id);
    expect(ids).toEqual(["1", "2", "3"]);
    // QA: the report after a hand-run rollback (no drill record) could not tell its deny-all from a hand on the lever.
    const report = await drill(["report", "--queue", "sbs", "--format", "md"]);
    expect(report.stdout).toMatch(/\| reject_all \| unset \| [0-9.]+ \| rollback --queue's deny-all \|/);

    // A producer pushed after it: a second rollback appends, never overwrites (RELIABILITY 15).
    expect((await drill(["pack", "--queue", "sbs", "--jobs", "1"])).exitCode).toBe(0);
    const second = await drill(["--json", "rollback", "--queue", "sbs"]);
    expect(second.exitCode, second.stderr).toBe(0);
    const doc = JSON.parse(second.stdout) as { queues: Array<{ queue: string; drain_length: number; left: string[] }>; nothing_to_roll_back: boolean };
    expect(doc.queues).toEqual([expect.objectContaining({ queue: "sbs", drain_length: 4, left: [] })]);
    expect(doc.nothing_to_roll_back).toBe(false);
    expect((await redis.lrange("sbs_drain", 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id)).toEqual(["1", "2", "3", "4"]);
  });

  // QA: jobs the hand-run gate had admitted stayed in <q>:admitted (and a stopped worker's in its
  // working list) with exit 0 and "left: []": the next hand-run worker would still run them.
  it("admitted, processing and working lists nothing alive holds join the drain, tokens released; a list a live gate or worker holds is named, exit 4, until it stops", async () => {
    const job = (id: string) => JSON.stringify({ id, prompt_tokens: 10, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
    await redis.rpush("hq", job("1"));
    await redis.rpush("hq:admitted", job("2"), job("3"));
    await redis.rpush("hq:working:w-dead", job("4"));
    await redis.rpush("hq:processing:g-live", job("5"));
    await redis.hset("hq:inflight", { "2": "10", "3": "10", "4": "10", "5": "10" });
    await redis.set("hq:gates:g-live", "tok", "PX", 60_000);

    const first = await drill(["rollback", "--queue", "hq"]);
    expect(first.exitCode, first.stdout + first.stderr).toBe(4);
    expect(first.stdout).toContain("ok   drain: moved 1 from hq; LLEN hq_drain = 1");
    expect(first.stdout).toContain("FAIL re-drain: moved 2 from hq:admitted, 1 from hq:working:w-dead; LLEN hq_drain = 4; left 1 in hq:processing:g-live (held by a live gate or worker)");
    expect(first.stdout + first.stderr).toContain(`1 job(s) in hq:processing:g-live held by hq:gates:g-live (a gate or worker run by hand, outside drill's cgroups: rollback does not stop it); stop it, then run drill --state-dir ${path.join(root, "state")} --redis ${server.url} rollback --queue hq`);
    expect((await redis.lrange("hq_drain", 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id)).toEqual(["1", "2", "3", "4"]);
    expect(await redis.hgetall("hq:inflight")).toEqual({ "5": "10" }); // still held: its tokens still in flight
    expect(await redis.lrange("hq:processing:g-live", 0, -1)).toHaveLength(1);

    // A live worker heartbeat holds admitted too; once both are gone the rerun completes.
    await redis.rpush("hq:admitted", job("6"));
    await redis.set("hq:workers:w-live", "tok", "PX", 60_000);
    const held = await drill(["--json", "rollback", "--queue", "hq"]);
    expect(held.exitCode).toBe(4);
    const heldDoc = JSON.parse(held.stdout) as { queues: Array<{ left: string[] }> };
    expect(heldDoc.queues[0]!.left).toEqual([expect.stringContaining("1 job(s) in hq:admitted, which live worker(s) hq:workers:w-live take from"), expect.stringContaining("1 job(s) in hq:processing:g-live held by hq:gates:g-live")]);
    await redis.del("hq:gates:g-live", "hq:workers:w-live");
    const last = await drill(["--json", "rollback", "--queue", "hq"]);
    expect(last.exitCode, last.stdout + last.stderr).toBe(0);
    expect((JSON.parse(last.stdout) as { queues: Array<{ left: string[]; drain_length: number }> }).queues[0]).toMatchObject({ left: [], drain_length: 6 });
    expect((await redis.lrange("hq_drain", 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id).sort()).toEqual(["1", "2", "3", "4", "5", "6"]);
    expect(await redis.hlen("hq:inflight")).toBe(0);
  });

  it("its Redis down: exit 4, saying the deny-all and drain are pending and to run it again", async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const r = await drill(["rollback", "--queue", "sbs"], url);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain("FAIL connect redis");
    expect(r.stdout).toContain(`Not rolled back yet: run drill --state-dir ${path.join(root, "state")} --redis ${url} rollback --queue sbs once its Redis answers`);
    expect(r.stderr).toContain(`queue sbs on ${url}: deny-all and drain not done`);
    expect(r.stderr).toContain(`; run drill --state-dir ${path.join(root, "state")} --redis ${url} rollback --queue sbs`);
  });

  // QA: the interrupt handling came only after the --queue step: a SIGTERM there (its Redis
  // paused) ended the rollback with no word of what was left or how to finish it.
  it("SIGTERM during the --queue step: exit 143, naming the step and the rollback as asked to run again", async () => {
    server.kill("SIGSTOP");
    let out = "";
    let err = "";
    let code: number | null;
    try {
      const child = spawn("node", [drillBin, "--redis", server.url, "--state-dir", path.join(root, "state"), "rollback", "--name", "nodrill", "--queue", "paused"], { stdio: ["ignore", "pipe", "pipe"] });
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.once("exit", (c, signal) => resolve(c ?? (signal === null ? null : -1))));
      for (let i = 0; i < 500 && !out.includes("rollback queue paused on"); i++) await new Promise((r) => setTimeout(r, 20));
      expect(out).toContain("rollback queue paused on");
      child.kill("SIGTERM");
      code = await exited;
    } finally {
      server.kill("SIGCONT");
    }
    expect(code, out + err).toBe(143);
    expect(err).toContain(`drill: interrupted by SIGTERM during the rollback of queue paused (--queue) before its first step; run \`drill --state-dir ${path.join(root, "state")} --redis ${server.url} rollback --name nodrill --queue paused\` again to finish it`);
  });

  // QA R 5: a full Redis answers, so "once its Redis answers" sent the operator to wait for nothing.
  it("a full Redis (maxmemory, noeviction) refuses the deny-all and the drain: exit 4, nothing moved, and the line names the fix, not a wait", async () => {
    expect((await drill(["pack", "--queue", "full", "--jobs", "2"])).exitCode).toBe(0);
    await redis.config("SET", "maxmemory", "1");
    try {
      const refused = await drill(["rollback", "--queue", "full"]);
      expect(refused.exitCode, refused.stdout + refused.stderr).toBe(4);
      expect(refused.stdout).toMatch(/FAIL deny-all: OOM command not allowed.* \(redis is full: /);
      // Redis names drill's own script by sha and line: no help to an operator (QA R re-check 8).
      expect(refused.stdout + refused.stderr).not.toContain("@user_script");
      expect(refused.stdout).toContain("rollback --queue full once its Redis takes these commands: redis is full: used_memory is over its maxmemory");
      expect(refused.stdout).not.toContain("once its Redis answers");
      expect(await redis.llen("full")).toBe(2);
    } finally {
      await redis.config("SET", "maxmemory", "0");
    }
    const again = await drill(["rollback", "--queue", "full"]);
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(await redis.llen("full_drain")).toBe(2);
  });

  // QA T 1: --queue with no --redis took 6379 whatever drill was up here.
  it("no --redis: the Redis of the drill up here on that queue, which rolls it back with the drill", async () => {
    const stateDir = path.join(root, "t1-state");
    writeFakeDrill(stateDir, "tdrill", "tq", server.url);
    await redis.rpush("tq", JSON.stringify({ id: "1" }));
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--queue", "tq"], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stderr).toContain(`redis: drill tdrill's redis at ${server.url}`);
    expect(r.stdout).toContain(`queue tq on ${server.url}: drill tdrill's queue, rolled back with it below`);
    expect(await redis.lrange("tq_drain", 0, -1)).toEqual([JSON.stringify({ id: "1" })]);
  });

  // QA W 6: the drill's own URL spelled another way (localhost, ?db=0) was not taken for its Redis: exit 4.
  it("--redis naming the drill's Redis another way: the drill's queue, rolled back with it", async () => {
    const stateDir = path.join(root, "w6-state");
    writeFakeDrill(stateDir, "wdrill", "wq", server.url);
    await redis.rpush("wq", JSON.stringify({ id: "1" }));
    const other = `${server.url.replace("127.0.0.1", "localhost")}?db=0`;
    const r = await runDrill(["--state-dir", stateDir, "--redis", other, "rollback", "--queue", "wq"], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`queue wq on ${other}: drill wdrill's queue, rolled back with it below`);
    expect(await redis.lrange("wq_drain", 0, -1)).toEqual([JSON.stringify({ id: "1" })]);
  });

  // QA S 7: a live drill's queue (its gate up from another state dir) was flipped and drained as a hand-run one.
  it("a queue a drill's gate serves from this host: not flipped or drained here, the drill and its rollback named, exit 4", async () => {
    const gate = spawn("sleep", ["300"], { stdio: "ignore", env: { PATH: process.env.PATH, DRILL_RUN_ID: "sdrill-20260101000000-abcdef", DRILL_STATE_DIR: "/srv/drills" } });
    await new Promise((resolve) => gate.once("spawn", resolve));
    try {
      const stat = readProcessStat(new HostRoots(), gate.pid!);
      if (!stat.ok) throw new Error(stat.reason);
      await redis.set("sq:gates:g1", JSON.stringify({ pid: gate.pid, start_time: stat.value.startTime, host: os.hostname(), started: Date.now() }), "PX", 60_000);
      await redis.rpush("sq", JSON.stringify({ id: "1" }));
      const r = await drill(["rollback", "--queue", "sq"]);
      expect(r.exitCode, r.stdout + r.stderr).toBe(4);
      expect(r.stdout).toContain(`FAIL deny-all: not done: queue sq is drill sdrill's (its gate, pid ${gate.pid}, run sdrill-20260101000000-abcdef, state dir /srv/drills): its own rollback drains it`);
      expect(r.stdout).toContain("Not rolled back here: it is a drill's queue; run that drill's rollback, named above");
      expect(r.stderr).toContain("run that: drill --state-dir /srv/drills rollback --name sdrill");
      expect(await redis.get("sq:mode")).toBeNull();
      expect(await redis.llen("sq")).toBe(1);
    } finally {
      gate.kill("SIGKILL");
    }
  });

  // QA re-check 7: "drill X's queue, rolled back with it below" while --name picked another drill.
  it("--queue of a drill --name leaves out: not rolled back by this one, that drill's rollback named, exit 4", async () => {
    const stateDir = path.join(root, "named-state");
    writeFakeDrill(stateDir, "ownq", "oq", server.url);
    writeFakeDrill(stateDir, "otherd", "odq", server.url);
    await redis.rpush("oq", JSON.stringify({ id: "1" }));
    const r = await runDrill(["--state-dir", stateDir, "--redis", server.url, "rollback", "--name", "otherd", "--queue", "oq"], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`FAIL deny-all: not done: queue oq on ${server.url} is drill ownq's, which --name otherd leaves out: its own rollback drains it`);
    expect(r.stdout).not.toContain("rolled back with it below");
    expect(await redis.get("oq:mode")).toBeNull();
    expect(await redis.llen("oq")).toBe(1);
  });

  it("a queue this Redis never held: nothing flipped or drained there, said, exit 0", async () => {
    const r = await drill(["rollback", "--queue", "neverq"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`ok   deny-all: nothing to do: no key of queue neverq on ${server.url} (a queue on another Redis? give --redis)`);
    expect(await redis.keys("neverq*")).toEqual([]);
  });

  it("a queue name that is not one: exit 2 before anything", async () => {
    const r = await drill(["rollback", "--queue", "sbs_drain"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/--queue: "sbs_drain" is the rollback drain of queue "sbs"/);
  });

  // QA: `up --queue x_drain` refused it only after its Redis was up (a drill left that no rollback
  // finished); a gate held its Redis connection past the refusal and never exited.
  it.each([
    ["gate", ["gate", "--queue", "dq_drain", "--name", "nosuch", "--parent", "self"]],
    ["gate mode", ["gate", "mode", "reject_all", "--queue", "dq_drain"]],
    ["worker", ["worker", "--queue", "dq_drain", "--name", "nosuch", "--parent", "self"]],
    ["pack", ["pack", "--queue", "dq_drain", "--jobs", "1"]],
    ["watch", ["watch", "--queue", "dq_drain", "--once", "--json"]],
    ["report", ["report", "--queue", "dq_drain"]],
    ["up", ["up", "--queue", "dq_drain", "--parent", "self", "--name", "dqcg"]],
  ])("%s on a drain's name: exit 2 at once, nothing started or written", async (_cmd, args) => {
    const stateDir = path.join(root, "drain-name-state");
    const r = await runDrill(["--redis", server.url, "--state-dir", stateDir, ...args], { timeout: 15_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--queue: "dq_drain" is the rollback drain of queue "dq"/);
    // Exit 2 all the same when a hang is ended by the test's timeout: the line that says so is the hang.
    expect(r.stderr).not.toMatch(/after the command had finished/);
    expect(existsSync(stateDir)).toBe(false);
    expect(await redis.keys("dq*")).toEqual([]);
  });

  it("a drill whose state file names no queue's name: its processes and cgroup are rolled back, the queue left and said; no hang", async () => {
    const stateDir = path.join(root, "bad-queue-state");
    writeFakeDrill(stateDir, "bq", "bq_drain", server.url);
    await redis.rpush("bq_drain", JSON.stringify({ id: "1" }));
    const r = await runDrill(["--state-dir", stateDir, "rollback", "--name", "bq"], { timeout: 15_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stderr).not.toMatch(/after the command had finished/);
    expect(r.stdout).toMatch(/FAIL connect redis: not connected: the state file names queue "bq_drain": "bq_drain" is the rollback drain of queue "bq"/);
    expect(r.stderr).toContain(`queue "bq_drain" in ${path.join(stateDir, "bq", "state.json")}: not flipped, drained or exported; put the drill's queue name back there`);
    expect(await redis.lrange("bq_drain", 0, -1)).toEqual([JSON.stringify({ id: "1" })]);
    await redis.del("bq_drain");
  });
});
