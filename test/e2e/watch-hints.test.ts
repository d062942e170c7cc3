import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";

const write = (file: string, text: string) => {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
};

/** A v2 fake host whose caller sits in /user.slice/me, with a cgroup `qa-inj` set up under it (as `--parent self` does). */
function fakeHost(): { root: string; procfs: string; sysfs: string; cg: string } {
  const root = mkdtempSync(path.join(tmpdir(), "drill-watch-hints-"));
  const procfs = path.join(root, "proc");
  const sysfs = path.join(root, "sys");
  const cg = path.join(sysfs, "fs", "cgroup");
  write(path.join(procfs, "pressure", "memory"), "some avg10=0.10 avg60=0.05 avg300=0.01 total=5000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n");
  write(path.join(procfs, "vmstat"), "nr_free_pages 1\npswpin 0\npswpout 0\nworkingset_refault_file 0\n");
  write(path.join(procfs, "stat"), "cpu  1 0 1 100 0 0 0 0 0 0\nintr 1\n");
  write(path.join(procfs, "self", "cgroup"), "0::/user.slice/me\n");
  write(path.join(cg, "cgroup.controllers"), "cpuset cpu io memory pids\n");
  write(path.join(cg, "cgroup.procs"), "1\n");
  const infer = path.join(cg, "user.slice", "me", "qa-inj");
  write(path.join(infer, "memory.current"), "1048576\n");
  write(path.join(infer, "memory.max"), "67108864\n");
  write(path.join(infer, "memory.peak"), "1572864\n");
  write(path.join(infer, "memory.events"), "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
  write(path.join(infer, "memory.swap.current"), "0\n");
  write(path.join(infer, "memory.swap.max"), "0\n");
  write(path.join(infer, "memory.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  return { root, procfs, sysfs, cg };
}

let host: ReturnType<typeof fakeHost>;
let redisUrl = "";
beforeAll(async () => {
  host = fakeHost();
  // Nothing listens there: the queue fields are missing, the kernel ones are what this file is about.
  redisUrl = `redis://127.0.0.1:${await freePort()}`;
});
afterAll(() => rmSync(host.root, { recursive: true, force: true }));

const watchOnce = (extra: string[]) =>
  runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "--redis", redisUrl, "watch", "--once", "--json", "--interval", "100ms", ...extra]);

describe("drill watch: a worker cgroup that is not there", () => {
  it("says once on stderr where it looked and to check --parent; --json stdout stays one sample; exit 0", async () => {
    const r = await watchOnce(["--parent", "self", "--name", "qa-none"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const hints = r.stderr.split("\n").filter((l) => l.startsWith("watch: no cgroup"));
    expect(hints).toEqual([
      `watch: no cgroup qa-none at ${path.join(host.cg, "user.slice", "me", "qa-none")} (yet): its cg_* fields stay null until it appears; check --name and --parent (default: the hierarchy's root; self: your own cgroup), or set it up`,
    ]);
    const lines = r.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ cg_mem_current: null, cg_oom_kill: null });
  });

  it("a cgroup of that name under the caller's own cgroup: suggests --parent self", async () => {
    const r = await watchOnce(["--name", "qa-inj"]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).toContain(`watch: no cgroup qa-inj at ${path.join(host.cg, "qa-inj")} (yet)`);
    expect(r.stderr).toContain(`${path.join(host.cg, "user.slice", "me", "qa-inj")} exists under your own cgroup: add --parent self`);
  });

  // QA: watch found the drill's Redis from the state dir but not its cgroup: without --parent self every cg_* was null.
  it("no --parent: the one cgroup of that name drill set up from this state dir (--parent self) is the one sampled", async () => {
    const setup = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "cgroup", "setup", "--parent", "self", "--name", "qa-mk", "--memory-max", "64M"]);
    expect(setup.exitCode, setup.stderr).toBe(0);
    const r = await watchOnce(["--name", "qa-mk"]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("watch: no cgroup");
    expect(JSON.parse(r.stdout.trim())).toMatchObject({ cg_mem_max: 67108864 });
    // --parent given is taken as said: the root's qa-mk, which is not there.
    expect((await watchOnce(["--name", "qa-mk", "--parent", "/"])).stderr).toContain(`watch: no cgroup qa-mk at ${path.join(host.cg, "qa-mk")} (yet)`);
  });

  it("no hint when the cgroup is there", async () => {
    const r = await watchOnce(["--name", "qa-inj", "--parent", "self"]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("watch: no cgroup");
    expect(JSON.parse(r.stdout.trim())).toMatchObject({ cg_mem_current: 1048576 });
  });
});

describe("drill watch --record", () => {
  it.each([
    ["a missing directory", (root: string) => path.join(root, "nonexistent", "dir", "x.jsonl"), "ENOENT"],
    ["a directory", (root: string) => root, "EISDIR"],
  ])("into %s is exit 2 naming --record and the path", async (_name, target, code) => {
    const file = target(host.root);
    const r = await watchOnce(["--name", "qa-inj", "--parent", "self", "--record", file]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain(`drill: --record: cannot open ${file}: ${code}`);
    expect(r.stdout).toBe("");
  });

  // QA: read "cannot open : ENOENT".
  it("'' is exit 2 saying the path is empty", async () => {
    const r = await watchOnce(["--name", "qa-inj", "--parent", "self", "--record", ""]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain("drill: --record: is empty; give the file to append the samples to (JSON lines)");
    expect(r.stdout).toBe("");
  });
});

// QA: with an ancestor's limit tighter than the cgroup's own, cg_mem_max showed headroom that
// did not exist (the OOM came at the ancestor's limit; cgroup status said "effective").
describe("drill watch: an ancestor's tighter limit", () => {
  it("is said once on stderr at the start; cg_mem_max stays the cgroup's own; no word when the own limit is the tightest", async () => {
    const me = path.join(host.cg, "user.slice", "me");
    write(path.join(me, "memory.max"), "33554432\n");
    try {
      const r = await watchOnce(["--parent", "self", "--name", "qa-inj"]);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stderr.split("\n").filter((l) => l.includes("ancestor"))).toEqual([
        `watch: cg_mem_max is ${path.join(me, "qa-inj")}'s own limit (64.0MiB); ancestor ${me} limits it to 32.0MiB, the effective limit where the OOM killer acts`,
      ]);
      expect(JSON.parse(r.stdout.trim())).toMatchObject({ cg_mem_max: 67108864 });
    } finally {
      rmSync(path.join(me, "memory.max"));
    }
    const calm = await watchOnce(["--parent", "self", "--name", "qa-inj"]);
    expect(calm.stderr).not.toContain("ancestor");
  });
});

// QA: an own memory.max that does not read was called "max" in the start notice (the sample
// itself said null with the file in missing); an ancestor's that does not read was skipped as no limit.
describe("drill watch: a limit file that does not read", () => {
  const me = () => path.join(host.cg, "user.slice", "me");
  const own = () => path.join(me(), "qa-inj", "memory.max");
  it.each(["abc\n", "", "-1\n"])("own memory.max %j with an ancestor at 160MiB: 'could not be read', not 'max'", async (text) => {
    write(path.join(me(), "memory.max"), "167772160\n");
    write(own(), text);
    try {
      const r = await watchOnce(["--parent", "self", "--name", "qa-inj"]);
      expect(r.exitCode, r.stderr).toBe(0);
      const notice = r.stderr.split("\n").filter((l) => l.includes("ancestor"));
      expect(notice).toEqual([expect.stringMatching(new RegExp(`^watch: cg_mem_max is ${path.join(me(), "qa-inj")}'s own limit \\(could not be read: not a limit: .*\\); ancestor ${me()} limits it to 160MiB`))]);
      expect(JSON.parse(r.stdout.trim())).toMatchObject({ cg_mem_max: null });
    } finally {
      rmSync(path.join(me(), "memory.max"));
      write(own(), "67108864\n");
    }
  });
  it("an ancestor's memory.max 'abc': the effective limit is said to be unknown", async () => {
    write(path.join(me(), "memory.max"), "abc\n");
    try {
      const r = await watchOnce(["--parent", "self", "--name", "qa-inj"]);
      expect(r.exitCode, r.stderr).toBe(0);
      expect(r.stderr.split("\n").filter((l) => l.includes("ancestor"))).toEqual([
        `watch: ancestor limit ${path.join(me(), "memory.max")} could not be read (not a limit: "abc"): the effective limit where the OOM killer acts is unknown`,
      ]);
    } finally {
      rmSync(path.join(me(), "memory.max"));
    }
  });
});
