import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readState } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { drillBin } from "../helpers/cli.js";
import { NOBODY, nobodyCannotRun } from "../helpers/nobody.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

// QA: a rollback run as another user than the root `drill up` whose gate it
// stops got EPERM from kill(2) in "stop gate and watch" and exited 4 right
// there: no re-drain, no export, no rerun line (RELIABILITY: every step runs
// even after one fails, and says what is left). The root process here is a
// `sleep` recorded as the drill's gate; the rollback drops to nobody with
// setpriv, on a state dir nobody owns, its Redis a private server's.
const NAME = "fixeperm";

let reason: string | null = null;
let tmp = "";
let stateDir = "";
let server: RedisServer | null = null;
let gate: ChildProcess | null = null;

async function rollback(asNobody: boolean, name = NAME): Promise<{ exitCode: number; stderr: string; stdout: string }> {
  const [file, ...pre] = asNobody ? ["setpriv", ...NOBODY, process.execPath] : [process.execPath];
  const r = await execa(file!, [...pre, drillBin, "--state-dir", stateDir, "rollback", "--name", name], {
    cwd: os.tmpdir(),
    reject: false,
    // Bounded below the test's own: a rollback that hangs (QA: its Redis left open after the throw) fails here, said.
    timeout: 20_000,
    stdin: "ignore",
    // No DRILL_REDIS_URL: the state's Redis is the one rolled back.
    env: { FORCE_COLOR: "0", NO_COLOR: "1", HOME: os.tmpdir(), PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
  });
  return { exitCode: r.exitCode ?? -1, stderr: String(r.stderr ?? ""), stdout: String(r.stdout ?? "") };
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) reason = "not root: cannot drop to nobody, nor start a process nobody may not signal";
  else reason = await nobodyCannotRun();
  if (reason) {
    console.warn(`skipping: ${reason}`);
    return;
  }
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-nonroot-rootproc-"));
  chmodSync(tmp, 0o755);
  stateDir = path.join(tmp, "state");
  server = await startRedisServer();
  gate = spawn("sleep", ["600"], { stdio: "ignore" });
  await new Promise((resolve) => gate!.once("spawn", resolve));
  const stat = readProcessStat(new HostRoots(), gate.pid!);
  if (!stat.ok) throw new Error(`no stat of the root process ${gate.pid}`);
  writeFakeDrill(stateDir, NAME, "jobs", server.url, {
    phase: "running",
    processes: [{ role: "gate", key: "gate", pid: gate.pid!, startTime: stat.value.startTime, files: [], intendedAt: new Date().toISOString() }],
  });
  const redis = new Redis(server.url);
  try {
    await redis.rpush("jobs", "j1", "j2", "j3");
    await redis.rpush("jobs:admitted", "j4", "j5");
  } finally {
    redis.disconnect();
  }
  // Root's state, readable by nobody, writable by root alone: the rollback after nobody's trusts it (never a record nobody could write).
  chmodSync(stateDir, 0o755);
  chmodSync(path.join(stateDir, NAME), 0o755);
  chmodSync(path.join(stateDir, NAME, "state.json"), 0o644);
});

