// A --redis URL's password never reaches the output: failure output is what
// an operator pastes into incident notes and chat (QA: rollback printed it in
// its step detail and its `left` lines when Redis did not answer). The built
// binary, a loopback port nothing listens on, a state dir of its own.
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
});
