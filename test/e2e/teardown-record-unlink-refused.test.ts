import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile, recordServedQueue, servedDir } from "../../src/cgroup/stateFiles.js";
import { immutableSkipReason, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = process.getuid?.() !== 0 ? "chattr +i needs root (not root)" : immutableSkipReason();
if (skip) console.warn(`skipping teardown records that cannot be unlinked: ${skip}`);

const chattr = (flag: "+i" | "-i", dir: string): void => {
  const r = spawnSync("chattr", [flag, dir], { encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
};

/**
 * QA: teardown removed its cgroup's marker and the records of the queues its
 * workers served with rmSync(force), which on a file it may not unlink (its
 * dir immutable: EPERM; read-only: EROFS) falls back to rmdir and throws
 * ENOTDIR: an `unexpected error` stack trace after the cgroup was gone, the
 * queues left open unsaid. Now the teardown says all it did, names each record
 * left with why, exits 4, and run again once it can be removed finishes it.
 * A fake --sysfs tree (the cgroup's files removed, as the kernel's go with its
 * rmdir), a real immutable state dir (chattr +i).
 */
describe.skipIf(skip !== null)("cgroup teardown: a record of the cgroup it cannot unlink", () => {
  let host: FakeHost;
  let server: RedisServer;
  let immutable: string | null = null;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server?.stop();
  });
  afterEach(() => {
    if (immutable !== null) spawnSync("chattr", ["-i", immutable]);
    immutable = null;
    host?.cleanup();
  });

  /** A drill cgroup on the fake tree, with nothing inside and no file the kernel would not take with it. */
  const fakeCgroup = (name: string): WorkerCgroup => {
    host = makeFakeHost("v2");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), name, { kind: "self" });
    setupWorkerCgroup(host.roots, cg, host.stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    for (const file of readdirSync(cg.limits.dir)) rmSync(path.join(cg.limits.dir, file));
    return cg;
  };
  const teardown = (name: string, json = false) =>
    runDrill(["--sysfs", host.sysfs, "--procfs", host.procfs, "--state-dir", host.stateDir, ...(json ? ["--json"] : []), "cgroup", "teardown", "--name", name, "--parent", "self"]);
  const freeze = (dir: string): void => {
    chattr("+i", dir);
    immutable = dir;
  };
  const thaw = (): void => {
    chattr("-i", immutable!);
    immutable = null;
  };

  it.each([[false], [true]])("its marker: the cgroup removed, the marker named (exit 4, no stack trace); run again, it finishes (--json %s)", async (json) => {
    const cg = fakeCgroup("mkimm");
    const marker = markerFile(host.stateDir, cg);
    freeze(path.dirname(marker));
    const r = await teardown("mkimm", json);
    thaw();
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stderr).toContain(`could not remove the cgroup's marker ${marker}: EPERM`);
    if (json) expect((JSON.parse(r.stdout) as { left: string[] }).left.join("\n")).toContain(`could not remove the cgroup's marker ${marker}: EPERM`);
    else expect(r.stdout).toContain(`removed ${cg.limits.dir}`);
    expect(existsSync(cg.limits.dir)).toBe(false);
    expect(existsSync(marker)).toBe(true);
    const again = await teardown("mkimm");
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(existsSync(marker)).toBe(false);
  });

  it("a served queue's record: the queue left open still said, the record named (exit 4); run again, it finishes", async () => {
    const cg = fakeCgroup("svimm");
    recordServedQueue(host.stateDir, cg, "svq", server.url);
    const [record] = readdirSync(servedDir(host.stateDir)).map((f) => path.join(servedDir(host.stateDir), f));
    const redis = new Redis(server.url);
    await redis.set("svq:mode", "admit").finally(() => redis.quit());
    freeze(servedDir(host.stateDir));
    const r = await teardown("svimm");
    thaw();
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain("queue svq on");
    expect(r.stderr).toContain(`could not remove the record of a queue its workers served ${record}: EPERM`);
    expect(existsSync(cg.limits.dir)).toBe(false);
    expect(existsSync(markerFile(host.stateDir, cg))).toBe(false);
    const again = await teardown("svimm");
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(existsSync(record!)).toBe(false);
  });

  it("a served queue's record of a cgroup already gone (nothing to tear down): named, exit 4", async () => {
    const cg = fakeCgroup("svgone");
    recordServedQueue(host.stateDir, cg, "svq2", server.url);
    rmSync(markerFile(host.stateDir, cg));
    rmSync(cg.limits.dir, { recursive: true });
    const [record] = readdirSync(servedDir(host.stateDir)).map((f) => path.join(servedDir(host.stateDir), f));
    freeze(servedDir(host.stateDir));
    const r = await teardown("svgone");
    thaw();
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stderr).toContain(`could not remove the record of a queue its workers served ${record}: EPERM`);
    const again = await teardown("svgone");
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(existsSync(record!)).toBe(false);
  });
});
