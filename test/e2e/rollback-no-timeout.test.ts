import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { downDrillsWithoutTimeout, redisServerOnPath, serversIn } from "../helpers/downEmbeddedRedis.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";

/**
 * Rollback restarts a stopped embedded Redis on its AOF to drain and export
 * it. QA: on a host without coreutils `timeout` (which bounded that server's
 * life) the restart failed, the drain stayed pending, exit 4. Now it runs the
 * server bare and stops it itself: at its end, and when it is stopped first.
 */

const roots = new HostRoots();
const QUEUE = "ntjobs";
const PUSHED = ["1", "2", "3"];
if (redisServerOnPath === null) console.warn("skipping rollback without `timeout`: no redis-server on PATH (apt-get install redis-server)");

describe.skipIf(redisServerOnPath === null)("rollback with no `timeout` on PATH (an embedded Redis down, its jobs in its AOF)", () => {
  const drills = downDrillsWithoutTimeout("drill-no-timeout-", QUEUE, PUSHED);
  const downDrill = (name: string, owner?: { pid: number; startTime: number }) => drills.down(name, owner);

  const rollback = (stateDir: string, name: string) => runDrill(["--state-dir", stateDir, "rollback", "--name", name], { env: { PATH: drills.bare } });
  const exportOf = (stateDir: string, name: string) => path.join(stateDir, name, readdirSync(path.join(stateDir, name)).find((f) => f.startsWith("final-"))!);

  it("restarts it bare, drains and exports every job, stops it: exit 0, host clean", async () => {
    const { stateDir, dir } = await downDrill("nt");
    const r = await rollback(stateDir, "nt");
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/restarted on its AOF .* \(no `timeout` \(coreutils\) on PATH: it runs until this rollback stops it\)/);
    assertNoJobLostInExport(exportOf(stateDir, "nt"), QUEUE, PUSHED);
    expect(readState(stateDir, "nt")?.phase).toBe("complete");
    expect(serversIn(dir), "a redis-server left running").toEqual([]);
  });

  it("stopped by SIGTERM after the restart: stops that Redis too (nothing else ends it); the next rollback finishes, no job lost", async () => {
    // An up that ignores SIGTERM: the rollback's "stop packer" waits 5 s for it, with the Redis restarted.
    const owner = spawn(process.execPath, ["-e", "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)"], { stdio: "ignore" });
    drills.started.push(owner);
    await sleep(200);
    const stat = readProcessStat(roots, owner.pid!);
    expect(stat.ok).toBe(true);
    const { stateDir, dir } = await downDrill("ntint", { pid: owner.pid!, startTime: stat.ok ? stat.value.startTime : 0 });

    const child = execa("node", [drillBin, "--state-dir", stateDir, "rollback", "--name", "ntint"], { env: { FORCE_COLOR: "0", PATH: drills.bare }, reject: false, timeout: 60_000 });
    drills.started.push(child);
    let stdout = "";
    child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    while (!stdout.includes("ok   deny-all") && child.exitCode === null) await sleep(10);
    expect(serversIn(dir), "the restarted redis-server").toHaveLength(1);
    child.kill("SIGTERM");
    const r = await child;
    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(143);
    expect(r.stderr).toMatch(/stopped redis-server \d+, restarted on its AOF in .* with no `timeout` \(coreutils\) to end it: its jobs stay in that AOF/);
    for (let waited = 0; serversIn(dir).length > 0 && waited < 5000; waited += 50) await sleep(50);
    expect(serversIn(dir), "a redis-server outlived the rollback that restarted it").toEqual([]);

    owner.kill("SIGKILL");
    const again = await rollback(stateDir, "ntint");
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    assertNoJobLostInExport(exportOf(stateDir, "ntint"), QUEUE, PUSHED);
    expect(serversIn(dir)).toEqual([]);
  });
});
