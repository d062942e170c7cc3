import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: after a kill -9 of up, report said "ended: up_gone"; after the rollback
// it said "ended: rolled_back — a rollback took the drill over", blaming the
// rollback for a stop that happened before it, and the kill was gone from the note.

let server: RedisServer;
let root: string;
beforeAll(async () => {
  server = await startRedisServer();
  root = mkdtempSync(path.join(tmpdir(), "drill-up-gone-"));
}, 60_000);
afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe("rollback of a drill whose up was killed (built binary, own redis-server)", () => {
  it("records that up was gone before it came; the report says so after the rollback too", async () => {
    const stateDir = path.join(root, "state");
    const createdAt = new Date(Date.now() - 20_000).toISOString();
    // A running drill whose up (a pid that is not alive: start time 1) left no end.
    writeFakeDrill(stateDir, "gone", "ug", server.url, { createdAt, scheduleStartedAt: createdAt, phase: "running" });
    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "gone"], { timeout: 60_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(readState(stateDir, "gone")?.ended).toMatchObject({ verdict: "up_gone", pushed: null, notPacked: null });
    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "gone"], { timeout: 60_000 });
    expect(report.exitCode, report.stderr).toBe(0);
    expect(report.stdout).toMatch(/ended: up_gone — drill up \(pid 999999999\) found gone by the rollback, with no end recorded .* s into the drill; what up packed n\/a \(up did not count them\); rolled back at /);
    expect(report.stdout).not.toMatch(/ended: rolled_back/);
  });
});
