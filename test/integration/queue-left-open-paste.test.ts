// QA "paste every command drill prints": the way a teardown (and a killed worker's launcher, and rollback) says
// to close and drain a hand-run queue, `drill --state-dir S --redis U rollback --queue Q`, also rolled back a
// drill up in S on another queue (no --name: every drill there). Pasted here as printed, into bash: the
// line names that drill, that command does roll it back, and the queue-only command leaves it alone
// (once in `--state-dir "$(mktemp -d)"`: a temp dir left behind, named by the commands it printed next).
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { encodeJob, type Job } from "../../src/queue/job.js";
import { queueKeys } from "../../src/queue/keys.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { queueLeftOpenLine, readServedQueues } from "../../src/worker/served.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { runPasted } from "../helpers/pasted.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let redis: Redis;
let root = "";

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), "drill-left-open-"));
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-left-open" });
});

afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** A hand-run queue as a SIGKILLed worker leaves it: admission open, 2 jobs in its working list, 1 admitted. */
async function handQueueLeft(queue: string): Promise<void> {
  const k = queueKeys(queue);
  const job = (id: string): Buffer => encodeJob({ id, prompt_tokens: 256, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 60_000, attempt: 0, host_class: "shared-free" } satisfies Job);
  await redis.set(k.mode, "admit");
  await redis.rpush(k.working("w1"), job("1"), job("2"));
  await redis.rpush(k.admitted, job("3"));
}

describe("the queue left open, its close-and-drain command pasted as printed", () => {
  it("names the drill up beside it; the queue-only command drains the queue and leaves that drill up; the other rolls it back", async () => {
    const stateDir = path.join(root, "s");
    writeFakeDrill(stateDir, "qaagb", "busy", server.url, { phase: "running" });
    await handQueueLeft("handq");
    const [open] = (await readServedQueues([{ queue: "handq", url: server.url }], { stateDir })).open;
    expect(open).toBeDefined();
    expect(open!.alsoRollsBack).toEqual(["qaagb"]);
    expect(queueLeftOpenLine(open!)).toContain("this also rolls back drill qaagb");

    // The queue alone: closed, its working and admitted lists drained, and drill qaagb still up.
    const env = { TMPDIR: root };
    expect(open!.queueOnlyCommand).toBe(`${open!.command} --queue-only`);
    const alone = await runPasted(open!.queueOnlyCommand!, env);
    expect(alone.exitCode, alone.stdout + alone.stderr).toBe(0);
    // In the state dir given: its next commands name it, and no temp dir is left behind.
    expect(alone.stdout).toContain(`drill --state-dir ${stateDir} --redis ${server.url} report --queue handq --format md`);
    expect(readdirSync(root)).toEqual(["s"]);
    const k = queueKeys("handq");
    expect(await redis.get(k.mode)).toBe("reject_all");
    expect(await redis.llen(k.drain)).toBe(3);
    expect(readState(stateDir, "qaagb")?.phase).toBe("running");
    expect(await redis.get(queueKeys("busy").mode)).toBeNull();

    // As printed first: it does what the line says, qaagb rolled back with it.
    await handQueueLeft("handq2");
    const [again] = (await readServedQueues([{ queue: "handq2", url: server.url }], { stateDir })).open;
    const all = await runPasted(again!.command, env);
    expect(all.stdout + all.stderr).toContain("rollback qaagb:");
    expect(readState(stateDir, "qaagb")?.phase).not.toBe("running");
    expect(await redis.get(queueKeys("busy").mode)).toBe("reject_all");
  });
});
