import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { isSameProcess } from "../../src/host/process.js";
import { DrillQueue } from "../../src/queue/queue.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, repoRoot, runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLost, assertNoJobLostInExport } from "../helpers/invariants.js";
import { startRedisServer } from "../helpers/redisServer.js";
import { pack, tinyDrill } from "../helpers/drills.js";

// The export is made to fail with a file size limit (RLIMIT_FSIZE binds root too).
const noPrlimit = spawnSync("prlimit", ["--version"]).error !== undefined;
const skip = realDrillSkipReason() ?? (noPrlimit ? "prlimit not on PATH (util-linux)" : null);
if (skip) console.warn(`skipping rollback export-failure test: ${skip}`);

const CGROUP = "exportcg";
// 1s, the shortest drill: up ends before anything else here, and its jobs are pushed at 0s (3s added 2 s and tested nothing more).
const TINY = tinyDrill("tiny", { duration: "1s", phases: [["0s", pack(3)]] });

/**
 * RLIMIT_FSIZE for the rollback alone: a write past it fails with EFBIG, for
 * root too (node ignores SIGXFSZ). Above state.json (a few KB), well below
 * the export of LATE_JOBS jobs; the embedded Redis was started by `up`, so
 * its AOF is not limited.
 */
const FSIZE_LIMIT = 16 * 1024;
const LATE_JOBS = 300;

describe.skipIf(skip !== null)("rollback when the export of the drain fails (RELIABILITY: no job lost, host clean)", () => {
  let root: string;
  let drillFile: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-export-"));
    drillFile = path.join(root, "tiny.yaml");
    writeFileSync(drillFile, TINY);
  });
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("export fails (EFBIG): exit 4 naming it, the embedded Redis keeps the drain, not complete; the next rollback exports every job and stops it", async () => {
    const stateDir = mkdtempSync(path.join(root, "state-"));
    const rollback = () => runDrill(["--state-dir", stateDir, "rollback"]);
    const started = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP]);
    expect(started.exitCode, started.stderr).toBe(0);
    const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    const before = readState(stateDir, "tiny") as DrillState;
    const server = before.processes.find((p) => p.role === "redis")!;
    const roots = new HostRoots();
    const client = new Redis(before.redis.url, { maxRetriesPerRequest: 0 });
    try {
      // The gate ends its --duration (as it does at duration + 5 min, now); producers
      // keep pushing: what waits is the drain rollback moves and must export.
      const gate = before.processes.find((p) => p.role === "gate")!;
      process.kill(gate.pid!, "SIGTERM");
      await waitFor(() => !isSameProcess(roots, gate.pid!, gate.startTime!), 10_000);
      const queue = new DrillQueue(client, "jobs");
      const late: string[] = [];
      for (let i = 0; i < LATE_JOBS; i++) {
        late.push((await queue.push({ promptTokens: 1000, completionTokens: 8, files: 1, deadlineMs: 8000, hostClass: "shared-free" })).id);
      }
      const all = [...pushed, ...late];

      // 1. The export cannot be written: the rollback is not done.
      const limited = await execa("prlimit", [`--fsize=${FSIZE_LIMIT}`, "--", "node", drillBin, "--state-dir", stateDir, "rollback"], {
        reject: false,
        timeout: 60_000,
        env: { FORCE_COLOR: "0", NO_COLOR: "1" },
      });
      const out = `${String(limited.stdout)}\n${String(limited.stderr)}`;
      expect(limited.exitCode, out).toBe(4);
      expect(limited.stderr).toMatch(/export to \S+final-\S+\.jsonl failed \(EFBIG[^)]*\); the embedded Redis keeps running with the drain/);
      expect(limited.stdout).toMatch(/FAIL stop embedded redis: kept running: the export failed/);
      expect(isSameProcess(roots, server.pid!, server.startTime!), "the embedded redis-server was stopped with its drain unexported").toBe(true);
      expect(await client.ping()).toBe("PONG");
      expect(await client.llen("jobs")).toBe(0);
      expect(await client.llen("jobs_drain")).toBeGreaterThanOrEqual(LATE_JOBS);
      await assertNoJobLost(client, "jobs", all);
      const failed = readState(stateDir, "tiny") as DrillState;
      expect(failed.phase).toBe("rolling_back");
      expect(failed.completedAt).toBeUndefined();
      expect(failed.rollback?.exported).toBeUndefined();
      expect(failed.rollback?.left.join("\n")).toMatch(/export to .* failed/);
      // Host side done all the same: cgroup removed.
      expect(cgroupDirsLeft(realWorkerCgroup(CGROUP))).toEqual([]);
      // No truncated export under the name of a finished one (report reads the newest), nor a partial one.
      expect(exportsIn(stateDir)).toEqual([]);
      client.disconnect();

      // 2. The limit is gone: the next rollback exports every job, then stops Redis.
      const second = await rollback();
      expect(second.exitCode, second.stdout + second.stderr).toBe(0);
      const done = readState(stateDir, "tiny") as DrillState;
      expect(done.phase).toBe("complete");
      const exported = done.rollback?.exported;
      expect(exported).toMatch(/final-.*\.jsonl$/);
      assertNoJobLostInExport(exported!, "jobs", all);
      expect(exportsIn(stateDir)).toEqual([path.basename(exported!)]);
      assertHostClean(stateDir, "tiny", before);
      const third = await rollback();
      expect(third.exitCode, third.stdout + third.stderr).toBe(0);
    } finally {
      client.disconnect();
      // A failed assertion above must not leave the drill's Redis, processes or cgroup.
      if (readState(stateDir, "tiny")?.phase !== "complete") await rollback();
    }
  }, 120_000);
});

