import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import type { ReportDocument } from "../../src/report/render.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// report read a live <q>:seq of "007" as 7 issued ids, and called ids 2..7 lost,
// although drill pack refuses to push on that seq. Now it is unreadable: null, said.

let server: RedisServer;
let redis: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-report-seq-refused" });
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
});

const job = (id: string) => JSON.stringify({ id, prompt_tokens: 100, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" });

describe("report on a live Redis whose <q>:seq drill pack would refuse", () => {
  it("seq \"007\": ids_issued null, said in the notes, no id called lost", async () => {
    await redis.rpush("sq", job("1"));
    await redis.set("sq:seq", "007");
    const r = await runDrill(["--redis", server.url, "--json", "report", "--queue", "sq"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as ReportDocument;
    expect(doc.jobs_where).toMatchObject({ ids_issued: null, not_found: [] });
    expect(doc.notes.join("\n")).toContain('sq:seq is "007", not a job id (0, or digits with no leading zero, under 2^53: what drill pack pushes on): ids issued are n/a, lost ids not checked');
    expect(doc.notes.join("\n")).not.toContain("on no list of the queue");
  });

  it("seq \"1\": read as before", async () => {
    await redis.set("sq:seq", "1");
    const r = await runDrill(["--redis", server.url, "--json", "report", "--queue", "sq"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as ReportDocument;
    expect(doc.jobs_where).toMatchObject({ ids_issued: 1, not_found: [] });
  });
});
