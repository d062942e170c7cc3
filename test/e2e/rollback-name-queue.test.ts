import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { forceCleanup, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// `rollback --name <cgroup> --queue Q` (a cgroup setup cgroup and its hand-run queue) run again once the
// cgroup was torn down: no drill or cgroup of that name any more, and with a drill up beside it in the state
// dir, exit 2 "no drill <name>", after it had flipped and drained Q (a usage error is "nothing touched"), and
// without the queue's next commands. A rollback run again exits 0 (RELIABILITY 8): the name is said, not refused.

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping rollback --name <cgroup> --queue, twice: ${skip}`);
const CGROUP = `rbnamequeue${process.pid}`;
let server: RedisServer;
let redis: Redis;
let root = "";
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-rollback-name-queue" });
  root = mkdtempSync(path.join(tmpdir(), "drill-rb-name-queue-"));
}, 60_000);
afterAll(async () => {
  if (!skip) await forceCleanup(realWorkerCgroup(CGROUP), path.join(root, "s"));
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const job = (id: string): string => JSON.stringify({ id, prompt_tokens: 10, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" });

describe.skipIf(skip !== null)("drill rollback --name <cgroup setup cgroup> --queue Q, twice", () => {
  it("the second run, the cgroup gone: exit 0, the queue's drain appended and its next commands, the name said; the drill beside it untouched", async () => {
    const stateDir = path.join(root, "s");
    const drill = (args: string[]) => runDrill(["--state-dir", stateDir, "--redis", server.url, ...args], { timeout: 30_000 });
    writeFakeDrill(stateDir, "busyd", "busy", server.url, { phase: "running" });
    const setup = await drill(["cgroup", "setup", "--parent", "self", "--name", CGROUP, "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stdout + setup.stderr).toBe(0);
    await redis.set(queueKeys("nq").mode, "admit");
    await redis.rpush("nq", job("1"));

    const first = await drill(["rollback", "--name", CGROUP, "--queue", "nq"]);
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    expect(first.stdout).toContain(`rollback cgroup ${CGROUP} (made by drill cgroup setup, in no drill):`);

    await redis.rpush("nq", job("2"));
    const second = await drill(["rollback", "--name", CGROUP, "--queue", "nq"]);
    expect(second.exitCode, second.stdout + second.stderr).toBe(0);
    expect(second.stdout).toContain(`only --queue nq acted on (no cgroup setup cgroup ${CGROUP} in ${stateDir} either: torn down by an earlier rollback, or another name); --name: no drill "${CGROUP}" in ${stateDir} (drills there: busyd (running))`);
    expect(second.stdout).toContain("ok   drain: moved 1 from nq; LLEN nq_drain = 2");
    expect(second.stdout).toContain(`report --queue nq --format md`);
    expect((await redis.lrange(queueKeys("nq").drain, 0, -1)).map((p) => (JSON.parse(p) as { id: string }).id)).toEqual(["1", "2"]);
    expect(readState(stateDir, "busyd")?.phase).toBe("running");
    expect(await redis.get(queueKeys("busy").mode)).toBeNull();

    // Without --queue nothing is done: a name that matches nothing beside drills stays a usage error.
    const bare = await drill(["rollback", "--name", CGROUP]);
    expect(bare.exitCode, bare.stdout + bare.stderr).toBe(2);
    expect(bare.stderr).toContain(`--name: no drill "${CGROUP}" in ${stateDir}`);
  });
});
