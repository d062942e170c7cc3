import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, writeState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { realCgroupSkipReason } from "../helpers/cgroupFixtures.js";
import { repoRoot, runDrill, type CliResult } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/**
 * QA finding: after `drill up` (embedded Redis on a free port, URL in
 * state.json) the operator's next commands — `gate mode reject_all`, `pack`,
 * `watch`, `worker` — went to redis://127.0.0.1:6379, somebody else's Redis on
 * these hosts. Now, given no --redis, they use the Redis of the one drill up
 * in the state dir on their queue.
 *
 * Host Redis 6379 is never touched: every drill run here loads a tripwire that
 * refuses any TCP connect to port 6379 (and says TRIPWIRE), so a run that
 * falls back to the default fails loudly instead of reaching it.
 */

let tmp = "";
let tripwire = "";
let a: RedisServer;
let b: RedisServer;
let ra: Redis;
let rb: Redis;
let n = 0;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-e2e-rfs-"));
  tripwire = path.join(tmp, "no-6379.mjs");
  writeFileSync(
    tripwire,
    `import net from "node:net";
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  let opts = Array.isArray(args[0]) ? args[0][0] : args[0];
  if (typeof opts !== "object" || opts === null) opts = { port: opts };
  if (Number(opts.port) === 6379) {
    process.stderr.write("TRIPWIRE: connect to port 6379 refused by the test\\n");
    queueMicrotask(() => this.destroy(new Error("TRIPWIRE: port 6379 is the host's Redis")));
    return this;
  }
  return connect.apply(this, args);
};
`,
  );
  [a, b] = await Promise.all([startRedisServer(), startRedisServer()]);
  ra = await connectRedis(a.url, { name: "test-rfs-a" });
  rb = await connectRedis(b.url, { name: "test-rfs-b" });
}, 60_000);

