import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realCgroupForFile, realDrillSkipReason } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

const skip = realDrillSkipReason();
if (skip) console.warn(`skipping the worker in a frozen or OOM-disabled cgroup: ${skip}`);

/**
 * QA: `drill worker` in a frozen worker cgroup (cgroup.freeze 1) stopped at
 * its join and never ran, and in a v1 cgroup with oom_kill_disable 1 its KV
 * memory waited at the limit for ever: the hangs inject had, which inject
 * now refuses. The worker is refused the same way, by the same code.
 */
describe.skipIf(skip !== null)("worker in a frozen or OOM-disabled cgroup (real cgroup under --parent self)", () => {
  const name = `wk37wfrz${process.pid}`;
  const made = realCgroupForFile(name);
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedisServer();
  });
  afterAll(async () => {
    for (const d of made.cg.dirs) {
      const freeze = path.join(d.dir, "cgroup.freeze");
      if (d.version === 2 && existsSync(freeze)) writeFileSync(freeze, "0"); // a case that failed mid-freeze
    }
    await redis?.stop();
  });
  /** The cgroup's cgroup.freeze, or undefined once the case's skip is said. */
  const freezeFile = (): string | undefined => {
    const v2 = made.cg.dirs.find((d) => d.version === 2);
    const file = v2 ? path.join(v2.dir, "cgroup.freeze") : undefined;
    if (file && existsSync(file)) return file;
    console.warn("skipping this case: no cgroup.freeze beside the cgroup: the kernel's cgroup2 has no freezer (or no cgroup2 directory)");
    return undefined;
  };
  const worker = (env: Record<string, string> = {}) =>
    runDrill(["--state-dir", made.stateDir, "--redis", redis.url, "worker", "--parent", "self", "--name", name, "--queue", `wk37q${process.pid}`, "--weights", "8M", "--weights-dir", made.stateDir, "--idle-exit", "1s"], { timeout: 30_000, env });

  it("frozen: refused (exit 3) naming the freeze and how to thaw it; nothing joins", async (ctx) => {
    const file = freezeFile();
    if (!file) return ctx.skip();
    writeFileSync(file, "1");
    try {
      const r = await worker();
      expect(r.exitCode, r.stdout + r.stderr).toBe(3);
      expect(r.stderr).toContain(`is frozen (${path.join(path.dirname(file), "cgroup.events")}: frozen 1): a worker would stop`);
      expect(r.stderr).toContain(`echo 0 > ${file}`);
      expect(r.stderr).not.toContain("joining");
      for (const d of made.cg.dirs) expect(readFileSync(path.join(d.dir, "cgroup.procs"), "utf8")).toBe("");
    } finally {
      writeFileSync(file, "0");
    }
  });

  it("frozen: up's own worker (DRILL_RUN_ID) is not refused: it waits for the thaw (up says the freeze as a stall), then runs", async (ctx) => {
    const file = freezeFile();
    if (!file) return ctx.skip();
    writeFileSync(file, "1");
    const run = worker({ DRILL_RUN_ID: `wk37-frozen-${process.pid}` });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    writeFileSync(file, "0");
    const r = await run;
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stderr).toContain("joining");
    expect(r.stderr).not.toContain("is frozen");
  });

  it("v1 with oom_kill_disable 1: refused (exit 3) naming memory.oom_control and how to enable it; nothing joins", async (ctx) => {
    if (made.cg.limits.version !== 1) {
      console.warn(`skipping this case: the memory controller is cgroup v${made.cg.limits.version} here; memory.oom_control is v1's`);
      return ctx.skip();
    }
    const control = path.join(made.cg.limits.dir, "memory.oom_control");
    writeFileSync(control, "1");
    let r;
    try {
      r = await worker({ DRILL_RUN_ID: `wk37-oomd-${process.pid}` });
    } finally {
      writeFileSync(control, "0");
    }
    // up's own worker too: up says no such wait, it would hang there as well.
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr).toContain(`${control}: oom_kill_disable 1`);
    expect(r.stderr).toContain(`echo 0 > ${control}`);
    expect(r.stderr).not.toContain("--mode thrash");
    expect(r.stderr).not.toContain("joining");
    expect(readFileSync(path.join(made.cg.limits.dir, "cgroup.procs"), "utf8")).toBe("");
  });
});