afterAll(async () => {
  if (gate && gate.exitCode === null && gate.signalCode === null) gate.kill("SIGKILL");
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe("rollback as nobody of a drill whose gate is root's", () => {
  it("fails that step naming pid, role and who can stop it, runs every later step (no job lost), exit 4 with the left line and an 'as root:' rerun; root's rollback finishes it", async (ctx) => {
    if (reason) return ctx.skip();
    const pid = gate!.pid!;
    const r = await rollback(true);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stderr).not.toMatch(/^\s+at /m);
    const refused = `not permitted: the process is uid 0's (root): only its owner or root can stop it; run as root`;
    expect(r.stdout).toContain(`FAIL stop gate and watch: gate ${pid}: cannot signal it: EPERM (${refused})`);
    // Every later step ran: the queue drained (the export is refused only by root's dir), files looked at.
    expect(r.stdout).toMatch(/ok {3}re-drain: moved 2 from jobs:admitted; LLEN jobs_drain = 5/);
    // Root's drill dir: drill's sentence (whose dir, who finishes it; the drain done, the jobs in Redis), not Node's bare EACCES.
    const dir = path.join(stateDir, NAME);
    const notWritable = `EACCES (permission denied: ${dir} is root's, mode 0755: not writable by this user (uid 65534); run as root to finish it)`;
    const kept = `every key of queue jobs is still in the given Redis ${server!.url}, nothing deleted`;
    const exportLine = r.stdout.split("\n").find((l) => l.includes("FAIL export: "));
    expect(exportLine, r.stdout).toBe(`  FAIL export: cannot write ${path.join(dir, exportLine?.match(/final-\S+\.jsonl/)?.[0] ?? "final-?.jsonl")}: ${notWritable}; the drain stays done: ${kept}`);
    expect(r.stdout).toContain(`FAIL record progress: cannot create the lock ${path.join(dir, "rollback.lock")}: ${notWritable}: `);
    expect(r.stderr).toMatch(new RegExp(`(left: |; )${NAME}: export to \\S+final-\\S+\\.jsonl not written: ${escape(notWritable)}; ${escape(kept)} \\(run `));
    // Its state.json unwritten in root's dir: root reruns it, not this user "once the state dir has space (or is writable) again" (QA).
    expect(r.stderr).toContain(
      `${path.join(dir, "state.json")} not written (could not create the lock ${path.join(dir, "rollback.lock")}: ${notWritable}): the drill is not marked rolled back, nor what this rollback did; ` +
        `as root, run drill --state-dir ${stateDir} rollback --name ${NAME}: it finishes what is left and records it`,
    );
    expect(r.stdout).not.toContain("EACCES: permission denied");
    expect(r.stdout).toMatch(/ok {3}unlink files: none left/);
    const lines = r.stdout.split("\n");
    const rerun = lines.findIndex((l) => l.startsWith("Not rolled back yet:"));
    expect(rerun, r.stdout).toBeGreaterThan(0);
    expect(lines[rerun + 1]).toBe(`  as root: drill --state-dir ${stateDir} rollback --name ${NAME}`);
    expect(r.stderr.trim()).toMatch(/^drill: rollback incomplete; left: /);
    expect(r.stderr).toContain(`; ${NAME}: process ${pid} (gate) still running: ${refused}`);
    expect(gate!.exitCode === null && gate!.signalCode === null, "root's gate signalled").toBe(true);
    const redis = new Redis(server!.url);
    try {
      expect((await redis.lrange("jobs_drain", 0, -1)).sort()).toEqual(["j1", "j2", "j3", "j4", "j5"]);
    } finally {
      redis.disconnect();
    }
    expect(readState(stateDir, NAME)?.phase).toBe("running");

    const again = await rollback(false);
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`ok {3}stop gate and watch: gate ${pid}: stopped`));
    await new Promise((resolve) => (gate!.exitCode !== null || gate!.signalCode !== null ? resolve(null) : gate!.once("exit", resolve)));
    expect(gate!.signalCode).toBe("SIGTERM");
    expect(readState(stateDir, NAME)?.phase).toBe("complete");
  }, 90_000);

  // QA: a starting up (up.lock, no run recorded) that nobody may not signal was listed as left, with no rerun line at all.
  it("an up still starting that is root's: listed as left, and the rerun line says as root", async (ctx) => {
    if (reason) return ctx.skip();
    const starting = "fixepermup";
    const up = spawn("sleep", ["600"], { stdio: "ignore" });
    try {
      await new Promise((resolve) => up.once("spawn", resolve));
      const stat = readProcessStat(new HostRoots(), up.pid!);
      if (!stat.ok) throw new Error(`no stat of the root process ${up.pid}`);
      mkdirSync(path.join(stateDir, starting), { mode: 0o755 });
      writeFileSync(path.join(stateDir, starting, "up.lock"), JSON.stringify({ pid: up.pid, startTime: stat.value.startTime, what: "up" }), { mode: 0o644 });
      const r = await rollback(true, starting);
      expect(r.exitCode, r.stdout + r.stderr).toBe(4);
      expect(r.stdout).toContain(`drill up of ${starting}: its lock not acted on (no up stopped): its up (pid ${up.pid}) cannot be signalled: EPERM (`);
      const lines = r.stdout.split("\n");
      const rerun = lines.findIndex((l) => l.startsWith("Not rolled back yet:"));
      expect(rerun, r.stdout).toBeGreaterThan(0);
      expect(lines.slice(rerun + 1)).toEqual([`  as root: drill --state-dir ${stateDir} rollback --name ${starting}`]);
      expect(r.stderr).toContain(`left: ${starting}: its up (pid ${up.pid}) cannot be signalled: EPERM`);
      expect(up.exitCode === null && up.signalCode === null, "root's up signalled").toBe(true);
    } finally {
      up.kill("SIGKILL");
      rmSync(path.join(stateDir, starting), { recursive: true, force: true });
    }
  }, 60_000);
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
