import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, expect } from "vitest";
import { startEmbeddedRedis } from "../../src/drill/embeddedRedis.js";
import { stopRecordedProcess } from "../../src/drill/processes.js";
import { runDir, type DrillState } from "../../src/drill/state.js";
import { findByCwd } from "../../src/drill/strays.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { findOnPath } from "../../src/util/findOnPath.js";
import { writeFakeDrill } from "./fakeState.js";

/**
 * A drill whose embedded Redis is down with jobs in its AOF, and a PATH
 * without coreutils `timeout`: what report and rollback restart that Redis
 * on, with nothing but themselves to end it.
 */

const roots = new HostRoots();

export const redisServerOnPath = findOnPath("redis-server");

/** A PATH in `root` holding node and redis-server only (no coreutils `timeout`). */
export function pathWithoutTimeout(root: string): string {
  const bin = path.join(root, "bin");
  mkdirSync(bin);
  symlinkSync(process.execPath, path.join(bin, "node"));
  symlinkSync(redisServerOnPath!, path.join(bin, "redis-server"));
  return bin;
}

/** redis-servers running in `dir` (it rewrites its title: found by its cwd, as rollback finds it). */
export const serversIn = (dir: string): number[] => findByCwd(roots, dir).filter((p) => p.comm.startsWith("redis-server")).map((p) => p.pid);

/**
 * A drill in `<root>/<name>` whose embedded Redis (as up makes it) holds `ids` on `queue` in its AOF and is down;
 * `owner`: its up's pid and start time.
 */
export async function downEmbeddedDrill(root: string, name: string, queue: string, ids: string[], owner?: { pid: number; startTime: number }): Promise<{ stateDir: string; dir: string; state: DrillState }> {
  const stateDir = path.join(root, name);
  const dir = path.join(runDir(stateDir, name, `${name}-r1`), "redis");
  const server = await startEmbeddedRedis({ dir });
  const redis = new Redis(server.url);
  await redis.rpush(queue, ...ids.map((id) => JSON.stringify({ id, prompt_tokens: 1000, completion_tokens: 8, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" })));
  redis.disconnect();
  const stat = readProcessStat(roots, server.pid);
  expect(await stopRecordedProcess(roots, { pid: server.pid, startTime: stat.ok ? stat.value.startTime : null })).toBe("stopped");
  const state = writeFakeDrill(stateDir, name, queue, server.url, { redis: { url: server.url, embedded: { dir, port: server.port } }, ...(owner ? { owner } : {}) });
  return { stateDir, dir, state };
}

/**
 * A test file's drills of that kind (in a describe): `down` makes one holding
 * `ids` on `queue`; `bare` is the PATH without `timeout`; `started` children
 * are SIGKILLed after each test (one a failed assertion left running would
 * write into the dir removed after all); a Redis a test that failed half-way
 * left running with nothing to end it is SIGKILLed after all.
 */
export function downDrillsWithoutTimeout(prefix: string, queue: string, ids: string[]) {
  const redisDirs: string[] = [];
  const fixture = {
    root: "",
    bare: "",
    started: [] as Array<Pick<ChildProcess, "kill">>,
    async down(name: string, owner?: { pid: number; startTime: number }) {
      const down = await downEmbeddedDrill(fixture.root, name, queue, ids, owner);
      redisDirs.push(down.dir);
      return down;
    },
  };
  beforeAll(() => {
    fixture.root = mkdtempSync(path.join(tmpdir(), prefix));
    fixture.bare = pathWithoutTimeout(fixture.root);
  });
  afterEach(() => {
    for (const child of fixture.started.splice(0)) child.kill("SIGKILL");
  });
  afterAll(() => {
    for (const pid of redisDirs.flatMap(serversIn)) process.kill(pid, "SIGKILL");
    rmSync(fixture.root, { recursive: true, force: true });
  });
  return fixture;
}
