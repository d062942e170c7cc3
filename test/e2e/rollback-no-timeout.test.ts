import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startEmbeddedRedis } from "../../src/drill/embeddedRedis.js";
import { stopRecordedProcess } from "../../src/drill/processes.js";
import { readState, runDir } from "../../src/drill/state.js";
import { findByCwd } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { findOnPath } from "../../src/util/findOnPath.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { drillBin, runDrill } from "../helpers/cli.js";
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
const redisServer = findOnPath("redis-server");
if (redisServer === null) console.warn("skipping rollback without `timeout`: no redis-server on PATH (apt-get install redis-server)");
/** redis-servers running in `dir` (it rewrites its title: found by its cwd, as rollback finds it). */
const serversIn = (dir: string): number[] => findByCwd(roots, dir).filter((p) => p.comm.startsWith("redis-server")).map((p) => p.pid);

describe.skipIf(redisServer === null)("rollback with no `timeout` on PATH (an embedded Redis down, its jobs in its AOF)", () => {
  let root: string;
  /** A PATH holding node and redis-server only. */
  let bare: string;
  /** Processes a test starts (a fake up, a rollback): killed after it. */
  const started: Array<Pick<ChildProcess, "kill">> = [];
  const redisDirs: string[] = [];
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-no-timeout-"));
    bare = path.join(root, "bin");
    mkdirSync(bare);
    symlinkSync(process.execPath, path.join(bare, "node"));
    symlinkSync(redisServer!, path.join(bare, "redis-server"));
  });
  afterEach(() => {
    // Also a rollback left running by a failed assertion: it would write into the dir afterAll removes.
    for (const child of started.splice(0)) child.kill("SIGKILL");
  });
  afterAll(() => {
    // A test that failed half-way may leave a rollback's Redis with nothing to end it.
    for (const pid of redisDirs.flatMap(serversIn)) process.kill(pid, "SIGKILL");
    rmSync(root, { recursive: true, force: true });
  });

  /** A drill whose embedded Redis (as up makes it) holds PUSHED in its AOF and is down; `owner`: its up's pid and start time. */
  async function downDrill(name: string, owner?: { pid: number; startTime: number }) {
    const stateDir = path.join(root, name);
    const dir = path.join(runDir(stateDir, name, `${name}-r1`), "redis");
    redisDirs.push(dir);
    const server = await startEmbeddedRedis({ dir });
    const redis = new Redis(server.url);
    await redis.rpush(QUEUE, ...PUSHED.map((id) => JSON.stringify({ id, prompt_tokens: 1000, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" })));
    redis.disconnect();
    const stat = readProcessStat(roots, server.pid);
    expect(await stopRecordedProcess(roots, { pid: server.pid, startTime: stat.ok ? stat.value.startTime : null })).toBe("stopped");
    writeFakeDrill(stateDir, name, QUEUE, server.url, { redis: { url: server.url, embedded: { dir, port: server.port } }, ...(owner ? { owner } : {}) });
    return { stateDir, dir };
  }

  const rollback = (stateDir: string, name: string) => runDrill(["--state-dir", stateDir, "rollback", "--name", name], { env: { PATH: bare } });
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
    started.push(owner);
    await sleep(200);
    const stat = readProcessStat(roots, owner.pid!);
    expect(stat.ok).toBe(true);
    const { stateDir, dir } = await downDrill("ntint", { pid: owner.pid!, startTime: stat.ok ? stat.value.startTime : 0 });

    const child = execa("node", [drillBin, "--state-dir", stateDir, "rollback", "--name", "ntint"], { env: { FORCE_COLOR: "0", PATH: bare }, reject: false, timeout: 60_000 });
    started.push(child);
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
