// QA: an unexpected error in up's schedule (a bug) left state.json saying
// "running" with the up that runs it gone: an operator saw a drill up that
// nothing ran, and up kept packing until its Redis connection closed. The
// error is injected where the schedule has started its first pack
// (DRILL_CRASH_AT=phase-0:throw), with a given Redis for the job count.
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess } from "../../src/host/process.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { rollsBackClean } from "../helpers/hostClean.js";
import { assertNoJobLost, assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { spawnDrill, untilStopped } from "../helpers/stateFill.js";

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

  /** A drill of a few seconds (`jobs` small jobs, no hog) written under root, as each case's up runs it. */
  const tinyDrillFile = (name: string, duration = "6s", jobs = 3): string => {
    const file = path.join(root, `${name}.yaml`);
    writeFileSync(file, tinyDrill(name, { duration, phases: [["0s", pack(jobs)]] }));
    return file;
  };

  it("records the run stopped (not running), exits 1 naming the error and the rollback; rollback then reaches both invariants", async () => {
    const stateDir = path.join(root, "state");
    const cgroupName = `schedthrow${process.pid}`;
    const drillFile = tinyDrillFile("schedthrow");
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

    await rollsBackClean(stateDir, "schedthrow", before, { cgroupName });
    await assertNoJobLost(redis!, "stq", given);
  }, 180_000);

  // QA: the same error after gate, worker and watch started, before the schedule, left state.json "starting" with up gone.
  it("an error once its children started, before the schedule: recorded stopped, exit 1 with one line and the rollback; rollback then reaches both invariants", async () => {
    const stateDir = path.join(root, "state");
    const cgroupName = `setupthrow${process.pid}`;
    const drillFile = tinyDrillFile("setupthrow");
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

    await rollsBackClean(stateDir, "setupthrow", before, { cgroupName });
    await assertNoJobLost(redis!, "sut", []);
  }, 180_000);
  // QA: the admission lever's write refused by Redis (here NOREPLICAS: min-replicas-to-write with none), after it answered and the
  // cgroup was made, before the children: state.json stayed "starting" with up gone, and the error came with a stack.
  it("the admission lever's write refused by Redis: recorded stopped, exit 1 with one line and the rollback; rollback then leaves the host clean", async () => {
    const refusing = await startRedisServer();
    const stateDir = path.join(root, "state");
    const cgroupName = `setmodefail${process.pid}`;
    const drillFile = tinyDrillFile("setmodefail");
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
      await rollsBackClean(stateDir, "setmodefail", before, { cgroupName });
      await assertNoJobLost(admin, "smf", []);
    } finally {
      await closeRedis(admin);
      await refusing.stop();
    }
  }, 180_000);

  // QA: the lever's write sent and never answered (here the Redis paused for writes, so up's 5 s command timeout fires) may have been
  // applied all the same: "cannot open admission" said it was not.
  it("the admission lever's write unanswered: says it may have been applied and that the rollback pulls the lever; recorded stopped; rollback then reaches both invariants", async () => {
    const paused = await startRedisServer();
    const stateDir = path.join(root, "state");
    const cgroupName = `setmodenoreply${process.pid}`;
    const drillFile = tinyDrillFile("setmodenoreply");
    const admin = await connectRedis(paused.url, { name: "test-setmode-noreply" });
    try {
      // Stopped once its cgroup is claimed (its next Redis command is the lever's write); Redis paused for writes, then up goes on.
      const args = ["--state-dir", stateDir, "--redis", paused.url, "up", "--drill", drillFile, "--queue", "smn", "--parent", "self", "--name", cgroupName, "--file-dir", root];
      const { child, said: output, exited } = spawnDrill(args, "cgroup:stop");
      await untilStopped(child.pid!, () => JSON.stringify(output()));
      await admin.call("CLIENT", "PAUSE", "60000", "WRITE");
      child.kill("SIGCONT");
      const code = await exited;
      await admin.call("CLIENT", "UNPAUSE");
      const { stdout, stderr } = output();
      const said = stdout + stderr;
      expect(code, said).toBe(1);
      const before = readState(stateDir, "setmodenoreply")!;
      const lines = stderr.trim().split("\n");
      expect(lines, said).toHaveLength(1);
      const lever = `the admission lever's write \\(smn:mode admit\\) on redis ${paused.url} got no reply \\(Redis at 127\\.0\\.0\\.1:${paused.port} did not answer within 5s: check whether it is paused \\(CLIENT PAUSE, SIGSTOP\\) or overloaded\\): it may have been applied, so admission may be open; the rollback pulls the lever either way`;
      expect(lines[0], said).toMatch(
        new RegExp(
          `^drill: up failed setting up run ${before.runId}, before its schedule started: ${lever}; ` +
            `it exits, ${stateDir}/setmodenoreply/state.json records it stopped; its cgroup stays until rollback: run \`drill --state-dir ${stateDir} rollback --name setmodenoreply\`$`,
        ),
      );
      expect(said).not.toContain("cannot open admission");
      expect(before.phase, said).toBe("stopped");
      expect(before.ended?.verdict).toBe("stopped_early");
      expect(before.ended?.reason).toMatch(new RegExp(`^drill up failed: ${lever}$`));
      await rollsBackClean(stateDir, "setmodenoreply", before, { cgroupName });
      expect(await admin.get("smn:mode")).toBe("reject_all");
      await assertNoJobLost(admin, "smn", []);
    } finally {
      await admin.call("CLIENT", "UNPAUSE").catch(() => {});
      await closeRedis(admin);
      await paused.stop();
    }
  }, 180_000);

  // QA: connecting to the embedded Redis failed after it answered its PING (here refused: maxclients reached), and state.json stayed "starting".
  it("connecting to its embedded Redis refused once it answered: recorded stopped, exit 1 with one line and the rollback; rollback then leaves the host clean", async () => {
    const stateDir = path.join(root, "state");
    const cgroupName = `connectfail${process.pid}`;
    const drillFile = tinyDrillFile("connectfail");
    const args = ["--state-dir", stateDir, "up", "--drill", drillFile, "--queue", "cfq", "--parent", "self", "--name", cgroupName, "--file-dir", root];
    // Stopped once its embedded Redis answered; that Redis then takes no more clients (this one holds its last), then up goes on.
    const { child, said: output, exited } = spawnDrill(args, "redis-spawn:stop");
    await untilStopped(child.pid!, () => JSON.stringify(output()));
    const starting = readState(stateDir, "connectfail")!;
    const url = `redis://127.0.0.1:${starting.redis.embedded!.port}`;
    const admin = await connectRedis(url, { name: "test-connect-refused" });
    let code: number | null;
    try {
      const [, maxclients] = (await admin.config("GET", "maxclients")) as string[];
      await admin.config("SET", "maxclients", "1");
      child.kill("SIGCONT");
      code = await exited;
      await admin.config("SET", "maxclients", maxclients!);
    } finally {
      await closeRedis(admin);
    }
    const { stdout, stderr } = output();
    const said = stdout + stderr;
    expect(code, said).toBe(1);
    const before = readState(stateDir, "connectfail")!;
    const lines = stderr.trim().split("\n");
    expect(lines, said).toHaveLength(1);
    const refused = `Redis at 127\\.0\\.0\\.1:${starting.redis.embedded!.port} refused the connection: max number of clients reached`;
    expect(lines[0], said).toMatch(
      new RegExp(
        `^drill: up failed setting up run ${before.runId}, before its schedule started: ${refused}.*; ` +
          `it exits, ${stateDir}/connectfail/state.json records it stopped; its embedded Redis stays until rollback: run \`drill --state-dir ${stateDir} rollback --name connectfail\`$`,
      ),
    );
    expect(before.phase, said).toBe("stopped");
    expect(before.ended?.verdict).toBe("stopped_early");
    expect(before.ended?.reason).toMatch(new RegExp(`^drill up failed: ${refused}`));
    expect(before.cgroup).toBeNull();
    await rollsBackClean(stateDir, "connectfail", before, { cgroupName });
    // The embedded Redis is gone with the rollback: its export holds the queue (no job was pushed).
    const recorded = readState(stateDir, "connectfail")!;
    assertNoJobLostInExport(recorded.rollback!.exported!, "cfq", []);
  }, 180_000);

  // QA: an error between its embedded Redis's start and the connection to it (DRILL_CRASH_AT=redis-spawn:throw) took the older path:
  // "drill: unexpected error", state.json "starting" with the Redis's pid unrecorded, and that redis-server left running.
  it("an error once its embedded Redis started, before the connection: recorded stopped naming that Redis, exit 1 with one line and the rollback; rollback then stops it", async () => {
    const stateDir = path.join(root, "state");
    const cgroupName = `ur${process.pid}redisthrow`;
    const drillFile = tinyDrillFile("redisthrow");
    const up = await runDrill(
      ["--state-dir", stateDir, "up", "--drill", drillFile, "--queue", "rtq", "--parent", "self", "--name", cgroupName, "--file-dir", root],
      { timeout: 120_000, env: { DRILL_CRASH_AT: "redis-spawn:throw" } },
    );
    const said = up.stdout + up.stderr;
    expect(up.exitCode, said).toBe(1);
    const before = readState(stateDir, "redisthrow")!;
    const [line, ...trace] = up.stderr.trim().split("\n");
    expect(trace[0], said).toBe("Error: DRILL_CRASH_AT=redis-spawn:throw");
    expect(line, said).toBe(
      `drill: up failed setting up run ${before.runId}, before its schedule started: DRILL_CRASH_AT=redis-spawn:throw; it exits, ${stateDir}/redisthrow/state.json records it stopped; ` +
        `its embedded Redis stays until rollback: run \`drill --state-dir ${stateDir} rollback --name redisthrow\``,
    );
    expect(before.phase, said).toBe("stopped");
    expect(before.ended?.verdict).toBe("stopped_early");
    expect(before.ended?.reason).toBe("drill up failed: DRILL_CRASH_AT=redis-spawn:throw");
    expect(before.cgroup).toBeNull();
    // The Redis it started is recorded with its pid, and runs until the rollback.
    const recorded = before.processes.find((p) => p.role === "redis");
    expect(recorded?.pid, JSON.stringify(before.processes)).not.toBeNull();
    expect(isSameProcess(new HostRoots(), recorded!.pid!, recorded!.startTime!), "embedded redis-server running").toBe(true);
    await rollsBackClean(stateDir, "redisthrow", before, { cgroupName });
    const after = readState(stateDir, "redisthrow")!;
    expect(after.rollback?.at).toBeDefined();
    assertNoJobLostInExport(after.rollback!.exported!, "rtq", []);
  }, 180_000);

  // QA: an embedded redis-server that exits at start (a bad config, its port taken between the free-port check and its bind, a broken
  // binary; here a redis-server on PATH that exits 1 with a config error) left state.json "starting" with up gone: report read it as
  // an up that died, and the next up was refused as "already up" until a rollback, which restarted a Redis that had never run.
  it("its embedded Redis exits at start: one line with its reason, the run recorded ended with nothing started; up again works at once", async () => {
    const stateDir = path.join(root, "state");
    const cgroupName = `rs${process.pid}redisexits`;
    // 1s, the shortest drill: only the second up runs it, to its end before its rollback.
    const drillFile = tinyDrillFile("redisexits", "1s", 1);
    const fakeBin = path.join(root, "fake-redis-bin");
    mkdirSync(fakeBin, { recursive: true });
    const fatal = "*** FATAL CONFIG FILE ERROR (Redis 7.2.4) *** Bad directive or wrong number of arguments";
    writeFileSync(path.join(fakeBin, "redis-server"), `#!/bin/sh\necho '${fatal}' >&2\nexit 1\n`);
    chmodSync(path.join(fakeBin, "redis-server"), 0o755);
    const args = ["--state-dir", stateDir, "up", "--drill", drillFile, "--queue", "rxq", "--parent", "self", "--name", cgroupName, "--file-dir", root];
    const up = await runDrill(args, { timeout: 120_000, env: { PATH: `${fakeBin}:${process.env.PATH ?? ""}` } });
    const said = up.stdout + up.stderr;
    expect(up.exitCode, said).toBe(1);
    const failedRun = readState(stateDir, "redisexits")!;
    const redisDir = path.join(stateDir, "redisexits", "runs", failedRun.runId, "redis");
    const lines = up.stderr.trim().split("\n");
    expect(lines, said).toHaveLength(1);
    expect(lines[0], said).toBe(
      `drill: up failed setting up run ${failedRun.runId}, before its schedule started: redis-server exited at start (code 1): ${fatal}; see ${redisDir}/redis.stderr; ` +
        `it exits, ${stateDir}/redisexits/state.json records it ended; it started nothing (no Redis, process or cgroup): nothing to roll back; ` +
        `run \`drill --state-dir ${stateDir} up --drill ${drillFile} --name ${cgroupName} --parent self --file-dir ${root} --queue rxq\` again once that is fixed`,
    );
    // Ended and closed: no Redis, process or cgroup recorded, nothing for a rollback.
    expect(failedRun.phase, said).toBe("complete");
    expect(failedRun.ended?.verdict).toBe("stopped_early");
    expect(failedRun.ended?.reason).toBe(`drill up failed: redis-server exited at start (code 1): ${fatal}; see ${redisDir}/redis.stderr`);
    expect(failedRun.redis).toEqual({ url: "", embedded: null });
    expect(failedRun.processes).toEqual([]);
    expect(failedRun.cgroup).toBeNull();
    // Its report says why there is nothing to report (QA: "no source to report on: Redis no Redis recorded in ...").
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "redisexits"], { timeout: 60_000 });
    expect(report.exitCode, report.stdout + report.stderr).toBe(1);
    expect(report.stderr).toContain(
      `no source to report on: Redis none recorded in ${stateDir}/redisexits/state.json (run ${failedRun.runId} ended before it had one, no job packed: drill up failed: redis-server exited at start (code 1): ${fatal}`,
    );
    // Its rollback has nothing to do and says why (QA: "already rolled back" of a run no rollback ever touched).
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "redisexits"], { timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toContain(`rollback redisexits:\n  nothing to roll back: its drill up ended at ${failedRun.completedAt} before it started anything (no Redis, process or cgroup)\n`);
    expect(rollback.stdout).not.toContain("already rolled back");

    // The same drill again, with the real redis-server: it starts without a rollback first, runs, and its rollback leaves the host clean.
    const again = await runDrill(args, { timeout: 120_000 });
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toContain(`drill redisexits's previous run ${failedRun.runId} (phase complete) is kept`);
    const ran = readState(stateDir, "redisexits")!;
    expect(ran.runId).not.toBe(failedRun.runId);
    await rollsBackClean(stateDir, "redisexits", ran, { cgroupName });
  }, 240_000);
});
