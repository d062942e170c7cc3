// A --redis URL's password never reaches the output: failure output is what
// an operator pastes into incident notes and chat (QA: rollback printed it in
// its step detail and its `left` lines when Redis did not answer). The built
// binary, a loopback port nothing listens on, a state dir of its own.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";

const PASSWORD = "s3cret-pw-7f1a";

describe("a --redis password stays out of every command's output (nothing listening)", () => {
  let root: string;
  let url: string;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-redis-password-"));
    url = `redis://:${PASSWORD}@127.0.0.1:${await freePort()}`;
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it.each([
    ["rollback --queue", ["rollback", "--queue", "pwq"], 4],
    ["--json rollback --queue", ["--json", "rollback", "--queue", "pwq"], 4],
    ["report --queue", ["report", "--queue", "pwq"], 1],
    ["--json watch --once", ["--json", "watch", "--once", "--queue", "pwq", "--parent", "self", "--name", "pwtestcg"], 0],
    ["doctor", ["doctor"], 3],
    ["gate mode", ["gate", "mode", "reject_all", "--queue", "pwq"], 1],
    ["pack", ["pack", "--jobs", "1", "--queue", "pwq"], 1],
  ])("%s", async (_label, args, exitCode) => {
    const r = await runDrill(["--state-dir", path.join(root, "state"), "--redis", url, ...args], { timeout: 60_000 });
    expect(r.exitCode, r.stderr).toBe(exitCode);
    // It does say which Redis, with the password hidden.
    expect(`${r.stdout}\n${r.stderr}`).toContain("redis://:***@127.0.0.1:");
    expect(`${r.stdout}\n${r.stderr}`).not.toContain(PASSWORD);
  }, 90_000);

  // QA: ioredis decodes the password and threw a bare URIError with a stack.
  it("a malformed %-escape in the password: exit 2 naming --redis, the password hidden", async () => {
    const r = await runDrill(["--redis", `redis://:${PASSWORD}%ZZ@127.0.0.1:1`, "gate", "mode", "admit"]);
    expect(r.exitCode, r.stderr).toBe(2);
    expect(r.stderr).toBe(`drill: --redis: not a URL: "redis://:***@127.0.0.1:1" (a malformed %-escape in its password: write % as %25)`);
  });
});

describe("a wrong password on a server that asks for one", () => {
  let server: ChildProcess;
  let port: number;
  beforeAll(async () => {
    port = await freePort();
    server = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--requirepass", "right-pw"], { stdio: "ignore" });
    // Up once the right password is answered.
    for (let tries = 0; ; tries++) {
      const ping = spawnSync("redis-cli", ["-p", String(port), "--no-auth-warning", "-a", "right-pw", "PING"], { encoding: "utf8" });
      if (ping.stdout.trim() === "PONG") break;
      if (tries > 100) throw new Error(`redis-server --requirepass on ${port} did not answer: ${ping.stderr}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }, 30_000);
  afterAll(() => void server.kill("SIGKILL"));

  // QA: with a database in the URL it read "SELECT 3 refused: NOAUTH", as if the database were the trouble.
  // And at once: ioredis reconnected ~10 s with the same refused password.
  it("is said as the server says it (WRONGPASS), with or without a database in the URL, at once", async () => {
    for (const db of ["", "/3"]) {
      const started = Date.now();
      const r = await runDrill(["--redis", `redis://:${PASSWORD}@127.0.0.1:${port}${db}`, "gate", "mode", "admit"]);
      expect(r.exitCode, r.stderr).toBe(1);
      expect(r.stderr).toContain("WRONGPASS");
      expect(r.stderr).not.toContain("SELECT");
      expect(r.stderr).not.toContain(PASSWORD);
      expect(Date.now() - started, "a bound on a hang, not a timing claim").toBeLessThan(6000);
    }
  }, 60_000);

  // QA W 7: watch said a refused password "unreachable", as if the server might come back by itself.
  // And --once exited 0: a script took the null queue fields for a quiet queue (a Redis down stays exit 0, above).
  it("watch says the password refused, with the fix, not unreachable; --once prints its sample and exits 1", async () => {
    const r = await runDrill(["--redis", `redis://:${PASSWORD}@127.0.0.1:${port}`, "watch", "--once", "--json", "--queue", "pwwatch", "--name", "nosuch-cgroup"]);
    expect(r.exitCode, r.stderr).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ queue_len: null, missing: expect.arrayContaining([expect.objectContaining({ field: "queue_len" })]) });
    expect(r.stderr.trim().split("\n").at(-1)).toMatch(/^drill: watch --once: Redis redis:\/\/:\*\*\*@\S+ refused the password \(said above\): the sample's queue fields are null$/);
    expect(r.stderr).toMatch(/watch: Redis redis:\/\/:\*\*\*@\S+ refused: .*WRONGPASS.*\(redis refuses this user or password: fix the one in --redis/);
    expect(r.stderr).not.toContain("unreachable");
    expect(r.stderr).not.toContain(PASSWORD);
  }, 60_000);

  // QA: the re-admit hint showed `--redis 'redis://:***@…'`, which does not paste; the password stays out all the same.
  it("rollback --queue's re-admit and report commands say how to run them with the password masked", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-redis-password-readmit-"));
    try {
      for (const url of [`redis://:right-pw@127.0.0.1:${port}`, `redis://127.0.0.1:${port}?password=right-pw`]) {
        // A queue that holds a job: its rollback closes it, so re-admitting is its next step (one with no key has nothing to re-admit).
        const job = JSON.stringify({ id: "1", prompt_tokens: 100, completion_tokens: 1, files: 1, enqueue_ts: Date.now(), deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
        expect(spawnSync("redis-cli", ["-p", String(port), "--no-auth-warning", "-a", "right-pw", "RPUSH", "pwreadmit", job], { encoding: "utf8" }).stdout.trim()).toMatch(/^\d+$/);
        const r = await runDrill(["--state-dir", stateDir, "--redis", url, "rollback", "--queue", "pwreadmit"]);
        expect(r.exitCode, r.stderr).toBe(0);
        expect(r.stdout).toContain(`--redis '${url.replace("right-pw", "***")}' gate mode admit --queue pwreadmit`);
        expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("(the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL)");
        expect(`${r.stdout}\n${r.stderr}`).not.toContain("right-pw");
      }
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 60_000);
});
