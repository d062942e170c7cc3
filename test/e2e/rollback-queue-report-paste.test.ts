// QA "paste every command drill prints": the report a queue's rollback prints for the incident
// notes (`report --queue Q --format md`), pasted into bash as printed: on a state dir the shell
// would split or expand, with --redis typed (named again) and with DRILL_REDIS_URL (left to it),
// it reports that queue's rollback. Queue names are [A-Za-z0-9_.-] (validateQueueName): none needs
// quoting; the builder's quoting of one that would is test/unit/pasted-hints (7).
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { pastedArgv, runPasted } from "../helpers/pasted.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let root: string;
let stateDir: string;
beforeAll(async () => {
  server = await startRedisServer();
  root = mkdtempSync(path.join(tmpdir(), "drill-queue-report-paste-"));
  stateDir = path.join(root, "s$X y");
  mkdirSync(stateDir);
}, 60_000);
afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** The command under "For the incident notes:". */
function reportCommand(stdout: string): string {
  const lines = stdout.split("\n");
  const i = lines.indexOf("For the incident notes:");
  expect(i, stdout).toBeGreaterThan(0);
  return lines[i + 1]!.trim();
}

describe("rollback --queue's report command, pasted as printed (built binary, own redis-server)", () => {
  it("--redis typed: named in it, and it reports the queue's rollback", async () => {
    const run = (args: string[]) => runDrill(["--state-dir", stateDir, "--redis", server.url, ...args], { timeout: 30_000 });
    expect((await run(["pack", "--queue", "rq1", "--jobs", "2"])).exitCode).toBe(0);
    const rollback = await run(["rollback", "--queue", "rq1"]);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const command = reportCommand(rollback.stdout);
    expect(pastedArgv(command)).toEqual(["drill", "--state-dir", stateDir, "--redis", server.url, "report", "--queue", "rq1", "--format", "md"]);
    const report = await runPasted(command);
    expect(report.exitCode, report.stdout + report.stderr).toBe(0);
    expect(report.stdout).toMatch(/\| reject_all \| unset \| [0-9.]+ \| rollback --queue's deny-all \|/);
  });

  it("DRILL_REDIS_URL: left to it, and pasted in that shell it reports the queue's rollback", async () => {
    const env = { DRILL_REDIS_URL: server.url };
    const run = (args: string[]) => runDrill(["--state-dir", stateDir, ...args], { timeout: 30_000, env });
    expect((await run(["pack", "--queue", "rq2", "--jobs", "2"])).exitCode).toBe(0);
    const rollback = await run(["rollback", "--queue", "rq2"]);
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const command = reportCommand(rollback.stdout);
    expect(pastedArgv(command)).toEqual(["drill", "--state-dir", stateDir, "report", "--queue", "rq2", "--format", "md"]);
    const report = await runPasted(command, env);
    expect(report.exitCode, report.stdout + report.stderr).toBe(0);
    expect(report.stdout).toMatch(/\| reject_all \| unset \| [0-9.]+ \| rollback --queue's deny-all \|/);
  });
});