afterAll(async () => {
  await closeRedis(ra);
  await closeRedis(rb);
  await a?.stop();
  await b?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The built binary with no Redis in its environment and the 6379 tripwire loaded. */
function drill(args: string[], timeout = 30_000): Promise<CliResult> {
  return runDrill(args, { timeout, env: { DRILL_REDIS_URL: undefined, NODE_OPTIONS: `--import ${tripwire}` } as unknown as Record<string, string> });
}

/** A state dir holding drills as `up` records them, each on the given Redis. */
function stateDirWith(...drills: Array<{ name: string; url: string; queue?: string; phase?: DrillState["phase"]; cgroup?: string | null; owner?: DrillState["owner"] }>): string {
  const dir = path.join(tmp, `state${++n}`);
  for (const d of drills) {
    mkdirSync(path.join(dir, d.name), { recursive: true });
    writeState(dir, {
      version: 1,
      name: d.name,
      runId: `${d.name}-rfs-${n}`,
      drillFile: "drills/smoke.yaml",
      createdAt: new Date().toISOString(),
      phase: d.phase ?? "running",
      queue: d.queue ?? "jobs",
      redis: { url: d.url, embedded: null },
      cgroup: d.cgroup === null ? null : { name: d.cgroup ?? "infer", parent: "self", dirs: [] },
      processes: [],
      fileDir: null,
      owner: d.owner ?? { pid: 999_999, startTime: null },
    });
  }
  return dir;
}

/** This test process as a drill's owner: a live pid with its start time, so the drill is up by any measure. */
function ownProcess(): DrillState["owner"] {
  const self = readProcessStat(new HostRoots(), process.pid);
  if (!self.ok) throw new Error(`cannot read /proc/${process.pid}/stat`);
  return { pid: process.pid, startTime: self.value.startTime };
}

const note = (stateDir: string, name: string, url: string) => `redis: drill ${name}'s redis at ${url} (from ${path.join(stateDir, name, "state.json")})`;

describe("Redis commands given no --redis use the drill that is up (built binary)", () => {
  it("pack lands its job in the drill's Redis, says so once on stderr, and keeps --json stdout pure", async () => {
    const queue = `rfs${++n}`;
    const sd = stateDirWith({ name: "smoke", url: a.url, queue });
    const r = await drill(["--state-dir", sd, "--json", "pack", "--jobs", "1", "--queue", queue]);
    expect(r.stderr).not.toContain("TRIPWIRE");
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr.split("\n").filter((l) => l.startsWith("redis: "))).toEqual([note(sd, "smoke", a.url)]);
    for (const line of r.stdout.trim().split("\n")) expect(() => JSON.parse(line), line).not.toThrow();
    expect(await ra.llen(queue)).toBe(1);
    expect(await rb.llen(queue)).toBe(0);
  });

  it("gate mode reject_all (the deny-all lever) flips the drill's queue, not the default Redis", async () => {
    const sd = stateDirWith({ name: "smoke", url: a.url });
    await ra.set("jobs:mode", "admit");
    const r = await drill(["--state-dir", sd, "gate", "mode", "reject_all"]);
    expect(r.stderr).not.toContain("TRIPWIRE");
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).toContain(note(sd, "smoke", a.url));
    expect(r.stdout).toMatch(/^mode reject_all queue=jobs previous=admit/);
    expect(await ra.get("jobs:mode")).toBe("reject_all");
  });

  it("watch --once reads the drill's queue (queue_len from its Redis, not n/a)", async () => {
    const queue = `rfs${++n}`;
    await ra.rpush(queue, JSON.stringify({ id: "1", prompt_tokens: 10, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" }));
    const sd = stateDirWith({ name: "smoke", url: a.url, queue, cgroup: `rfs-none-${process.pid}` });
    const r = await drill(["--state-dir", sd, "--json", "watch", "--once", "--interval", "100ms", "--queue", queue, "--name", `rfs-none-${process.pid}`]);
    expect(r.stderr).not.toContain("TRIPWIRE");
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).toContain(note(sd, "smoke", a.url));
    const sample = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { queue_len: number | null };
    expect(sample.queue_len).toBe(1);
  });

  it("two drills up on the queue with different Redis: exit 2 naming both, nothing pushed anywhere", async () => {
    const queue = `rfs${++n}`;
    const sd = stateDirWith({ name: "one", url: a.url, queue }, { name: "two", url: b.url, queue });
    const r = await drill(["--state-dir", sd, "pack", "--jobs", "1", "--queue", queue]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain(`several drills in ${sd} are up on queue ${queue}: one (${a.url}), two (${b.url}); pick one with --redis <url>`);
    expect(r.stderr).not.toContain("TRIPWIRE");
    expect(await ra.llen(queue)).toBe(0);
    expect(await rb.llen(queue)).toBe(0);
    // gate mode too: the lever is never pulled on a guess
    const mode = await drill(["--state-dir", sd, "gate", "mode", "reject_all", "--queue", queue]);
    expect(mode.exitCode).toBe(2);
    expect(await ra.get(`${queue}:mode`)).toBeNull();
    expect(await rb.get(`${queue}:mode`)).toBeNull();
  });

  it("an explicit --redis wins over the drill up, silently", async () => {
    const queue = `rfs${++n}`;
    const sd = stateDirWith({ name: "smoke", url: a.url, queue });
    const r = await drill(["--state-dir", sd, "--redis", b.url, "pack", "--jobs", "1", "--queue", queue]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("redis: drill");
    expect(await rb.llen(queue)).toBe(1);
    expect(await ra.llen(queue)).toBe(0);
  });

  it("another cgroup (for a command with --name): not this command's drill, so exit 2 naming it; pack (no --name) still finds it", async () => {
    const queue = `rfs${++n}`;
    const sd = stateDirWith({ name: "done", url: a.url, queue, phase: "complete" }, { name: "other", url: b.url, queue, cgroup: "infer2" });
    // `watch` takes --name: the drill on cgroup infer2 is not the one on infer
    const watch = await drill(["--state-dir", sd, "--json", "watch", "--once", "--interval", "100ms", "--queue", queue, "--name", "infer"]);
    expect(watch.stderr).not.toContain("TRIPWIRE");
    expect(watch.exitCode, watch.stderr).toBe(2);
    expect(watch.stderr).toContain(`drill other is up in ${sd} on queue ${queue} and cgroup infer2 (redis ${b.url}), not on queue ${queue} and cgroup infer: give --name infer2 for its Redis`);
    // `pack` takes no --name: that drill is the one up on its queue
    const pack = await drill(["--state-dir", sd, "pack", "--jobs", "1", "--queue", queue]);
    expect(pack.exitCode, pack.stderr).toBe(0);
    expect(pack.stderr).toContain(note(sd, "other", b.url));
    expect(await rb.llen(queue)).toBe(1);
  });

  it("only rolled-back drills in the state dir: the default, silently (refused by the tripwire, never reached)", async () => {
    const queue = `rfs${++n}`;
    const sd = stateDirWith({ name: "done", url: a.url, queue, phase: "complete" }, { name: "batch", url: a.url, queue: `${queue}b`, phase: "complete" });
    const fallback = await drill(["--state-dir", sd, "pack", "--jobs", "1", "--queue", queue]);
    expect(fallback.exitCode).toBe(1);
    expect(fallback.stderr).not.toContain("redis: drill");
    expect(fallback.stderr).toContain("cannot connect to redis at redis://127.0.0.1:6379");
    expect(fallback.stderr).toContain("TRIPWIRE");
    expect(await ra.llen(queue)).toBe(0);
  });

  /**
   * QA 1: drill qa-a up on queue qq (cgroup qa-a); the operator's deny-all
   * with no --queue went to redis://127.0.0.1:6379 and said "mode reject_all
   * queue=jobs previous=admit" (exit 0) while the drill's gate kept admitting;
   * pack pushed there too; watch --queue qq with --name left at infer read it.
   * Now each is exit 2 naming the drill, before any connection: the tripwire
   * on 6379 never fires, and the drill's Redis is untouched.
   */
  it("a drill up on another queue: gate mode reject_all, pack and watch exit 2 naming it, and write nothing to any Redis", async () => {
    const queue = `rfsqq${++n}`;
    const sd = stateDirWith({ name: "qa-a", url: a.url, queue, cgroup: "qa-a", owner: ownProcess() });
    await ra.set(`${queue}:mode`, "admit");
    const before = [await ra.dbsize(), await rb.dbsize()];
    const hint = `drill qa-a is up in ${sd} on queue ${queue}`;

    const lever = await drill(["--state-dir", sd, "gate", "mode", "reject_all"]);
    expect(lever.stderr).not.toContain("TRIPWIRE");
    expect(lever.exitCode, lever.stdout + lever.stderr).toBe(2);
    expect(lever.stdout).toBe("");
    expect(lever.stderr).toContain(`${hint} (redis ${a.url}), not on queue jobs: give --queue ${queue} for its Redis, or --redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose`);

    const pack = await drill(["--state-dir", sd, "pack", "--jobs", "1"]);
    expect(pack.stderr).not.toContain("TRIPWIRE");
    expect(pack.exitCode, pack.stderr).toBe(2);
    expect(pack.stderr).toContain(hint);

    const watch = await drill(["--state-dir", sd, "watch", "--once", "--interval", "100ms", "--queue", queue]);
    expect(watch.stderr).not.toContain("TRIPWIRE");
    expect(watch.exitCode, watch.stderr).toBe(2);
    expect(watch.stderr).toContain(`${hint} and cgroup qa-a (redis ${a.url}), not on queue ${queue} and cgroup infer: give --name qa-a for its Redis`);

    expect(await ra.get(`${queue}:mode`)).toBe("admit");
    expect([await ra.dbsize(), await rb.dbsize()]).toEqual(before);

    // with the drill's --queue, the lever moves the drill's own queue
    const own = await drill(["--state-dir", sd, "gate", "mode", "reject_all", "--queue", queue]);
    expect(own.exitCode, own.stderr).toBe(0);
    expect(own.stderr).toContain(note(sd, "qa-a", a.url));
    expect(await ra.get(`${queue}:mode`)).toBe("reject_all");
  });

  it("rollback's closing line names the drill's Redis for gate mode admit (it is no longer up, so nothing else finds it)", async () => {
    const queue = `rfs${++n}`;
    // no cgroup recorded: this rollback must not look for one under our own cgroup
    const sd = stateDirWith({ name: "ext", url: a.url, queue, cgroup: null });
    const r = await drill(["--state-dir", sd, "rollback", "--name", "ext"], 60_000);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`ext: drill --state-dir ${sd} --redis ${a.url} gate mode admit --queue ${queue}`);
    expect(await ra.get(`${queue}:mode`)).toBe("reject_all");
  });
});

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping the drill up --detach case: ${skip}`);

describe.skipIf(skip !== null)("up --detach, then the deny-all lever with no --redis (the QA walkthrough)", () => {
  let stateDir = "";
  let fileDir = "";
  afterAll(async () => {
    if (stateDir) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
  });

  it("up prints its embedded Redis URL; gate mode reject_all and pack reach that Redis; rollback says how to re-admit", async () => {
    stateDir = path.join(tmp, "up-state");
    fileDir = path.join(tmp, "up-files");
    mkdirSync(fileDir, { recursive: true });
    const drillFile = path.join(tmp, "rfs.yaml");
    writeFileSync(
      drillFile,
      readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8")
        .replace(/^name: smoke$/m, "name: rfs")
        .replace(/^duration: .*$/m, "duration: 60s")
        .replace(/^phases:[\s\S]*$/m, "phases:\n  - at: 0s\n    pack: { jobs: 1, files: 1, prompt_tokens: 1000, completion_tokens: 4, deadline: 8s }\n"),
    );
    const cgroup = `rfs${process.pid}`;
    const up = await drill(["--state-dir", stateDir, "up", "--drill", drillFile, "--parent", "self", "--name", cgroup, "--file-dir", fileDir, "--detach"], 120_000);
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    const state = readState(stateDir, "rfs") as DrillState;
    expect(state.redis.embedded).not.toBeNull();
    const url = state.redis.url;
    expect(up.stdout).toContain(`redis: embedded redis-server at ${url}, queue jobs; deny-all by hand: \`drill --redis ${url} gate mode reject_all\``);

    const lever = await drill(["--state-dir", stateDir, "gate", "mode", "reject_all"]);
    expect(lever.stderr).not.toContain("TRIPWIRE");
    expect(lever.exitCode, lever.stderr).toBe(0);
    expect(lever.stderr).toContain(note(stateDir, "rfs", url));
    const embedded = await connectRedis(url, { name: "test-rfs-embedded" });
    try {
      expect(await embedded.get("jobs:mode")).toBe("reject_all");
      const seq = Number(await embedded.get("jobs:seq"));
      const pack = await drill(["--state-dir", stateDir, "pack", "--jobs", "1", "--prompt-tokens", "1000"]);
      expect(pack.stderr).not.toContain("TRIPWIRE");
      expect(pack.exitCode, pack.stderr).toBe(0);
      // the job id came from the drill's own jobs:seq
      expect(pack.stdout).toContain(`push job=${seq + 1} `);
      expect(Number(await embedded.get("jobs:seq"))).toBe(seq + 1);

      // worker (takes --name): chosen once by the launcher, and the run inside the
      // cgroup uses the same Redis: it meets the live heartbeat for its id that
      // exists only there, and refuses naming its holder (before any weights file).
      // --force: by hand, the worker cgroup of a drill that is up is refused before Redis is chosen.
      await embedded.set("jobs:workers:rfsw", "rfs-elsewhere:1:1:test", "PX", 60_000);
      const worker = await drill(["--state-dir", stateDir, "worker", "--name", cgroup, "--parent", "self", "--worker-id", "rfsw", "--weights", "4M", "--weights-dir", tmp, "--force"], 60_000);
      await embedded.del("jobs:workers:rfsw");
      expect(worker.stderr).not.toContain("TRIPWIRE");
      expect(worker.stderr.split("\n").filter((l) => l.startsWith("redis: "))).toEqual([note(stateDir, "rfs", url)]);
      expect(worker.stderr).toContain("worker id rfsw is held by rfs-elsewhere:1:1:test on another host");
      expect(worker.exitCode, worker.stderr).toBe(3);
    } finally {
      await closeRedis(embedded);
    }

    const rollback = await drill(["--state-dir", stateDir, "rollback", "--name", "rfs"], 90_000);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toMatch(/rfs: nothing to re-admit, its embedded Redis stopped with the drill \(every key in .*final-.*\.jsonl\)/);
    expect(rollback.stdout).not.toMatch(/^.*: drill gate mode admit/m);
    expect(rollback.stdout).toContain(`For the incident notes:\n  drill --state-dir ${stateDir} report --name rfs --format md`);
    assertHostClean(stateDir, "rfs", state);
  }, 240_000);
});
