import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeState } from "../../src/drill/state.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping a refused drill up: ${skip}`);

/**
 * QA 12: `up --drill smoke2.yaml` refused ("refusing to share it with drill
 * smoke") left an empty <state-dir>/smoke2/, which rollback did not remove and
 * `report --name smoke2` took for a drill ("no source to report on: Redis no
 * --redis given and no state.json …"). An up refused before its first state
 * write now leaves no drill dir. Refused here by a given --redis whose queue
 * holds keys: the same early path (after the drill's lock, before its state),
 * with no second drill to run.
 */
describe.skipIf(skip !== null)("drill up refused before it starts anything (real doctor, --parent self)", () => {
  let root = "";
  let server: RedisServer | null = null;
  let redis: Redis | null = null;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-refused-"));
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-up-refused" });
  });
  afterAll(async () => {
    await closeRedis(redis);
    await server?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("leaves no <state-dir>/<name>/, and report --name says there is no such drill", async () => {
    const stateDir = path.join(root, "state");
    const drillFile = path.join(root, "refused2.yaml");
    writeFileSync(drillFile, tinyDrill("refused2", { phases: [["0s", pack(1)]] }));
    await redis!.set("refq:seq", "7");
    const up = await runDrill(
      ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "refq", "--parent", "self", "--name", `refused${process.pid}`, "--file-dir", root, "--duration", "5s"],
      { timeout: 120_000 },
    );
    expect(up.exitCode, up.stdout + up.stderr).toBe(3);
    expect(up.stderr).toContain("queue refq on");
    // Each fix names what this up acts on, as typed (QA: "drill up --queue <name>" and "drill report --redis" dropped --state-dir, --name, --parent, --redis).
    // And the drill as typed (QA: pasted without --file-dir and --duration, it wrote to /var/tmp and ran the file's duration).
    expect(up.stderr).toContain(`Run on a fresh queue (drill --state-dir ${stateDir} --redis ${server!.url} up --drill ${drillFile} --name refused${process.pid} --parent self --file-dir ${root} --duration 5s --queue <another name>)`);
    expect(up.stderr).toContain(`drill --state-dir ${stateDir} --redis ${server!.url} report --queue refq --format md keeps their summary`);
    expect(existsSync(path.join(stateDir, "refused2")), `left: ${existsSync(stateDir) ? readdirSync(stateDir).join(", ") : "no state dir"}`).toBe(false);
    expect(await redis!.get("refq:seq")).toBe("7");

    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "refused2"]);
    expect(report.exitCode, report.stderr).toBe(2);
    expect(report.stderr).toContain(`--name: no drill "refused2" in ${stateDir}`);
  }, 180_000);

  // QA: drill smoke's gate and worker ran on the queue; up listed their heartbeats and advised deleting the keys.
  it("a queue another drill of the state dir is up on: names that drill and its rollback, advises no DEL, touches nothing", async () => {
    const stateDir = path.join(root, "state-live");
    const drillFile = path.join(root, "second.yaml");
    writeFileSync(drillFile, tinyDrill("second", { phases: [["0s", pack(1)]] }));
    writeState(stateDir, {
      version: 1,
      name: "first",
      runId: "first-1",
      drillFile: "first.yaml",
      createdAt: new Date().toISOString(),
      phase: "running",
      queue: "liveq",
      redis: { url: server!.url.replace("127.0.0.1", "localhost"), embedded: null },
      cgroup: null,
      processes: [],
      fileDir: null,
      owner: { pid: process.pid, startTime: null },
    });
    await redis!.set("liveq:seq", "3");
    await redis!.set("liveq:gates:g-first", "1", "EX", 60);
    const up = await runDrill(
      ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "liveq", "--parent", "self", "--name", `second${process.pid}`, "--file-dir", root],
      { timeout: 120_000 },
    );
    expect(up.exitCode, up.stdout + up.stderr).toBe(3);
    expect(up.stderr).toMatch(/drill first is up on queue liveq on redis:\/\/127\.0\.0\.1:\d+ \(live heartbeats: gate g-first\); the queue's keys: /);
    expect(up.stderr).toContain(`or first: drill --state-dir ${stateDir} rollback --name first`);
    expect(up.stderr).not.toMatch(/DEL|redis-cli/);
    expect(await redis!.get("liveq:seq")).toBe("3");
    expect(existsSync(path.join(stateDir, "second"))).toBe(false);
  }, 180_000);
});
