import { execSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";

/**
 * QA 37: `report --recording` on a file that is no regular file. A FIFO with
 * no writer (`mkfifo`, or a `<(...)` whose writer has not started) blocked
 * the whole process in a synchronous read: Ctrl-C and SIGTERM did nothing,
 * and only SIGKILL ended it.
 */

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-report-recording-"));
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe("report --recording on a FIFO nobody writes", () => {
  for (const [signal, code] of [["SIGTERM", 143], ["SIGINT", 130]] as const) {
    it(`is stopped by ${signal} (exit ${code}), not stuck in its read`, async () => {
      const stateDir = path.join(tmp, `state-${signal}`);
      mkdirSync(stateDir);
      const fifo = path.join(tmp, `watch-${signal}.jsonl`);
      execSync(`mkfifo ${fifo}`);
      // Nothing listens there: the recording is read before any Redis is, and nothing here reaches one.
      const url = `redis://127.0.0.1:${await freePort()}`;
      const child = execa("node", [drillBin, "--state-dir", stateDir, "--redis", url, "report", "--recording", fifo], { env: { NO_COLOR: "1" }, reject: false, timeout: 30_000 });
      // Past start-up, into the read.
      await sleep(2500);
      child.kill(signal);
      const started = Date.now();
      const r = await child;
      expect(r.timedOut, "still running 30 s later: the signal did not stop it").toBe(false);
      expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(code);
      expect(Date.now() - started).toBeLessThan(5000);
      expect(String(r.stderr)).toContain(`drill: report interrupted by ${signal}`);
    });
  }

  it("a pipe with a writer (`--recording <(zcat watch.jsonl.gz)`) is still read", async () => {
    const stateDir = path.join(tmp, "state-writer");
    mkdirSync(stateDir);
    const fifo = path.join(tmp, "watch-writer.jsonl");
    execSync(`mkfifo ${fifo}`);
    const sample = JSON.stringify({ ts: new Date().toISOString(), psi_mem_some_avg10: 12.4, alarm: [], missing: [] });
    const url = `redis://127.0.0.1:${await freePort()}`;
    const child = execa("node", [drillBin, "--state-dir", stateDir, "--redis", url, "report", "--recording", fifo], { env: { NO_COLOR: "1" }, reject: false, timeout: 30_000 });
    await sleep(500);
    writeFileSync(fifo, `${sample}\n`);
    const r = await child;
    // Past the recording: the Redis given does not answer (exit 1), so the read finished.
    expect(r.timedOut).toBe(false);
    expect(String(r.stderr)).not.toContain("--recording");
  });
});
