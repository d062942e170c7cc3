import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cgroupDirsLeft, realDrillSkipReason, realWorkerCgroup } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/** A cgroup per up: the first, killed, holds its own until afterAll's rollback. */
const CGROUPS = { fg: "pwnotefg", bg: "pwnotebg" } as const;
const NOTE = "(the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL)";
const skip = realDrillSkipReason();
if (skip) console.warn(`skipping up's deny-all lines with a masked password: ${skip}`);

/**
 * up's deny-all command names the --redis URL with its password masked: `***`
 * does not paste, so the line says how to run it, as every other command's
 * does. (A server with no password takes one given all the same: ioredis only
 * warns.) Each up is rolled back after.
 */
describe.skipIf(skip !== null)("up's deny-all by hand, --redis with a password", () => {
  let root: string;
  let server: RedisServer;
  let url: string;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-pwnote-"));
    mkdirSync(path.join(root, "files"));
    writeFileSync(path.join(root, "pwnote.yaml"), tinyDrill("pwnote", { duration: "6s", phases: [["0s", pack(1)]] }));
    server = await startRedisServer();
    url = `redis://:pwnote-secret@127.0.0.1:${server.port}`;
  });
  afterAll(async () => {
    for (const state of ["fg", "bg"]) await runDrill(["--state-dir", path.join(root, state), "rollback"], { timeout: 90_000 });
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
    expect(Object.values(CGROUPS).flatMap((name) => cgroupDirsLeft(realWorkerCgroup(name)))).toEqual([]);
  });

  const up = (state: keyof typeof CGROUPS, extra: string[], crashAt?: string) =>
    runDrill(["--state-dir", path.join(root, state), "--redis", url, "up", "--drill", path.join(root, "pwnote.yaml"), "--parent", "self", "--name", CGROUPS[state], "--file-dir", path.join(root, "files"), ...extra], {
      timeout: 120_000,
      env: crashAt === undefined ? {} : { DRILL_CRASH_AT: crashAt },
    });

  it("foreground: the mid-run line is followed by the note (killed once it has claimed its cgroup)", async () => {
    const r = await up("fg", [], "cgroup");
    const line = r.stdout.split("\n").find((l) => l.startsWith("redis: deny-all by hand: "));
    expect(line, r.stdout + r.stderr).toMatch(/^redis: deny-all by hand: drill --redis 'redis:\/\/:\*\*\*@127\.0\.0\.1:\d+' gate mode reject_all \(.*while the drill is up\) /);
    expect(line!.endsWith(` ${NOTE}`)).toBe(true);
    expect(r.stdout + r.stderr).not.toContain("pwnote-secret");
  });

  it("--detach: its redis line is followed by the note", async () => {
    const r = await up("bg", ["--detach"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    const line = r.stdout.split("\n").find((l) => l.startsWith("redis: given at "));
    expect(line, r.stdout).toBe(`redis: given at redis://:***@127.0.0.1:${server.port}, queue jobs; deny-all by hand: \`drill --redis 'redis://:***@127.0.0.1:${server.port}' gate mode reject_all\` ${NOTE}`);
    expect(r.stdout + r.stderr).not.toContain("pwnote-secret");
  }, 150_000);
});
