import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, repoRoot } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";

// QA AB 4: a drill up as root (its dir 0700) read by another user was "no
// drill": report said there was none, rollback `"drills":[]`, and gate mode
// and watch took the default Redis, a deny-all "succeeding" on somebody
// else's. Run as root, each command drops to `nobody` with setpriv, in a
// network namespace of its own (`unshare -n`): with no DRILL_REDIS_URL (it
// would win over the state), a fallback to redis://127.0.0.1:6379 can reach
// nothing of the host's, and is seen by its note and exit code.
const AS_NOBODY = ["-n", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, drillBin];

let reason: string | null = null;
let tmp = "";
let stateDir = "";
let stateFile = "";

async function asNobody(args: string[]): Promise<{ exitCode: number; stderr: string; stdout: string }> {
  const r = await execa("unshare", [...AS_NOBODY, "--state-dir", stateDir, ...args], {
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
    const probe = await execa("unshare", ["-n", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(path.join(repoRoot, "dist", "main.js"))})`], { reject: false });
    if (probe.exitCode !== 0) reason = `unshare -n with setpriv to nobody cannot run the built binary (${String(probe.stderr).split("\n")[0]})`;
  }
  if (reason) console.warn(`skipping the unreadable-drill cases: ${reason}`);
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
afterAll(() => {
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
});
