import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState, type DrillState } from "../../src/drill/state.js";
import type { DrillRollback } from "../../src/drill/rollback.js";
import type { SnakeCased } from "../../src/output.js";
import type { ReportDocument } from "../../src/report/render.js";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { drillBin, runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLost, assertNoJobLostInExport } from "../helpers/invariants.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const noPrlimit = spawnSync("prlimit", ["--version"]).error !== undefined;
const skip = realDrillSkipReason() ?? (noPrlimit ? "prlimit not on PATH (util-linux)" : null);
if (skip) console.warn(`skipping rollback with a given --redis: ${skip}`);

const CGROUP = "rbgiven";
const NAME = "rbgiven";
// 1s, the shortest drill: its three jobs are pushed at 0s, and up follows the gate until it decided them all
// before it ends (the run's end, the report's window, comes after); 3s added 2 s an up and tested nothing more.
const DRILL = tinyDrill(NAME, { duration: "1s", gate: "{ interval: 500ms }", phases: [["0s", pack(3, 20000)]] });

/**
 * QA: with a Redis the operator gave `up` (not the embedded one), rollback
 * exported nothing: once the operator deleted the queue's keys (as up's
 * "queue in use" refusal tells them to), the incident figures were gone.
 * Rollback exports every key of the drill with a given Redis too, leaves
 * that Redis running, and report reads the export when the keys are gone.
 */
