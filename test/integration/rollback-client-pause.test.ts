import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { cgroupDirsLeft, realCgroupSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping CLIENT PAUSE rollback test: ${skip}`);

const DRILL = "tinyclpause";
const CGROUP = "clpausecg";
const TINY = tinyDrill(DRILL, { duration: "2s", phases: [["0s", pack(3)]] });

/**
 * RELIABILITY 14 with the given Redis paused for writes (CLIENT PAUSE WRITE)
 * rather than down or SIGSTOPped: it answers PING and reads, so the rollback
 * connects, and its deny-all waits. QA: the step said ioredis's bare
 * "Command timed out", and the exit 4 said jobs:mode "is not reject_all"
 * while the paused server set it when it resumed.
 */
describe.skipIf(skip !== null)("rollback with its given Redis paused for writes", () => {
  let root: string;
  let server: RedisServer;
  let admin: Redis;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-client-pause-"));
    writeFileSync(path.join(root, `${DRILL}.yaml`), TINY);
    server = await startRedisServer();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    await admin?.call("CLIENT", "UNPAUSE").catch(() => undefined);
    const state = readState(root, DRILL);
    if (state && state.phase !== "complete") await runDrill(["--state-dir", root, "rollback"], { timeout: 60_000 });
    admin?.disconnect();
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  }, 90_000);

  it("deny-all unanswered: named as no reply from that Redis, its outcome unknown (exit 4); resumed, the next rollback finishes", async () => {
    const drillFile = path.join(root, `${DRILL}.yaml`);
    const up = await runDrill(["--state-dir", root, "--redis", server.url, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP], { timeout: 60_000 });
    expect(up.exitCode, up.stderr).toBe(0);
    const pushed = (JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    const before = readState(root, DRILL) as DrillState;
    // Longer than the rollback's 5 s command timeout.
    await admin.call("CLIENT", "PAUSE", "8000", "WRITE");
    const paused = await runDrill(["--state-dir", root, "rollback"], { timeout: 60_000 });
    expect(paused.exitCode, paused.stdout + paused.stderr).toBe(4);
    expect(paused.stdout + paused.stderr).not.toContain("Command timed out");
    expect(paused.stdout).toContain("FAIL deny-all: no reply in time: redis paused");
    expect(paused.stderr).toContain(`deny-all unconfirmed (Redis at 127.0.0.1:${server.port} did not answer within 5s: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded): jobs:mode may not be reject_all yet`);
    expect(paused.stderr).not.toContain("jobs:mode is not reject_all");
    await admin.call("CLIENT", "UNPAUSE");
    const again = await runDrill(["--state-dir", root, "rollback"], { timeout: 60_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(await admin.get("jobs:mode")).toBe("reject_all");
    await assertNoJobLost(admin, "jobs", pushed);
    assertHostClean(root, DRILL, before, { cgroupName: CGROUP });
  }, 120_000);
});
