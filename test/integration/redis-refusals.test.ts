import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admitScript, pushScript } from "../../src/queue/scripts.js";
import { doneScript, recoverWorkingScript } from "../../src/worker/scripts.js";
import { closeRedis, connectRedis, redisErrorText, runScript } from "../../src/queue/redis.js";
import { waitForPing } from "../../src/drill/embeddedRedis.js";
import { runDrill } from "../helpers/cli.js";
import { CALM_PSI } from "../helpers/psiText.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA R: a Redis that answers but refuses (an ACL, a full maxmemory, a replica).
let server: RedisServer;
let admin: Redis;
const clients: Redis[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  admin = await connectRedis(server.url, { name: "test-refusals-admin" });
});
afterAll(async () => {
  for (const c of clients) await closeRedis(c);
  await closeRedis(admin);
  await server?.stop();
});

/** A client as a user whose ACL denies `denied` (e.g. "-xadd"). */
async function userDenied(user: string, denied: string): Promise<{ redis: Redis; url: string }> {
  await admin.call("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", denied);
  const url = `redis://${user}:pw@127.0.0.1:${server.port}`;
  const redis = await connectRedis(url, { name: `test-${user}` });
  clients.push(redis);
  return { redis, url };
}

/** Every key of queue `q` with its content, to compare before and after a refused step. */
async function snapshot(q: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const key of (await admin.keys(`${q}*`)).sort()) {
    const type = await admin.type(key);
    out[key] = type === "list" ? await admin.lrange(key, 0, -1) : type === "hash" ? await admin.hgetall(key) : type === "stream" ? await admin.xlen(key) : await admin.get(key);
  }
  return out;
}

describe("a script whose user may not run one of its writes refuses before its first write (no half-applied step)", () => {
  it("admit with XADD denied: the job stays in processing, nothing admitted, no tokens held; the refusal names XADD and the events key", async () => {
    const q = "acladmit";
    const { redis } = await userDenied("noxadd", "-xadd");
    await admin.rpush(`${q}:processing:g1`, "payload-1");
    const before = await snapshot(q);
    const keys = ["processing:g1", "admitted", "inflight", "decisions", "events", "stats", "mode", "dead"].map((k) => `${q}:${k}`);
    const refused = await runScript(redis, admitScript, keys, ["payload-1", "1", "fp", "1", "1000", "32000", "1", "g1", "dead-entry"]).then(
      () => null,
      (err: Error) => err,
    );
    expect(refused?.message).toMatch(/^NOPERM this redis user may not run XADD on acladmit:events\b.*nothing done$/);
    expect(await snapshot(q)).toEqual(before);
    expect(redisErrorText(refused)).toContain("(ACL): grant it");
  });

  it("push with HSET denied: no id taken, nothing queued", async () => {
    const q = "aclpush";
    const { redis } = await userDenied("nohset", "-hset");
    await expect(runScript(redis, pushScript, [`${q}:seq`, q, `${q}:pushes`], ["tok", "{\"id\":\"", "\"}", "60000"])).rejects.toThrow(/NOPERM .*HSET on aclpush:pushes/);
    expect(await snapshot(q)).toEqual({});
  });

  it("the worker's done with HINCRBY denied: the job stays in its working list, not also in done", async () => {
    const q = "acldone";
    const { redis } = await userDenied("nohincrby", "-hincrby");
    await admin.rpush(`${q}:working:w1`, "payload-1");
    await admin.hset(`${q}:inflight`, "1", "1000");
    const before = await snapshot(q);
    const keys = [`${q}:working:w1`, `${q}:done`, `${q}:stats`, `${q}:inflight`, `${q}:first_token`];
    await expect(runScript(redis, doneScript, keys, ["payload-1", "record", "1", "0", "0"])).rejects.toThrow(/NOPERM .*HINCRBY on acldone:stats/);
    expect(await snapshot(q)).toEqual(before);
  });

  it("a worker's recovery with its stats denied still gives the jobs back, and names the key it left unwritten", async () => {
    const q = "aclrecover";
    const { redis } = await userDenied("nohincrby2", "-hincrby");
    await admin.rpush(`${q}:working:w1`, "payload-1");
    const keys = [`${q}:workers:w1`, `${q}:working:w1`, `${q}:admitted`, `${q}:first_token`, `${q}:stats`, `${q}:workers`];
    const reply = (await runScript(redis, recoverWorkingScript, keys, ["tok", "w1", "payload-1", "payload-1", "1"])) as [number, string];
    expect(reply[0]).toBe(1);
    expect(reply[1]).toMatch(/HINCRBY on aclrecover:stats/);
    expect(await admin.lrange(`${q}:admitted`, 0, -1)).toEqual(["payload-1"]);
    expect(await admin.exists(`${q}:working:w1`)).toBe(0);
  });
});