describe.skipIf(skip !== null)("rollback with a given --redis exports the drill's keys (real cgroup, real redis-server)", () => {
  let root: string;
  let stateDir: string;
  let drillFile: string;
  let server: RedisServer;
  let client: Redis;
  const drill = (args: string[], timeout = 90_000) => runDrill(["--state-dir", stateDir, ...args], { timeout });
  // A queue of its own per case: up refuses a queue that holds an earlier run's keys.
  const up = (queue: string) =>
    drill(["--json", "--redis", server.url, "up", "--drill", drillFile, "--parent", "self", "--name", CGROUP, "--queue", queue, "--file-dir", root], 120_000);
  const exportsIn = () => readdirSync(path.join(stateDir, NAME)).filter((f) => f.startsWith("final-")).sort();

  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-rb-given-"));
    drillFile = path.join(root, `${NAME}.yaml`);
    writeFileSync(drillFile, DRILL);
    server = await startRedisServer();
    client = new Redis(server.url, { maxRetriesPerRequest: 0 });
  });
  afterAll(async () => {
    if (stateDir && readState(stateDir, NAME)?.phase !== "complete") await drill(["rollback"]);
    client?.disconnect();
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
    const left = cgroupDirsLeft(realWorkerCgroup(CGROUP));
    expect(left, `left behind: ${left.join(", ")}`).toEqual([]);
  });

  it("rollback exports every key to final-*.jsonl and leaves the given Redis running; report reads the export once the keys are deleted", async () => {
    const QUEUE = "givenq";
    stateDir = mkdtempSync(path.join(root, "state-"));
    const started = await up(QUEUE);
    expect(started.exitCode, started.stderr).toBe(0);
    const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    expect(pushed).toEqual(["1", "2", "3"]);
    const before = readState(stateDir, NAME) as DrillState;
    expect(before.redis.embedded).toBeNull();

    const rb = await drill(["--json", "rollback", "--name", NAME]);
    expect(rb.exitCode, rb.stdout + rb.stderr).toBe(0);
    const doc = JSON.parse(rb.stdout) as { drills: SnakeCased<DrillRollback>[]; left: string[] };
    const result = doc.drills[0]!;
    expect(doc.left).toEqual([]);
    expect(result.exported).toMatch(new RegExp(`^${path.join(stateDir, NAME)}/final-.*\\.jsonl$`));
    expect(exportsIn()).toEqual([path.basename(result.exported!)]);
    const steps = Object.fromEntries(result.steps.map((s) => [s.step, s]));
    expect(steps.export).toEqual({ step: "export", ok: true, detail: expect.stringMatching(new RegExp(`^\\d+ keys to ${result.exported}$`)) });
    expect(steps["stop embedded redis"]?.ok).toBe(true);
    expect(steps["stop embedded redis"]?.detail).toBe(`none (given Redis ${server.url}: not the drill's to stop; it keeps the drill's keys)`);
    expect(result.steps.map((s) => s.step).indexOf("export")).toBeGreaterThan(result.steps.map((s) => s.step).indexOf("re-drain"));
    expect(readState(stateDir, NAME)?.rollback?.exported).toBe(result.exported);

    // Both invariants: every job in the export and still in the given Redis, which keeps running; host clean.
    assertNoJobLostInExport(result.exported!, QUEUE, pushed);
    expect(await client.ping()).toBe("PONG");
    await assertNoJobLost(client, QUEUE, pushed);
    assertHostClean(stateDir, NAME, before);

    // A second rollback after a complete one: nothing to do, no second export.
    const again = await drill(["rollback", "--name", NAME]);
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toMatch(/already rolled back/);
    expect(exportsIn()).toEqual([path.basename(result.exported!)]);

    const live = await drill(["--json", "report", "--name", NAME]);
    expect(live.exitCode, live.stderr).toBe(0);
    const liveReport = JSON.parse(live.stdout) as ReportDocument;
    expect(liveReport.source.kind).toBe("live");

    // The operator removes the queue's keys, as up's "queue in use" refusal says to.
    const keys = [QUEUE, `${QUEUE}_drain`, ...(await client.keys(`${QUEUE}:*`))];
    await client.del(...keys);
    expect(await client.keys(`${QUEUE}*`)).toEqual([]);

    const fromExport = await drill(["--json", "report", "--name", NAME]);
    expect(fromExport.exitCode, fromExport.stderr).toBe(0);
    const report = JSON.parse(fromExport.stdout) as ReportDocument;
    expect(report.source).toEqual({ kind: "export", where: result.exported });
    expect(report.drill?.run_id).toBe(before.runId);
    expect(report.decisions?.total).toBe(3);
    expect(report.decisions).toEqual(liveReport.decisions);
    expect(report.notes.join("\n")).toContain(`holds no key of queue ${QUEUE} any more`);
    // The queue named as up's "queue in use" refusal names it (--redis, --queue, no --name): the same export.
    const byQueue = await drill(["--json", "--redis", server.url, "report", "--queue", QUEUE]);
    expect(byQueue.exitCode, byQueue.stderr).toBe(0);
    const byQueueReport = JSON.parse(byQueue.stdout) as ReportDocument;
    expect(byQueueReport.source).toEqual({ kind: "export", where: result.exported });
    expect(byQueueReport.decisions).toEqual(liveReport.decisions);
    const text = await drill(["report", "--name", NAME]);
    expect(text.exitCode, text.stderr).toBe(0);
    expect(text.stdout).toContain(result.exported!);
    expect(text.stdout).not.toMatch(/every figure in this report is empty/);
  }, 240_000);

  it("the export fails (EFBIG): exit 4 naming the given Redis that keeps every key; the next rollback exports them", async () => {
    const QUEUE = "givenfail";
    stateDir = mkdtempSync(path.join(root, "state-"));
    const started = await up(QUEUE);
    expect(started.exitCode, started.stderr).toBe(0);
    const pushed = (JSON.parse(started.stdout.trim().split("\n").pop()!) as { pushed_ids: string[] }).pushed_ids;
    const before = readState(stateDir, NAME) as DrillState;
    // A key of the drill bigger than the file size limit below (state.json, a few KB, fits).
    await client.set(`${QUEUE}:filler`, "x".repeat(64 * 1024));

    const limited = await execa("prlimit", ["--fsize=16384", "--", "node", drillBin, "--state-dir", stateDir, "rollback", "--name", NAME], {
      reject: false,
      timeout: 60_000,
      env: { FORCE_COLOR: "0", NO_COLOR: "1" },
    });
    const out = `${String(limited.stdout)}\n${String(limited.stderr)}`;
    expect(limited.exitCode, out).toBe(4);
    expect(limited.stdout).toMatch(/FAIL export: .*EFBIG/);
    expect(limited.stderr).toMatch(
      new RegExp(`export to \\S+final-\\S+\\.jsonl failed \\(EFBIG[^)]*\\); every key of queue ${QUEUE} is still in the given Redis ${server.url}, nothing deleted`),
    );
    expect(exportsIn(), "no truncated export, nor a partial one").toEqual([]);
    const failed = readState(stateDir, NAME) as DrillState;
    expect(failed.phase).toBe("rolling_back");
    expect(failed.rollback?.exported).toBeUndefined();
    expect(await client.exists(`${QUEUE}:filler`)).toBe(1);
    await assertNoJobLost(client, QUEUE, pushed);

    const second = await drill(["rollback", "--name", NAME]);
    expect(second.exitCode, second.stdout + second.stderr).toBe(0);
    const exported = readState(stateDir, NAME)?.rollback?.exported;
    expect(exported).toMatch(/final-.*\.jsonl$/);
    expect(existsSync(exported!)).toBe(true);
    expect(exportsIn()).toEqual([path.basename(exported!)]);
    assertNoJobLostInExport(exported!, QUEUE, pushed);
    assertHostClean(stateDir, NAME, before);
    await client.flushall();
  }, 240_000);
});
