// QA: an unexpected error in up's schedule (a bug) left state.json saying
// "running" with the up that runs it gone: an operator saw a drill up that
// nothing ran, and up kept packing until its Redis connection closed. The
// error is injected where the schedule has started its first pack
// (DRILL_CRASH_AT=phase-0:throw), with a given Redis for the job count.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLost, idsGivenByQueue } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping up whose schedule throws: ${skip}`);

describe.skipIf(skip !== null)("drill up whose schedule throws (real cgroups, --parent self)", () => {
  let root = "";
  let server: RedisServer | null = null;
  let redis: Redis | null = null;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-up-schedule-error-"));
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-up-schedule-error" });
  });
  afterAll(async () => {
    if (root) await runDrill(["--state-dir", path.join(root, "state"), "rollback"], { timeout: 90_000 });
    await closeRedis(redis);
    await server?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it("records the run stopped (not running), exits 1 naming the error and the rollback; rollback then reaches both invariants", async () => {
    const stateDir = path.join(root, "state");
    const drillFile = path.join(root, "schedthrow.yaml");
    const cgroupName = `schedthrow${process.pid}`;
    writeFileSync(drillFile, tinyDrill("schedthrow", { duration: "6s", phases: [["0s", pack(3)]] }));
    const up = await runDrill(
      ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "stq", "--parent", "self", "--name", cgroupName, "--file-dir", root],
      { timeout: 120_000, env: { DRILL_CRASH_AT: "phase-0:throw" } },
    );
    const said = up.stdout + up.stderr;
    expect(up.exitCode, said).toBe(1);
    const before = readState(stateDir, "schedthrow")!;
    // One line: the error, that the run is recorded stopped, and the rollback as typed; then the bug's stack.
    const [line, ...trace] = up.stderr.trim().split("\n");
    expect(trace[0], said).toBe("Error: DRILL_CRASH_AT=phase-0:throw");
    expect(trace[1], said).toMatch(/^ {4}at /);
    expect(line, said).toBe(
      `drill: up failed in run ${before.runId}'s schedule: DRILL_CRASH_AT=phase-0:throw; it stopped packing and exits, ${stateDir}/schedthrow/state.json records it stopped; ` +
        `its processes and cgroup stay until rollback: run \`drill --state-dir ${stateDir} rollback --name schedthrow\``,
    );
    // Ended, not running: the up that ran it is gone.
    expect(before.phase, said).toBe("stopped");
    expect(before.ended?.verdict).toBe("stopped_early");
    expect(before.ended?.reason).toBe("drill up failed: DRILL_CRASH_AT=phase-0:throw");
    const given = await idsGivenByQueue(server!.url, "stq");
    expect(before.ended?.pushedIds).toEqual(given);
    expect((before.ended?.pushed ?? 0) + (before.ended?.notPacked ?? 0)).toBe(3);
    // Its processes stay for the rollback, as after any stop.
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "schedthrow"]);
    expect(report.stdout, report.stderr).toContain("ended: stopped_early — drill up failed: DRILL_CRASH_AT=phase-0:throw");

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "schedthrow"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "schedthrow", before, { cgroupName });
    await assertNoJobLost(redis!, "stq", given);
  }, 180_000);

  // QA: the same error after gate, worker and watch started, before the schedule, left state.json "starting" with up gone.
  it("an error once its children started, before the schedule: recorded stopped, exit 1 with one line and the rollback; rollback then reaches both invariants", async () => {
    const stateDir = path.join(root, "state");
    const drillFile = path.join(root, "setupthrow.yaml");
    const cgroupName = `setupthrow${process.pid}`;
    writeFileSync(drillFile, tinyDrill("setupthrow", { duration: "6s", phases: [["0s", pack(3)]] }));
    const up = await runDrill(
      ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "sut", "--parent", "self", "--name", cgroupName, "--file-dir", root],
      { timeout: 120_000, env: { DRILL_CRASH_AT: "children:throw" } },
    );
    const said = up.stdout + up.stderr;
    expect(up.exitCode, said).toBe(1);
    expect(up.stdout).toContain("started gate, worker (in the cgroup) and watch");
    const before = readState(stateDir, "setupthrow")!;
    const [line, ...trace] = up.stderr.trim().split("\n");
    expect(trace[0], said).toBe("Error: DRILL_CRASH_AT=children:throw");
    expect(line, said).toBe(
      `drill: up failed setting up run ${before.runId}, before its schedule started: DRILL_CRASH_AT=children:throw; it exits, ${stateDir}/setupthrow/state.json records it stopped; ` +
        `its processes and cgroup stay until rollback: run \`drill --state-dir ${stateDir} rollback --name setupthrow\``,
    );
    expect(before.phase, said).toBe("stopped");
    expect(before.ended?.verdict).toBe("stopped_early");
    expect(before.ended?.reason).toBe("drill up failed: DRILL_CRASH_AT=children:throw");
    expect(before.processes.filter((p) => p.pid !== null).map((p) => p.role).sort()).toEqual(["gate", "watch", "worker"]);

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "setupthrow"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "setupthrow", before, { cgroupName });
    await assertNoJobLost(redis!, "sut", []);
  }, 180_000);
  // QA: the admission lever's write refused by Redis (here NOREPLICAS: min-replicas-to-write with none), after it answered and the
  // cgroup was made, before the children: state.json stayed "starting" with up gone, and the error came with a stack.
  it("the admission lever's write refused by Redis: recorded stopped, exit 1 with one line and the rollback; rollback then leaves the host clean", async () => {
    const refusing = await startRedisServer();
    const stateDir = path.join(root, "state");
    const drillFile = path.join(root, "setmodefail.yaml");
    const cgroupName = `setmodefail${process.pid}`;
    writeFileSync(drillFile, tinyDrill("setmodefail", { duration: "6s", phases: [["0s", pack(3)]] }));
    const admin = await connectRedis(refusing.url, { name: "test-setmode-refused" });
    try {
      await admin.config("SET", "min-replicas-to-write", "1");
      const up = await runDrill(
        ["--state-dir", stateDir, "--redis", refusing.url, "up", "--drill", drillFile, "--queue", "smf", "--parent", "self", "--name", cgroupName, "--file-dir", root],
        { timeout: 120_000 },
      );
      const said = up.stdout + up.stderr;
      expect(up.exitCode, said).toBe(1);
      const before = readState(stateDir, "setmodefail")!;
      const lines = up.stderr.trim().split("\n");
      expect(lines, said).toHaveLength(1);
      expect(lines[0], said).toMatch(
        new RegExp(
          `^drill: up failed setting up run ${before.runId}, before its schedule started: cannot open admission \\(smf:mode admit\\) on redis ${refusing.url}: NOREPLICAS .*; ` +
            `it exits, ${stateDir}/setmodefail/state.json records it stopped; its cgroup stays until rollback: run \`drill --state-dir ${stateDir} rollback --name setmodefail\`$`,
        ),
      );
      expect(before.phase, said).toBe("stopped");
      expect(before.ended?.verdict).toBe("stopped_early");
      expect(before.ended?.reason).toMatch(/^drill up failed: cannot open admission \(smf:mode admit\) on redis \S+: NOREPLICAS /);
      expect(before.cgroup?.name).toBe(cgroupName);
      expect(before.processes.filter((p) => p.pid !== null)).toEqual([]);
      await admin.config("SET", "min-replicas-to-write", "0");
      const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "setmodefail"], { timeout: 90_000 });
      expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
      assertHostClean(stateDir, "setmodefail", before, { cgroupName });
      await assertNoJobLost(admin, "smf", []);
    } finally {
      await closeRedis(admin);
      await refusing.stop();
    }
  }, 180_000);
});
