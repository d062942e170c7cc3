// QA: state dir writes of `drill up`'s setup that are not state.json (its run
// dir, its children's log files) ended in "drill: unexpected error" and a
// stack on a full state dir, and the embedded Redis's own record refused left
// up with no summary. The state dir is a small tmpfs with few inodes (a full
// tmpfs still makes empty files and dirs), filled while up is stopped at a
// DRILL_CRASH_AT=<step>:stop, then let go on (SIGCONT).
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { rollsBackClean } from "../helpers/hostClean.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { fill, mountTmpfs, spawnDrill, unfill, until, untilStopped } from "../helpers/stateFill.js";

const skip = process.getuid?.() !== 0 ? "not root: cannot mount a tmpfs to fill" : realDrillSkipReason();
if (skip) console.warn(`skipping up whose setup writes are refused: ${skip}`);

const ADVICE = "ENOSPC (no space left there: free some, or give --state-dir a directory on another disk)";

describe.skipIf(skip !== null)("drill up whose state dir refuses a setup write (real cgroups, --parent self)", () => {
  let root = "";
  let mount = "";
  let server: RedisServer | null = null;
  let redis: Redis | null = null;
  const stateDirs: string[] = [];
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-up-setup-refused-"));
    mount = path.join(root, "tmpfs");
    mkdirSync(mount);
    mountTmpfs(mount, "512k", 400);
    server = await startRedisServer();
    redis = await connectRedis(server.url, { name: "test-up-setup-refused" });
  });
  afterAll(async () => {
    if (mount) {
      unfill(mount);
      for (const stateDir of stateDirs) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
      spawnSync("umount", [mount]);
    }
    await closeRedis(redis);
    await server?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  }, 120_000);

  /**
   * `drill up` stopped at `crashAt`, the state dir filled (`inodes` too), then let go on. With `freedAfterSetup`, stopped again
   * once it said it stopped while setting up (DRILL_CRASH_AT=children:stop) and the state dir freed: the run's end is written.
   */
  async function upFilledAt(name: string, crashAt: string, { given = true, inodes = false, freedAfterSetup = false, cgroupName = `${name}${process.pid}` } = {}) {
    const stateDir = path.join(mount, name);
    stateDirs.push(stateDir);
    const drillFile = path.join(root, `${name}.yaml`);
    writeFileSync(drillFile, tinyDrill(name, { duration: "3s", phases: [["0s", pack(2)]] }));
    const args = ["--state-dir", stateDir, ...(given ? ["--redis", server!.url] : []), "up", "--drill", drillFile, "--queue", `${name}q`, "--parent", "self", "--name", cgroupName, "--file-dir", root];
    const { child, said, exited } = spawnDrill(args, freedAfterSetup ? `${crashAt},children:stop` : crashAt);
    let code: number | null;
    try {
      await untilStopped(child.pid!, () => JSON.stringify(said()));
      fill(mount, { inodes });
      child.kill("SIGCONT");
      if (freedAfterSetup) {
        // Said just before that stop: the next stop seen is that one.
        await until(() => said().stdout.includes("stopped while setting up"), () => JSON.stringify(said()));
        await untilStopped(child.pid!, () => JSON.stringify(said()));
        unfill(mount);
        child.kill("SIGCONT");
      }
      code = await exited;
    } finally {
      // A failure above leaves no full state dir to the tests after it.
      unfill(mount);
    }
    const { stdout, stderr } = said();
    return { stateDir, cgroupName, pid: child.pid!, code, stdout, stderr, rollbackCmd: `drill --state-dir ${stateDir} rollback --name ${name}` };
  }

  // QA: a child's intent whose write was refused stayed in up's state and was written with the run's end, pid null: a child to stop that never ran.
  it("a child's intent refused: the run's end records no such child; rollback then leaves the host clean", async () => {
    const up = await upFilledAt("setupintent", "files:stop", { freedAfterSetup: true, cgroupName: `ur${process.pid}setupintent` });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    const file = `${up.stateDir}/setupintent/state.json`;
    expect(up.stdout).toContain(`stopped while setting up: cannot write state file ${file}: ${ADVICE}; admission opened (the rollback pulls the lever), gate, worker and watch not started`);
    const before = readState(up.stateDir, "setupintent")!;
    expect(before.phase, said).toBe("stopped");
    expect(before.ended?.verdict).toBe("stopped_early");
    // Only what was started: no process (the Redis is given), its cgroup.
    expect(before.processes, said).toEqual([]);
    expect(before.cgroup?.name).toBe(up.cgroupName);
    await rollsBackClean(up.stateDir, "setupintent", before, { cgroupName: up.cgroupName });
    await assertNoJobLost(redis!, "setupintentq", []);
  }, 180_000);

  it("a child spawned whose pid's write is refused: the run's end records it with its pid; rollback then stops it", async () => {
    const up = await upFilledAt("setuppid", "gate-spawn:stop", { freedAfterSetup: true, cgroupName: `ur${process.pid}setuppid` });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    expect(up.stdout).toContain(`admission opened (the rollback pulls the lever), worker and watch not started`);
    const before = readState(up.stateDir, "setuppid")!;
    expect(before.phase, said).toBe("stopped");
    expect(before.processes.map((p) => p.role), said).toEqual(["gate"]);
    expect(before.processes[0]!.pid, said).not.toBeNull();
    await rollsBackClean(up.stateDir, "setuppid", before, { cgroupName: up.cgroupName });
    await assertNoJobLost(redis!, "setuppidq", []);
  }, 180_000);

  it("its run dir refused (before its Redis): one line naming the dir, that nothing started, and the rollback; rollback then leaves the host clean", async () => {
    const up = await upFilledAt("setuprundir", "state:stop", { inodes: true });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    const before = readState(up.stateDir, "setuprundir")!;
    const runDir = `${up.stateDir}/setuprundir/runs/${before.runId}`;
    expect(up.stderr.trim(), said).toBe(
      `drill: cannot create the run dir ${runDir}: ENOSPC at ${up.stateDir}/setuprundir/runs (no space left there: free some, or give --state-dir a directory on another disk); ` +
        `up stopped while setting up run ${before.runId}: it had started nothing (no Redis, cgroup or process; no summary: nothing ran), but ${up.stateDir}/setuprundir/state.json says the run is starting: run \`${up.rollbackCmd}\``,
    );
    expect(before.phase).toBe("starting");
    await rollsBackClean(up.stateDir, "setuprundir", before, { cgroupName: up.cgroupName });
  }, 180_000);

  it("the gate's log refused: stops there as at a Ctrl-C, with its summary, the log named and the rollback; rollback then reaches both invariants", async () => {
    const up = await upFilledAt("setuplog", "gate-intent:stop", { inodes: true });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    const before = readState(up.stateDir, "setuplog")!;
    expect(up.stdout).toContain(
      `stopped while setting up: cannot open the log ${up.stateDir}/setuplog/runs/${before.runId}/gate.out: ${ADVICE}; admission opened (the rollback pulls the lever), gate, worker and watch not started`,
    );
    expect(up.stdout).toMatch(/^drill setuplog: packer stopped after 0 jobs \(2 not packed: the drill stopped first\)/m);
    expect(up.stdout).toContain(`Run \`${up.rollbackCmd}\` before walking away`);
    // Its end not recorded either (no inode for state.json's temp file), said last, naming state.json (not its temp file).
    const file = `${up.stateDir}/setuplog/state.json`;
    expect(up.stderr.trim(), said).toBe(
      `drill: cannot write state file ${file}: ENOSPC (no space left there: free some, or give --state-dir a directory on another disk); ` +
        `the drill's end is not recorded there (what it did is above), everything it started is: run \`${up.rollbackCmd}\``,
    );
    expect(before.cgroup?.name).toBe(up.cgroupName);
    await rollsBackClean(up.stateDir, "setuplog", before, { cgroupName: up.cgroupName });
    await assertNoJobLost(redis!, "setuplogq", []);
  }, 180_000);

  it("the embedded Redis's record refused: stops there with its summary and the rollback (it answers); rollback then stops that Redis", async () => {
    const up = await upFilledAt("setupredis", "redis-spawn:stop", { given: false });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    const file = `${up.stateDir}/setupredis/state.json`;
    expect(up.stdout).toContain(`stopped while setting up: cannot write state file ${file}: ${ADVICE}; admission not opened, gate, worker and watch not started`);
    expect(up.stdout).not.toContain("summary unavailable");
    expect(up.stdout).toMatch(/^drill setupredis: packer stopped after 0 jobs \(2 not packed: the drill stopped first\)/m);
    // Stopped before its cgroup and files were made: none said to stay.
    expect(up.stdout).toContain(`Run \`${up.rollbackCmd}\` before walking away: none of its processes runs any more (the embedded Redis exits by itself`);
    expect(up.stdout).not.toMatch(/cgroup and files stay|its cgroup stays/);
    expect(up.stderr.trim(), said).toBe(
      `drill: cannot write state file ${file}: ${ADVICE}; the drill's end is not recorded there (what it did is above), everything it started is: run \`${up.rollbackCmd}\``,
    );
    const before = readState(up.stateDir, "setupredis")!;
    // Its intent (port and dir) is recorded, its pid not: rollback finds it by its dir.
    expect(before.redis.embedded).not.toBeNull();
    expect(before.cgroup).toBeNull();
    await rollsBackClean(up.stateDir, "setupredis", before, { cgroupName: up.cgroupName });
  }, 180_000);
  // QA: a full state dir as the embedded Redis starts: "redis-server exited at start (code 1)", state.json "starting", no why (its log was refused too).
  it("the embedded Redis refused its files (full): says why, as a refused write, with the rollback; rollback then leaves the host clean", async () => {
    const up = await upFilledAt("setupaof", "redis-intent:stop", { given: false });
    const said = up.stdout + up.stderr;
    expect(up.code, said).toBe(1);
    const before = readState(up.stateDir, "setupaof")!;
    const redisDir = `${up.stateDir}/setupaof/runs/${before.runId}/redis`;
    const [line, ...rest] = up.stderr.trim().split("\n");
    expect(rest, said).toEqual([]);
    expect(line, said).toMatch(
      new RegExp(`^drill: cannot start the embedded Redis in ${redisDir}: ENOSPC( at ${redisDir}/redis\\.stderr)? \\(no space left there: free some, or give --state-dir a directory on another disk\\); redis-server exited at start \\(code 1\\)`),
    );
    expect(line, said).toContain(
      `; up stopped while setting up run ${before.runId}: it had started nothing (no Redis, cgroup or process; no summary: nothing ran), but ${up.stateDir}/setupaof/state.json says the run is starting: run \`${up.rollbackCmd}\``,
    );
    expect(before.phase).toBe("starting");
    await rollsBackClean(up.stateDir, "setupaof", before, { cgroupName: up.cgroupName });
  }, 180_000);
});
