// Every JSON document drill prints for scripts spells its keys in snake_case,
// as DESIGN.md's field names (`queue_age_ms`, `psi_mem_some_rate`) do: one
// convention for a script to read. The built binary on this host, a real
// cgroup under this test's own (--parent self, torn down), its own Redis.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeJob } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { forceCleanup, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the --json key casing walk: ${skip}`);

const CGROUP = "jsonkeys";
const UP_CGROUP = "jsonkeysup";
const QUEUE = "jk";

/** Every key, at any depth, that is camelCase (`runId`), with where it sits. */
function camelCaseKeys(value: unknown, where = "$"): string[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => camelCaseKeys(v, `${where}[${i}]`));
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, v]) => [...(/[a-z][A-Z]/.test(key) ? [`${where}.${key}`] : []), ...camelCaseKeys(v, `${where}.${key}`)]);
}

/** A command's stdout as documents: one pretty document (report), else one per line. */
function documents(stdout: string): unknown[] {
  try {
    return [JSON.parse(stdout)];
  } catch {
    return stdout.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as unknown);
  }
}

describe.skipIf(skip !== null)("--json documents: snake_case keys only (built binary, real cgroup)", () => {
  let server: RedisServer;
  let redis: Redis;
  let root: string;
  let stateDir: string;
  let files: string;
  beforeAll(async () => {
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-json-keys" });
    root = mkdtempSync(path.join(os.tmpdir(), "drill-json-keys-"));
    stateDir = path.join(root, "state");
    files = path.join(root, "files");
    mkdirSync(files);
  }, 120_000);
  afterAll(async () => {
    // Only does something when the case failed half-way.
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    await forceCleanup(realWorkerCgroup(CGROUP), stateDir);
    await closeRedis(redis);
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it("doctor, cgroup setup/status/teardown, inject, pack, gate, gate mode, worker, watch, up, report, rollback and rollback's export", async () => {
    const found = new Map<string, string[]>();
    const run = async (what: string, args: string[], ok: number[] = [0], timeout = 60_000) => {
      const r = await runDrill(["--state-dir", stateDir, ...args], { timeout });
      expect(ok, `${what}: exit ${r.exitCode}\n${r.stdout}\n${r.stderr}`).toContain(r.exitCode);
      const docs = documents(r.stdout);
      expect(docs.length, `${what} printed no document`).toBeGreaterThan(0);
      found.set(what, docs.flatMap((d) => camelCaseKeys(d)));
      return docs;
    };
    const redisArgs = ["--json", "--redis", server.url];
    const target = ["--parent", "self", "--name", CGROUP];

    // doctor's verdict may be refused on a shared host: its document is printed either way.
    await run("doctor", [...redisArgs, "doctor", "--parent", "self", "--file-dir", files, "--size", "16M"], [0, 3]);
    await run("cgroup setup", ["--json", "cgroup", "setup", ...target, "--memory-max", "96M", "--swap-max", "0"]);
    // Again: drill's own cgroup, judged on its marker (the marker's fields are in the plan).
    await run("cgroup setup again", ["--json", "cgroup", "setup", ...target, "--memory-max", "96M", "--swap-max", "0"]);
    await run("cgroup status", ["--json", "cgroup", "status", ...target]);
    await run("inject", ["--json", "inject", ...target, "--mode", "anon", "--size", "8M", "--hold", "1s"]);
    await run("pack", [...redisArgs, "pack", "--jobs", "2", "--queue", QUEUE, "--prompt-tokens", "1000", "--completion-tokens", "4"]);
    await run("gate mode", [...redisArgs, "gate", "mode", "reject_all", "--queue", QUEUE]);
    await run("gate", [...redisArgs, "gate", "--queue", QUEUE, "--interval", "200ms", "--max-jobs", "2", "--idle-exit", "2s"]);
    // As the gate leaves an admitted job: the worker's done event.
    const keys = queueKeys(QUEUE);
    const job = { id: "w1", prompt_tokens: 1000, completion_tokens: 4, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" };
    await redis.hset(keys.inflight, job.id, job.prompt_tokens);
    await redis.rpush(keys.admitted, encodeJob(job));
    await run("worker", [...redisArgs, "worker", ...target, "--queue", QUEUE, "--weights", "8M", "--weights-dir", files, "--max-jobs", "1", "--idle-exit", "5s"]);
    await run("watch", [...redisArgs, "watch", ...target, "--queue", QUEUE, "--once"]);
    await run("cgroup teardown", ["--json", "cgroup", "teardown", ...target]);

    const drillFile = path.join(root, "jsonkeys.yaml");
    writeFileSync(drillFile, tinyDrill("jsonkeys", { duration: "3s", phases: [["0s", pack(2)]] }));
    await run("up", ["--json", "up", "--drill", drillFile, "--parent", "self", "--name", UP_CGROUP, "--file-dir", files], [0], 120_000);
    await run("report", ["--json", "report", "--name", "jsonkeys"]);
    await run("rollback", ["--json", "rollback", "--name", "jsonkeys"], [0], 90_000);
    // The export's own fields; its `value`s are the Redis data as stored (hash fields are data).
    const exported = readdirSync(path.join(stateDir, "jsonkeys")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    const lines = readFileSync(path.join(stateDir, "jsonkeys", exported[0]!), "utf8").split("\n").filter((l) => l !== "");
    found.set("rollback export", lines.flatMap((l) => Object.keys(JSON.parse(l) as object).filter((k) => /[a-z][A-Z]/.test(k))));

    expect(Object.fromEntries([...found].filter(([, keys]) => keys.length > 0))).toEqual({});
    expect([...found.keys()]).toEqual([
      "doctor", "cgroup setup", "cgroup setup again", "cgroup status", "inject", "pack", "gate mode", "gate", "worker", "watch", "cgroup teardown",
      "up", "report", "rollback", "rollback export",
    ]);
  }, 300_000);
});
