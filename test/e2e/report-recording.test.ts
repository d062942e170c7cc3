import { execSync } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, runDrill } from "../helpers/cli.js";
import { freePort, startRedisServer } from "../helpers/redisServer.js";

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

describe("report --recording of a file past the longest string (~512 MiB: a sidecar recorded for weeks)", () => {
  it("is read line by line: its samples are reported, not 'cannot read …: Invalid string length' (exit 2)", async () => {
    const server = await startRedisServer();
    try {
      const stateDir = path.join(tmp, "state-huge");
      mkdirSync(stateDir);
      const file = path.join(tmp, "huge.jsonl");
      const fd = openSync(file, "w");
      const at = (k: number) => new Date(Date.now() - (10 - k) * 1000).toISOString();
      const sample = (k: number) => `${JSON.stringify({ ts: at(k), psi_mem_some_avg10: k === 2 ? 17.5 : 1, alarm: [], missing: [] })}\n`;
      writeSync(fd, sample(1));
      // 576 lines of 1 MiB carry the size (576 MiB), each a hole ended by a newline: a sparse file, so
      // the test writes ~2 MiB to disk, not 576 MiB (NUL lines are not samples: skipped with a note).
      const first = Buffer.byteLength(sample(1));
      const mib = 1024 * 1024;
      for (let k = 1; k <= 576; k++) writeSync(fd, "\n", first + k * mib - 1);
      writeSync(fd, sample(2), first + 576 * mib);
      closeSync(fd);
      const r = await runDrill(["--state-dir", stateDir, "--redis", server.url, "--json", "report", "--recording", file], { timeout: 120_000 });
      expect(r.exitCode, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout) as { pressure: { samples: number; peak_psi_mem_some_avg10: { value: number | null } } };
      expect(doc.pressure.samples).toBe(2);
      expect(doc.pressure.peak_psi_mem_some_avg10.value).toBe(17.5);
    } finally {
      await server.stop();
      rmSync(path.join(tmp, "huge.jsonl"), { force: true });
    }
  }, 180_000);
});
