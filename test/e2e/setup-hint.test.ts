import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { detectLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { cgroupDirsLeft, makeFakeHost, realCgroupSkipReason, realWorkerCgroup, v1MemoryFiles, v2MemoryFiles, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping the setup hint on real cgroups: ${skip}`);

/**
 * The command inject and worker suggest for a cgroup that is not set up is
 * the one that sets it up where they looked: copied without --parent it would
 * make another cgroup at the hierarchy's root (and without --state-dir, its
 * marker elsewhere). Nothing is created here: the cgroup is never set up.
 */
describe.skipIf(skip !== null)("inject and worker: the setup hint names --parent and --state-dir (real host, nothing created)", () => {
  const name = `hint${process.pid}`;
  let stateDir: string;
  let redis: RedisServer;
  beforeAll(async () => {
    stateDir = mkdtempSync(path.join(tmpdir(), "drill-setup-hint-"));
    // The worker's Redis: its own, never the host's 6379.
    redis = await startRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const commands: Record<string, () => string[]> = {
    inject: () => ["inject", "--parent", "self", "--name", name, "--mode", "anon", "--size", "16M", "--hold", "1s"],
    "cgroup status": () => ["cgroup", "status", "--parent", "self", "--name", name],
    worker: () => ["--redis", redis.url, "worker", "--parent", "self", "--name", name, "--weights", "16M", "--idle-exit", "1s"],
  };
  // QA: exit 1 (failed) for what is a command run before its setup, or with the wrong --name/--parent: exit 2, as DESIGN's bad usage or input.
  it.each(Object.keys(commands))("%s: exit 2, the hint sets up the cgroup it looked for", async (command) => {
    const r = await runDrill(["--state-dir", stateDir, ...commands[command]!()]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^drill: cgroup ${name} (is not set up: no |does not exist \\(looked at )`));
    expect(r.stderr).toContain(`; run drill --state-dir ${stateDir} cgroup setup --name ${name} --parent self first`);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(cgroupDirsLeft(realWorkerCgroup(name))).toEqual([]);
  });
});

/**
 * A cgroup of that name drill did not create (no marker): `cgroup setup`
 * refuses to adopt it, so inject says so (as `cgroup status` calls it, "not
 * created by drill") instead of sending the operator to setup. Fake hosts,
 * so each layout's shape is certain: hybrid has the memory dir without
 * drill's twin; v2 has the whole dir, with no limit.
 */
describe("inject on a cgroup drill did not create: says setup would refuse it, not to run setup", () => {
  const hosts: FakeHost[] = [];
  afterAll(() => hosts.forEach((h) => h.cleanup()));

  const inject = (host: FakeHost, name: string) =>
    runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", host.stateDir, "inject", "--parent", "self", "--name", name, "--mode", "anon", "--size", "16M", "--hold", "1s"]);

  it("a --name with a space, not set up: the setup hint names it quoted, as the shell reads it back", async () => {
    const host = makeFakeHost("v2");
    hosts.push(host);
    const r = await inject(host, "my cg");
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain(" cgroup setup --name 'my cg' --parent self first");
  });

  it("hybrid: the memory dir is there, drill's twin is not", async () => {
    const host = makeFakeHost("hybrid");
    hosts.push(host);
    const limits = host.cgroup("memory", "/process_api/abc/theirs", v1MemoryFiles({ "memory.limit_in_bytes": "67108864\n" }));
    const r = await inject(host, "theirs");
    // Refused, as setup refuses to adopt it (and as the v2 case below): never a cgroup drill did not create.
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr).toMatch(/^drill: cgroup theirs exists but was not created by drill \(no .*\/unified\/drill-theirs-[0-9a-f]+\); drill cgroup setup would refuse it: /);
    expect(r.stderr).toContain(`${limits} already exists and drill did not create it (no marker in ${path.join(host.stateDir, "cgroups")}); refusing to adopt it`);
    expect(r.stderr).not.toMatch(/run drill .*cgroup setup/);
    const status = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", host.stateDir, "cgroup", "status", "--parent", "self", "--name", "theirs"]);
    expect(status.stdout).toContain("cgroup theirs (hybrid, not created by drill)");
  });

  it("v2: the whole dir is there with no limit: the no-limit refusal says setup would refuse it too", async () => {
    const host = makeFakeHost("v2");
    hosts.push(host);
    const limits = host.cgroup("", "/process_api/abc/theirs", v2MemoryFiles());
    const r = await inject(host, "theirs");
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr).toContain(`drill: ${limits} has no memory limit (nor has any ancestor): the hog would pressure the whole host; drill cgroup setup would refuse it: ${limits} already exists and drill did not create it`);
    expect(r.stderr).not.toMatch(/run drill .*cgroup setup/);
  });

  // QA (S5): with a limit in it, a plain mkdir passed every check and inject exited 0, its hog inside.
  it("v2: the whole dir is there with a limit: refused (exit 3) in one line naming the cgroup, and nothing is joined", async () => {
    const host = makeFakeHost("v2");
    hosts.push(host);
    const limits = host.cgroup("", "/process_api/abc/theirs", v2MemoryFiles({ "memory.max": "67108864\n" }));
    const r = await inject(host, "theirs");
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr).toBe(
      `drill: cgroup theirs was not created by drill: ${limits} already exists and drill did not create it (no marker in ${path.join(host.stateDir, "cgroups")}); ` +
        "refusing to run inject in it. If drill made it with another --state-dir, give that one; else pick another --name",
    );
    expect(readFileSync(path.join(limits, "cgroup.procs"), "utf8")).toBe("");
  });

  it("v2, nothing there: the setup hint names --parent, --state-dir and the tree (--sysfs, --procfs) it looked in", async () => {
    const host = makeFakeHost("v2");
    hosts.push(host);
    const layout = detectLayout(host.roots);
    if (!layout.ok) throw new Error(layout.reason);
    const cg = resolveWorkerCgroup(host.roots, layout.value, "absent", { kind: "self" });
    const r = await inject(host, "absent");
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toBe(`drill: cgroup absent is not set up: no ${cg.limits.dir}; run drill --state-dir ${host.stateDir} --sysfs ${host.sysfs} --procfs ${host.procfs} cgroup setup --name absent --parent self first`);
    expect(existsSync(cg.limits.dir)).toBe(false);
  });
});
