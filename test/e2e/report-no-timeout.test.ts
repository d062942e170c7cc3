import { readdirSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { execa } from "execa";
import { Redis } from "ioredis";
import { describe, expect, it } from "vitest";
import { drillBin, runDrill } from "../helpers/cli.js";
import { downDrillsWithoutTimeout, redisServerOnPath, serversIn } from "../helpers/downEmbeddedRedis.js";
import { assertNoJobLostInExport } from "../helpers/invariants.js";

/**
 * `drill report` restarts a stopped embedded Redis on its AOF to read it. QA:
 * without coreutils `timeout` on PATH (which bounded that server's life) it
 * failed to, where rollback restarts it bare and stops it itself. Now report
 * does the same (startEmbeddedRedis's callerStops): it stops the server at its
 * end and when a signal stops it; SIGKILLed, it leaves the server on the port
 * state.json records, where the next rollback drains, exports and stops it.
 */

const QUEUE = "rntjobs";
const PUSHED = ["1", "2", "3"];
if (redisServerOnPath === null) console.warn("skipping report without `timeout`: no redis-server on PATH (apt-get install redis-server)");

describe.skipIf(redisServerOnPath === null)("report with no `timeout` on PATH (an embedded Redis down, its jobs in its AOF)", () => {
  const drills = downDrillsWithoutTimeout("drill-report-no-timeout-", QUEUE, PUSHED);
  const downDrill = (name: string) => drills.down(name);

  /** `drill report` on a PATH without `timeout`, stopped by `signal` as soon as the server it restarts runs. */
  async function reportStoppedAfterRestart(stateDir: string, name: string, dir: string, signal: NodeJS.Signals) {
    const child = execa("node", [drillBin, "--state-dir", stateDir, "report", "--name", name], { env: { NO_COLOR: "1", PATH: drills.bare }, reject: false, timeout: 60_000 });
    drills.started.push(child);
    for (let i = 0; i < 2000 && serversIn(dir).length === 0 && child.exitCode === null; i++) await sleep(5);
    expect(serversIn(dir), "the report restarted no redis-server").toHaveLength(1);
    child.kill(signal);
    return child;
  }

  it("restarts it bare, reads every job from its AOF, stops it: exit 0", async () => {
    const { stateDir, dir } = await downDrill("rnt");
    const r = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", "rnt"], { env: { PATH: drills.bare } });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { source: { kind: string }; drain: { queue_len: number | null } };
    expect(doc.source.kind).toBe("aof");
    expect(doc.drain.queue_len).toBe(PUSHED.length);
    expect(serversIn(dir), "a redis-server left running").toEqual([]);
  });

  it("stopped by SIGTERM after the restart: stops that Redis too (nothing else ends it)", async () => {
    const { stateDir, dir } = await downDrill("rntterm");
    const r = await reportStoppedAfterRestart(stateDir, "rntterm", dir, "SIGTERM");
    expect(r.exitCode, String(r.stdout) + String(r.stderr)).toBe(143);
    expect(String(r.stderr)).toContain("drill: report interrupted by SIGTERM: the redis-server it restarted on the drill's AOF is stopped");
    expect(serversIn(dir), "a redis-server outlived the report that restarted it").toEqual([]);
  });

  it("SIGKILLed after the restart: the Redis it leaves is on the port state.json records, and the next rollback drains, exports and stops it", async () => {
    const { stateDir, dir, state } = await downDrill("rntkill");
    const killed = await reportStoppedAfterRestart(stateDir, "rntkill", dir, "SIGKILL");
    expect(killed.signal).toBe("SIGKILL");
    // Still loading its AOF, maybe, when the report died: it answers there once it has.
    const redis = new Redis(state.redis.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    redis.on("error", () => {});
    let answered = false;
    for (let i = 0; i < 100 && !answered; i++) {
      answered = await redis.connect().then(() => redis.ping().then((p) => p === "PONG"), () => false);
      if (!answered) {
        redis.disconnect();
        await sleep(50);
      }
    }
    redis.disconnect();
    expect(answered, `nothing answers at ${state.redis.url}`).toBe(true);

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "rntkill"], { env: { PATH: drills.bare } });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    const file = readdirSync(path.join(stateDir, "rntkill")).find((f) => f.startsWith("final-"))!;
    assertNoJobLostInExport(path.join(stateDir, "rntkill", file), QUEUE, PUSHED);
    expect(serversIn(dir)).toEqual([]);
  });
});