const noRedisServer = spawnSync("redis-server", ["--version"]).error !== undefined;
const exportSkip = noRedisServer ? "redis-server not on PATH (apt-get install redis-server)" : noPrlimit ? "prlimit not on PATH (util-linux)" : null;
if (exportSkip) console.warn(`skipping exportKeys under a file size limit: ${exportSkip}`);

describe.skipIf(exportSkip !== null)("exportKeys under a file size limit (the built dist/, in a child: RLIMIT_FSIZE is per process)", () => {
  /** exportKeys of queue `q` on `url` to `file`, in a node whose file size limit is `limit` bytes (null: none). */
  const exportIn = (url: string, file: string, limit: number | null) => {
    const script = `
      import { exportKeys } from ${JSON.stringify(pathToFileURL(path.join(repoRoot, "dist/drill/drain.js")).href)};
      import { queueKeys } from ${JSON.stringify(pathToFileURL(path.join(repoRoot, "dist/queue/keys.js")).href)};
      import { Redis } from "ioredis";
      const redis = new Redis(process.argv[1]);
      try {
        console.log(JSON.stringify(await exportKeys(redis, queueKeys("q"), process.argv[2])));
      } catch (err) {
        console.error(String(err));
        process.exitCode = 1;
      } finally {
        redis.disconnect();
      }`;
    const node = ["--input-type=module", "-e", script, url, file];
    const options = { reject: false, timeout: 30_000, cwd: repoRoot } as const;
    return limit === null ? execa("node", node, options) : execa("prlimit", [`--fsize=${limit}`, "--", "node", ...node], options);
  };

  it("a write cut short at the limit fails the export: no file that looks whole and is not", async () => {
    const server = await startRedisServer();
    const dir = mkdtempSync(path.join(tmpdir(), "drill-export-fsize-"));
    const client = new Redis(server.url, { maxRetriesPerRequest: 0 });
    try {
      const payloads = Array.from({ length: 50 }, (_, i) => JSON.stringify({ id: String(i + 1), prompt_tokens: 1000, completion_tokens: 8 }));
      await client.rpush("q_drain", ...payloads);
      // The drain is the only key: the export is this one line.
      const line = `${JSON.stringify({ key: "q_drain", type: "list", ttl_ms: null, value: payloads.map((p) => ({ utf8: p })) })}\n`;
      const whole = path.join(dir, "final-whole.jsonl");
      const unlimited = await exportIn(server.url, whole, null);
      expect(unlimited.exitCode, String(unlimited.stderr)).toBe(0);
      expect(readFileSync(whole, "utf8")).toBe(line);

      // The limit falls inside that last line: one write, cut short, no error from it.
      const file = path.join(dir, "final-cut.jsonl");
      const cut = await exportIn(server.url, file, Buffer.byteLength(line) - 100);
      expect(cut.exitCode, `exported: ${String(cut.stdout)}`).toBe(1);
      expect(String(cut.stderr)).toMatch(/EFBIG/);
      expect(existsSync(file), "a truncated export under the final name").toBe(false);
      expect(existsSync(`${file}.partial`)).toBe(false);
    } finally {
      client.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function exportsIn(stateDir: string): string[] {
  return readdirSync(path.join(stateDir, "tiny")).filter((f) => f.startsWith("final-"));
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 100));
  }
}
