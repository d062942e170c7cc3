import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { drillCommandAt, resolveGlobalOptions } from "../../src/context.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { gatherReport } from "../../src/report/gather.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/**
 * Which Redis a report reads, and what the commands drill prints carry: a
 * typed --redis is the operator's override; DRILL_REDIS_URL, exported for
 * the commands run by hand, never takes a drill's report off the Redis its
 * state records (QA: `drill report --name X`, as printed, read the exported
 * Redis), and a printed command leaves it to the variable rather than turn
 * it into a typed --redis (a rollback rerun took it as where the Redis moved).
 */
let server: RedisServer;
let stateDir: string;
beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(() => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-source-"));
  writeFakeDrill(stateDir, "own", "oq", server.url);
});
afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

/** Another database of the same server: another Redis to the report, and one that answers. */
const other = (): string => `${server.url}/3`;
const gather = (redisUrl: string | undefined, redisTyped: boolean, name?: string) => gatherReport({ stateDir, name, queue: undefined, redisUrl, redisTyped, sinceMs: 600_000 });

describe("report: --redis over DRILL_REDIS_URL over the drill's recorded Redis", () => {
  it("--name with DRILL_REDIS_URL naming another Redis: the drill's own is read, and the variable said passed over", async () => {
    const { inputs } = await gather(other(), false, "own");
    expect(inputs.source).toEqual({ kind: "live", url: server.url });
    expect(inputs.gatherNotes.join("\n")).toContain(`DRILL_REDIS_URL ${other()} is not drill own's Redis: read the drill's own (${server.url}, in its state.json); give --redis to read another`);
  });

  it("the only drill there, DRILL_REDIS_URL naming another Redis: that drill, on its own Redis (not the variable's queue alone)", async () => {
    const { inputs } = await gather(other(), false);
    expect(inputs.drill?.name).toBe("own");
    expect(inputs.source).toEqual({ kind: "live", url: server.url });
  });

  it("a typed --redis is the operator's override: read as asked", async () => {
    const { inputs } = await gather(other(), true, "own");
    expect(inputs.source).toEqual({ kind: "live", url: other() });
  });
});

describe("report: several drills", () => {
  it("the --name hint is the report as pasted (reportAgain): on the report's tree too", async () => {
    writeFakeDrill(stateDir, "two", "tq", server.url);
    const roots = new HostRoots("/t/proc", "/t/sys");
    const err = await gatherReport({ stateDir, name: undefined, queue: undefined, redisUrl: undefined, sinceMs: 600_000, roots }).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toContain(`pick one with --name (drill --state-dir ${stateDir} --sysfs /t/sys --procfs /t/proc report --name `);
  });
});

describe("printed commands: --redis only as typed", () => {
  it("DRILL_REDIS_URL is left to the variable; a typed --redis is printed, its password masked", () => {
    const fromEnv = resolveGlobalOptions({ stateDir }, { DRILL_REDIS_URL: "redis://:secret@h:6379" });
    expect(drillCommandAt(fromEnv)).toBe(`drill --state-dir ${stateDir}`);
    const typed = resolveGlobalOptions({ stateDir, redis: "redis://:secret@h:6379" }, {});
    expect(drillCommandAt(typed)).toBe(`drill --state-dir ${stateDir} --redis 'redis://:***@h:6379'`);
  });
});
