// QA: a state dir that filled up mid-drill made `drill up` exit 1 with one
// line (`cannot write state file …: ENOSPC`), no summary, nothing on what it
// had started or what to roll back. The state dir here is a 64 KiB tmpfs,
// filled once its first phase starts; the Redis is given (an embedded
// one's AOF would fill the same disk and stop the drill first).
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { fill, mountTmpfs, spawnDrill, unfill, untilStopped } from "../helpers/stateFill.js";

const skip = process.getuid?.() !== 0 ? "not root: cannot mount a tmpfs to fill" : realDrillSkipReason();
if (skip) console.warn(`skipping up on a state dir that fills: ${skip}`);

describe.skipIf(skip !== null)("drill up whose state dir fills mid-drill (real cgroups, --parent self)", () => {
  let root = "";
  let mount = "";
  let server: RedisServer | null = null;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-up-state-full-"));
    mount = path.join(root, "tmpfs");
    mkdirSync(mount);
    mountTmpfs(mount, "64k");
    server = await startRedisServer();
  });
  afterAll(async () => {
    if (mount) {
      unfill(mount);
      for (const state of ["state", "state-setup"]) await runDrill(["--state-dir", path.join(mount, state), "rollback"], { timeout: 90_000 });
      spawnSync("umount", [mount]);
    }
    await server?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it("prints its summary and what to roll back, then exit 1 naming the write refused; rollback then finds everything", async () => {
    const stateDir = path.join(mount, "state");
    const drillFile = path.join(root, "statefull.yaml");
    writeFileSync(drillFile, tinyDrill("statefull", { duration: "3s", phases: [["0s", pack(2)]] }));
    const args = ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "sfq", "--parent", "self", "--name", `statefull${process.pid}`, "--file-dir", root];
    const child = spawn("node", [drillBin, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" } });
    let stdout = "";
    let stderr = "";
    let filled = false;
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      // Once the drill runs (its phase 0 starts as the schedule's clock does).
      if (!filled && stdout.includes("phase 0: pack")) {
        filled = true;
        fill(mount);
      }
    });
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    expect(filled, stdout + stderr).toBe(true);
    expect(code, stdout + stderr).toBe(1);
    // What it did and what to do next, as after any run.
    expect(stdout).toMatch(/^drill statefull: packer stopped after \d+ jobs/m);
    expect(stdout).toContain(`Run \`drill --state-dir ${stateDir} rollback --name statefull\` before walking away`);
    expect(stderr.trim()).toBe(
      `drill: cannot write state file ${stateDir}/statefull/state.json: ENOSPC (no space left there: free some, or give --state-dir a directory on another disk); ` +
        `the drill's end is not recorded there (what it did is above), everything it started is: run \`drill --state-dir ${stateDir} rollback --name statefull\``,
    );
    // Everything it started is recorded: the rollback stops and removes it (the disk freed).
    unfill(mount);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "statefull"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toMatch(/ok {3}kill and remove cgroup: killed \d+/);
  }, 180_000);

  // QA: refused while it set up, up exited 1 with the refused write and no word on what it had made.
  it("refused while setting up: stops there as at a Ctrl-C, prints its summary and what to roll back, then exit 1 naming the write; rollback then leaves the host clean", async () => {
    const stateDir = path.join(mount, "state-setup");
    const drillFile = path.join(root, "statesetup.yaml");
    const cgroupName = `statesetup${process.pid}`;
    writeFileSync(drillFile, tinyDrill("statesetup", { duration: "3s", phases: [["0s", pack(2)]] }));
    const args = ["--state-dir", stateDir, "--redis", server!.url, "up", "--drill", drillFile, "--queue", "ssq", "--parent", "self", "--name", cgroupName, "--file-dir", root];
    // Stopped (SIGSTOP) right after it claimed its cgroup; the disk is filled, then it goes on to its next state write.
    const { child, said, exited } = spawnDrill(args, "cgroup:stop");
    await untilStopped(child.pid!, () => JSON.stringify(said()));
    fill(mount);
    child.kill("SIGCONT");
    const code = await exited;
    const { stdout, stderr } = said();
    expect(code, stdout + stderr).toBe(1);
    const file = `${stateDir}/statesetup/state.json`;
    const refused = `cannot write state file ${file}: ENOSPC (no space left there: free some, or give --state-dir a directory on another disk)`;
    expect(stdout).toContain(`stopped while setting up: ${refused}; admission not opened, gate, worker and watch not started`);
    // What it did and what to do next, as after any stop.
    expect(stdout).toMatch(/^drill statesetup: packer stopped after 0 jobs \(2 not packed: the drill stopped first\)/m);
    expect(stdout).toContain(`Run \`drill --state-dir ${stateDir} rollback --name statesetup\` before walking away: none of its processes runs any more, its cgroup stays until then.`);
    // Refused before its file dir: no files of it to stay.
    expect(stdout).not.toContain("files stay");
    expect(stderr.trim()).toBe(
      `drill: ${refused}; the drill's end is not recorded there (what it did is above), everything it started is: run \`drill --state-dir ${stateDir} rollback --name statesetup\``,
    );
    // Recorded up to its cgroup: the rollback removes it (the disk freed).
    unfill(mount);
    const before = readState(stateDir, "statesetup")!;
    expect(before.cgroup?.name).toBe(cgroupName);
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "statesetup"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    assertHostClean(stateDir, "statesetup", before, { cgroupName });
  }, 180_000);
});
