import { spawn } from "node:child_process";
import os from "node:os";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import type { ReportDocument } from "../../src/report/render.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: after the OOM killer took the worker, up's report said its jobs were
// "held by worker ...: alive" for as long as its heartbeat's TTL ran. The
// heartbeat names the process (host:pid:start_time): a gone one is said.

let server: RedisServer;
let redis: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-report-worker-exited" });
}, 60_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
});

/** A process of this host that ran and exited: its pid and start time, as a worker's heartbeat would carry them. */
async function exitedProcess(): Promise<{ pid: number; startTime: number }> {
  const child = spawn("sleep", ["30"], { stdio: "ignore" });
  const stat = readProcessStat(new HostRoots(), child.pid!);
  if (!stat.ok) throw new Error(`cannot read /proc/${child.pid}/stat: ${stat.reason}`);
  child.kill("SIGKILL");
  await new Promise((resolve) => child.once("exit", resolve));
  return { pid: child.pid!, startTime: stat.value.startTime };
}

const job = (id: string) => JSON.stringify({ id, prompt_tokens: 100, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" });

describe("report: jobs held by a worker whose process is gone", () => {
  it("a working list whose worker exited on this host is DEAD with its pid, while its heartbeat still counts down; a live one stays alive", async () => {
    const gone = await exitedProcess();
    await redis.set("wq:workers:w-gone", `${os.hostname()}:${gone.pid}:${gone.startTime}:abcd`, "PX", 60_000);
    await redis.rpush("wq:working:w-gone", job("1"), job("2"));
    const self = readProcessStat(new HostRoots(), process.pid);
    if (!self.ok) throw new Error(self.reason);
    await redis.set("wq:workers:w-live", `${os.hostname()}:${process.pid}:${self.value.startTime}:abcd`, "PX", 60_000);
    await redis.rpush("wq:working:w-live", job("3"));
    await redis.set("wq:seq", "3");

    const r = await runDrill(["--redis", server.url, "--json", "report", "--queue", "wq"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as ReportDocument;
    const rows = doc.jobs_where!.rows;
    const goneRow = rows.find((row) => row.key === "wq:working:w-gone")!;
    expect(goneRow).toMatchObject({ count: 2, holder_alive: false });
    expect(goneRow.note).toContain(`DEAD, worker pid ${gone.pid} exited (its heartbeat wq:workers:w-gone runs out by itself)`);
    expect(rows.find((row) => row.key === "wq:working:w-live")).toMatchObject({ count: 1, holder_alive: true });
    expect(doc.jobs_where!.held_by_dead).toBe(2);
  });
});
