import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../src/drill/embeddedRedis.js";
import { readState } from "../../src/drill/state.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// A hand-run queue's rollback beside a drill up in the same state dir: `rollback --queue Q` is also every
// drill there (README), so the hint gave the queue alone in `--state-dir "$(mktemp -d)"`, leaving a temp dir
// behind and naming it in every command it printed next. `--queue-only` is that queue alone, in the state dir given.

let server: RedisServer;
let redis: Redis;
let root = "";
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-rollback-queue-only" });
  root = mkdtempSync(path.join(tmpdir(), "drill-rb-queue-only-"));
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const job = (id: string): string => JSON.stringify({ id, prompt_tokens: 10, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" });
const drainIds = async (queue: string): Promise<string[]> => (await redis.lrange(queueKeys(queue).drain, 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id);

describe("drill rollback --queue Q --queue-only (built binary, own redis-server)", () => {
  it("closes and drains Q job by job, leaves the drill up in that state dir on another queue, writes nothing but into the state dir given; twice: appends, exit 0", async () => {
    const stateDir = mkdtempSync(path.join(root, "s-"));
    writeFakeDrill(stateDir, "busyd", "busy", server.url, { phase: "running" });
    const k = queueKeys("hq");
    await redis.set(k.mode, "admit");
    await redis.rpush("hq", job("1"));
    await redis.rpush(k.admitted, job("2"));
    await redis.rpush(k.working("w-killed"), job("3"));
    const drill = (args: string[], url = server.url) => runDrill(["--state-dir", stateDir, "--redis", url, ...args], { timeout: 30_000 });

    const first = await drill(["rollback", "--queue", "hq", "--queue-only"]);
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toContain(`rollback queue hq on ${server.url} (--queue-only: no drill or cgroup setup cgroup of ${stateDir} touched; a gate or worker run by hand keeps running):`);
    expect(first.stdout).toContain("ok   drain: moved 1 from hq; LLEN hq_drain = 1");
    expect(first.stdout).toContain("ok   re-drain: moved 1 from hq:admitted, 1 from hq:working:w-killed; LLEN hq_drain = 3");
    expect(first.stdout).not.toContain("rollback busyd");
    // What comes next names the state dir given, not a temp dir nobody sees.
    expect(first.stdout).toContain(`drill --state-dir ${stateDir} --redis ${server.url} gate mode admit --queue hq`);
    expect(first.stdout).toContain(`drill --state-dir ${stateDir} --redis ${server.url} report --queue hq --format md`);
    expect(await redis.get(k.mode)).toBe("reject_all");
    expect(await drainIds("hq")).toEqual(["1", "2", "3"]);
    // The drill beside it: still up, its queue's lever untouched; the state dir holds it alone.
    expect(readState(stateDir, "busyd")?.phase).toBe("running");
    expect(await redis.get(queueKeys("busy").mode)).toBeNull();
    expect(readdirSync(stateDir)).toEqual(["busyd"]);

    // A producer pushed since: the second run appends (RELIABILITY 15), exit 0 (RELIABILITY 8), the drill still up.
    await redis.rpush("hq", job("4"));
    const second = await drill(["--json", "rollback", "--queue", "hq", "--queue-only"]);
    expect(second.exitCode, second.stdout + second.stderr).toBe(0);
    const doc = JSON.parse(second.stdout) as { drills: unknown[]; cgroups: unknown[]; queues: Array<{ queue: string; drain_length: number; left: string[] }>; left: string[] };
    expect(doc.drills).toEqual([]);
    expect(doc.cgroups).toEqual([]);
    expect(doc.queues).toEqual([expect.objectContaining({ queue: "hq", drain_length: 4, left: [] })]);
    expect(doc.left).toEqual([]);
    expect(await drainIds("hq")).toEqual(["1", "2", "3", "4"]);
    expect(readState(stateDir, "busyd")?.phase).toBe("running");
    expect(await redis.get(queueKeys("busy").mode)).toBeNull();
  });

  it("its Redis down: exit 4, and the command to run again keeps --queue-only (without it, it rolls back the drill beside)", async () => {
    const stateDir = mkdtempSync(path.join(root, "down-"));
    writeFakeDrill(stateDir, "busyd", "busy", server.url, { phase: "running" });
    const url = `redis://127.0.0.1:${await freePort()}`;
    const r = await runDrill(["--state-dir", stateDir, "--redis", url, "rollback", "--queue", "hq", "--queue-only"], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`Not rolled back yet: run drill --state-dir ${stateDir} --redis ${url} rollback --queue hq --queue-only once its Redis answers`);
    expect(r.stderr).toContain(`queue hq on ${url}: deny-all and drain not done`);
    expect(readState(stateDir, "busyd")?.phase).toBe("running");
  });

  it("the queue of a drill up in that state dir: not flipped, exit 4, naming that drill's own rollback", async () => {
    const stateDir = mkdtempSync(path.join(root, "own-"));
    writeFakeDrill(stateDir, "ownd", "ownq", server.url, { phase: "running" });
    await redis.rpush("ownq", job("9"));
    const r = await runDrill(["--state-dir", stateDir, "--redis", server.url, "rollback", "--queue", "ownq", "--queue-only"], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`queue ownq on ${server.url} is drill ownd's, which --queue-only leaves out: its own rollback drains it`);
    expect(r.stderr).toContain(`run that: drill --state-dir ${stateDir} --redis ${server.url} rollback --name ownd`);
    expect(await redis.get(queueKeys("ownq").mode)).toBeNull();
    expect(await redis.llen("ownq")).toBe(1);
    expect(readState(stateDir, "ownd")?.phase).toBe("running");
  });

  it.each([
    [["--queue-only"], "drill: --queue-only: no --queue given; it rolls back the queue given with --queue <name> alone (add --queue <name>, or drop --queue-only)"],
    [["--queue-only", "--name", "busyd", "--queue", "uq"], "drill: --queue-only with --name busyd: --queue-only touches no drill or cgroup of the state dir, --name rolls one back; for the queue alone drop --name, for busyd and the queue drop --queue-only"],
  ])("rollback %j: exit 2 naming the flag, nothing touched", async (flags, message) => {
    const stateDir = mkdtempSync(path.join(root, "usage-"));
    writeFakeDrill(stateDir, "busyd", "busy", server.url, { phase: "running" });
    await redis.del("uq");
    await redis.set(queueKeys("uq").mode, "admit");
    await redis.rpush("uq", job("1"));
    const r = await runDrill(["--state-dir", stateDir, "--redis", server.url, "rollback", ...flags], { timeout: 30_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe(message);
    expect(r.stdout).toBe("");
    expect(readState(stateDir, "busyd")?.phase).toBe("running");
    expect(await redis.get(queueKeys("uq").mode)).toBe("admit");
    expect(await redis.llen("uq")).toBe(1);
  });
});
