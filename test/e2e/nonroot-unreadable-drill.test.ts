import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, repoRoot } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA AB 4: a drill up as root (its dir 0700) read by another user was "no
// drill": report said there was none, rollback `"drills":[]`, and gate mode
// and watch took the default Redis, a deny-all "succeeding" on somebody
// else's. Run as root, each command drops to `nobody` with setpriv, in a
// network namespace of its own (`unshare -n`): with no DRILL_REDIS_URL (it
// would win over the state), a fallback to redis://127.0.0.1:6379 can reach
// nothing of the host's, and is seen by its note and exit code. report
// --redis, given a Redis of the test's own, runs in the host's network.
const AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, drillBin];

let reason: string | null = null;
let tmp = "";
let stateDir = "";
let stateFile = "";
/** A Redis that answers, for report --redis: the report it would print is what must not come. */
let server: RedisServer | null = null;

/** `loopback`: in the host's network, for a case that gives --redis (a Redis of the test's own) and so falls back to none. */
async function asNobody(args: string[], loopback = false): Promise<{ exitCode: number; stderr: string; stdout: string }> {
  const [file, ...rest] = loopback ? AS_NOBODY : ["unshare", "-n", ...AS_NOBODY];
  const r = await execa(file!, [...rest, "--state-dir", stateDir, ...args], {
    cwd: os.tmpdir(),
    reject: false,
    timeout: 30_000,
    stdin: "ignore",
    env: { FORCE_COLOR: "0", NO_COLOR: "1", HOME: os.tmpdir() },
    extendEnv: false,
  });
  return { exitCode: r.exitCode ?? -1, stderr: String(r.stderr ?? ""), stdout: String(r.stdout ?? "") };
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) reason = "not root: cannot drop to nobody";
  else {
    const probe = await execa("unshare", ["-n", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(path.join(repoRoot, "dist", "bundle", "main.js"))})`], { reject: false });
    if (probe.exitCode !== 0) reason = `unshare -n with setpriv to nobody cannot run the built binary (${String(probe.stderr).split("\n")[0]})`;
  }
  if (reason) console.warn(`skipping the unreadable-drill cases: ${reason}`);
  else server = await startRedisServer();
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-unreadable-"));
  chmodSync(tmp, 0o755);
  stateDir = path.join(tmp, "state");
  mkdirSync(stateDir, { mode: 0o755 });
  chmodSync(stateDir, 0o755);
  // As `up` leaves it: the drill dir 0700, root's; its Redis on a port nothing listens on.
  writeFakeDrill(stateDir, "fxdu", "jobs", "redis://127.0.0.1:1", { phase: "running" });
  chmodSync(path.join(stateDir, "fxdu"), 0o700);
  stateFile = path.join(stateDir, "fxdu", "state.json");
});
afterAll(async () => {
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe("a drill dir of root's, read by another user (QA AB 4)", () => {
  const unreadable = () => `cannot read ${stateFile}: EACCES (permission denied: ${path.join(stateDir, "fxdu")} is root's, mode 0700: run as root)`;

  it.for([
    ["gate mode reject_all", ["gate", "mode", "reject_all"]],
    ["watch --once", ["watch", "--once", "--name", "fxdu", "--parent", "self"]],
    ["pack", ["pack", "--jobs", "1"]],
  ] as const)("%s refuses (exit 2) naming the unreadable state, never the default Redis", async ([, args], ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody([...args]);
    expect(r.exitCode, r.stderr).toBe(2);
    expect(r.stderr).not.toContain("127.0.0.1:6379");
    expect(r.stderr.trim()).toBe(`drill: cannot tell which drill's Redis to use: ${unreadable()}; give --redis <url> (or DRILL_REDIS_URL)`);
  });

  it("report says the drill is unreadable, not that there is none", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["report"]);
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stderr.trim()).toBe(`drill: ${unreadable()}`);
  });

  // QA: with --redis the report printed "(no drill state)" and a note that fxdu "did not" run on that Redis, from a state it never read.
  it.for([
    ["report --redis", ["report"]],
    ["--json report --redis --queue", ["--json", "report", "--queue", "jobs"]],
  ] as const)("%s: exit 1 as without --redis, naming the unreadable state, no report and no word on where the drill ran", async ([, args], ctx) => {
    if (reason) return ctx.skip();
    const [json, rest] = args[0] === "--json" ? [["--json"], args.slice(1)] : [[], args];
    const r = await asNobody([...json, "--redis", server!.url, ...rest], true);
    expect(r.exitCode, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toBe("");
    const alone = "give --state-dir an empty directory of your own to report that Redis's queue alone, without the drill";
    expect(r.stderr.trim()).toBe(`drill: cannot tell whether drill fxdu ran on ${server!.url}: ${unreadable().replace(/\)$/, `, or ${alone})`)}`);
  });

  it.for([
    ["every drill", []],
    ["--name", ["--name", "fxdu"]],
  ] as const)("rollback (%s) lists the drill it cannot read, exit 4", async ([, extra], ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["--json", "rollback", ...extra]);
    expect(r.exitCode, r.stderr).toBe(4);
    const doc = JSON.parse(r.stdout) as { drills: Array<{ name: string; run_id: string | null; steps: Array<{ step: string; ok: boolean; detail: string }>; left: string[] }>; nothing_to_roll_back: boolean };
    expect(doc.nothing_to_roll_back).toBe(false);
    expect(doc.drills).toHaveLength(1);
    const [drill] = doc.drills;
    expect(drill!.name).toBe("fxdu");
    expect(drill!.run_id).toBeNull();
    expect(drill!.steps).toEqual([{ step: "read state", ok: false, detail: expect.stringContaining(unreadable()) as unknown as string }]);
    expect(drill!.left).toEqual([expect.stringContaining(unreadable())]);
    expect(r.stderr).toMatch(/^drill: rollback incomplete; left: fxdu: not rolled back: cannot read /m);
  });

  // Its FAIL line says root: the rollback to run again says so too, as the same user it is refused again.
  it("rollback's rerun line says to run it as root, its command as pasted", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["rollback", "--name", "fxdu"]);
    expect(r.exitCode, r.stderr).toBe(4);
    expect(r.stdout).toContain(`FAIL read state: ${unreadable()}`);
    const rerun = r.stdout.split("\n").findIndex((l) => l.startsWith("Not rolled back yet:"));
    expect(r.stdout.split("\n")[rerun + 1]).toBe(`  as root: drill --state-dir ${stateDir} rollback --name fxdu`);
  });

  // QA AE: drill makes the state dir itself 0700: there rollback exited 1 with no --json document.
  it("rollback of a state dir it cannot list: exit 4, the dir named, --json a document", async (ctx) => {
    if (reason) return ctx.skip();
    chmodSync(stateDir, 0o700);
    try {
      const r = await asNobody(["--json", "rollback"]);
      expect(r.exitCode, r.stderr).toBe(4);
      const doc = JSON.parse(r.stdout) as { drills: unknown[]; left: string[]; nothing_to_roll_back: boolean };
      const refused = `cannot read the state dir ${stateDir}: EACCES (permission denied: run as root, or give --state-dir a directory you can write)`;
      expect(doc).toMatchObject({ drills: [], nothing_to_roll_back: false, left: [`${refused}: nothing in it rolled back`] });
      const text = await asNobody(["rollback"]);
      expect(text.exitCode, text.stderr).toBe(4);
      expect(text.stdout).toContain(`nothing rolled back: ${refused}`);
    } finally {
      chmodSync(stateDir, 0o755);
    }
  });
});