describe("refusals said with what fixes them", () => {
  it("a full Redis (maxmemory, noeviction): a MULTI's EXECABORT names the OOM inside it and the fix", async () => {
    await admin.config("SET", "maxmemory", "1");
    try {
      const err = await admin.multi().set("oomkey", "v").exec().then(
        () => null,
        (e: Error) => e,
      );
      const text = redisErrorText(err);
      expect(text).toMatch(/^EXECABORT .*: OOM command not allowed/);
      expect(text).toContain("redis is full");
      expect(text).toContain("CONFIG SET maxmemory");
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
  });

  it("drill gate mode under a user without EVALSHA/EVAL: one line naming the refusal, no stack trace, exit 1", async () => {
    const { url } = await userDenied("noscripts", "-@scripting");
    const r = await runDrill(["--redis", url, "gate", "mode", "reject_all", "--queue", "aclmode"]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stderr).toMatch(/drill: .*(NOPERM|can't run this command).*\(this redis user may not run that command/);
  });

  it("a gate whose user may not BLMOVE says it could not take a job, with the fix, not that a decision failed", async () => {
    const { url } = await userDenied("noblmove", "-blmove");
    const tmp = mkdtempSync(path.join(tmpdir(), "drill-refusals-"));
    try {
      mkdirSync(path.join(tmp, "proc", "pressure"), { recursive: true });
      writeFileSync(path.join(tmp, "proc", "pressure", "memory"), CALM_PSI);
      const r = await runDrill(["--redis", url, "--state-dir", path.join(tmp, "state"), "--procfs", path.join(tmp, "proc"), "gate", "--queue", "aclgate", "--duration", "1500ms", "--interval", "200ms"]);
      expect(r.stderr).toMatch(/gate: could not take a job: redis answered NOPERM .*'blmove'.*\(this redis user may not run that command/);
      expect(r.stderr).not.toContain("decision failed");
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("a gate whose heartbeat SET is refused mid-run says so once, and when it renews again", async () => {
    const { url } = await userDenied("hbgate", "+set"); // all allowed, until its SET is taken away below
    const tmp = mkdtempSync(path.join(tmpdir(), "drill-refusals-"));
    try {
      mkdirSync(path.join(tmp, "proc", "pressure"), { recursive: true });
      writeFileSync(path.join(tmp, "proc", "pressure", "memory"), CALM_PSI);
      const gate = runDrill(["--redis", url, "--state-dir", path.join(tmp, "state"), "--procfs", path.join(tmp, "proc"), "gate", "--queue", "aclhb", "--duration", "4s", "--interval", "200ms"]);
      await new Promise((resolve) => setTimeout(resolve, 1200));
      await admin.call("ACL", "SETUSER", "hbgate", "-set");
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await admin.call("ACL", "SETUSER", "hbgate", "+set");
      const r = await gate;
      expect(r.stderr.match(/gate: could not renew heartbeat aclhb:gates:\S+ \(.*\(this redis user may not run that command/g), r.stderr).toHaveLength(1);
      expect(r.stderr).toMatch(/gate: heartbeat aclhb:gates:\S+ renewed again/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  // QA W 8: a wrong password read "did not answer PING within 1500ms: WRONGPASS", after retrying it for the whole bound.
  it("waitForPing with a wrong password: said refused, not unanswered", async () => {
    await admin.call("ACL", "SETUSER", "pinger", "on", ">right", "~*", "+@all");
    await expect(waitForPing(`redis://pinger:wrong@127.0.0.1:${server.port}`, 1500)).rejects.toThrow(
      new RegExp(`^redis at redis://pinger:\\*\\*\\*@127\\.0\\.0\\.1:${server.port} answered, but refused: WRONGPASS`),
    );
  });

  // QA W 9: rediss:// to a plain server said only "connect ETIMEDOUT", after the connect bound.
  it("rediss:// to a server without TLS: the failure says what rediss:// is", async () => {
    await expect(connectRedis(`rediss://127.0.0.1:${server.port}`, { name: "test-refusals-tls" })).rejects.toThrow(
      /^cannot connect to redis at rediss:\/\/127\.0\.0\.1:\d+: .*\(rediss:\/\/ is TLS: a Redis without TLS never answers its handshake; redis:\/\/ for a plain one\)$/,
    );
    // rollback's PING wait too.
    await expect(waitForPing(`rediss://127.0.0.1:${server.port}`, 1500)).rejects.toThrow(/did not answer PING within 1500ms: .*\(rediss:\/\/ is TLS/);
  });

  it("watch --once with a user that may not run scripts: the queue fields are said refused, with the fix, not unreachable", async () => {
    const { url } = await userDenied("nowatch", "-@scripting");
    const r = await runDrill(["--redis", url, "watch", "--once", "--json", "--queue", "aclwatch", "--name", "nosuch-cgroup"]);
    expect(r.stderr).toMatch(/watch: Redis \S+ refused: .*\(this redis user may not run that command/);
    expect(r.stderr).not.toContain("unreachable");
  });

  it("a gate pointed at a read-only replica: one line naming the replica and the fix, exit 1, and no give-back warning for a list it never held", async () => {
    const replica = await startRedisServer();
    const replicaAdmin = await connectRedis(replica.url, { name: "test-refusals-replica" });
    clients.push(replicaAdmin);
    await replicaAdmin.call("REPLICAOF", "127.0.0.1", String(server.port));
    const tmp = mkdtempSync(path.join(tmpdir(), "drill-refusals-"));
    try {
      mkdirSync(path.join(tmp, "proc", "pressure"), { recursive: true });
      writeFileSync(path.join(tmp, "proc", "pressure", "memory"), CALM_PSI);
      const r = await runDrill(["--redis", replica.url, "--state-dir", path.join(tmp, "state"), "--procfs", path.join(tmp, "proc"), "gate", "--queue", "aclreplica", "--duration", "2s"]);
      expect(r.exitCode, r.stderr).toBe(1);
      expect(r.stderr).toMatch(/drill: redis refused: .*READONLY.*\(this redis is a read-only replica: point --redis at its primary\)/);
      expect(r.stderr).not.toContain("could not give back");
    } finally {
      rmSync(tmp, { recursive: true, force: true });
      await replica.stop();
    }
  });
});
