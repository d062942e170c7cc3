import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, repoRoot } from "../helpers/cli.js";

// RELIABILITY 18: a non-root run of a command that must write a kernel or
// state file fails with one line naming the file and what to do, never a
// stack trace. Run as root, the test drops to `nobody` with setpriv.
const NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"];

async function asNobody(args: string[]): Promise<{ exitCode: number; stderr: string; stdout: string }> {
  const r = await execa("setpriv", [...NOBODY, process.execPath, drillBin, ...args], {
    cwd: os.tmpdir(),
    reject: false,
    timeout: 30_000,
    stdin: "ignore",
    // An unreachable Redis: a failing command must never reach the host's 127.0.0.1:6379.
    env: { FORCE_COLOR: "0", NO_COLOR: "1", HOME: os.tmpdir(), DRILL_REDIS_URL: "redis://127.0.0.1:1" },
  });
  return { exitCode: r.exitCode ?? -1, stderr: String(r.stderr ?? ""), stdout: String(r.stdout ?? "") };
}

async function skipReason(): Promise<string | null> {
  if (process.getuid?.() !== 0) return "not root: cannot drop to nobody (a non-root run of the suite is itself the case)";
  const probe = await execa("setpriv", [...NOBODY, process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(path.join(repoRoot, "dist", "main.js"))})`], { reject: false });
  if (probe.exitCode !== 0) return `nobody cannot run the built binary under ${repoRoot} (setpriv or read access missing: ${String(probe.stderr).split("\n")[0]})`;
  return null;
}

let reason: string | null = null;
let tmp = "";
beforeAll(async () => {
  reason = await skipReason();
  if (reason) console.warn(`skipping the non-root cases: ${reason}`);
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-nonroot-"));
  chmodSync(tmp, 0o755);
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** One line on stderr, no stack frames, no "unexpected error". */
function expectOneLine(stderr: string): string {
  const lines = stderr.split("\n").filter((l) => l.trim() !== "");
  expect(lines.filter((l) => /^\s+at /.test(l))).toEqual([]);
  expect(stderr).not.toMatch(/unexpected error/);
  expect(lines).toHaveLength(1);
  return lines[0]!;
}

describe("non-root runs (RELIABILITY 18)", () => {
  it("cgroup setup names the cgroup directory it could not create and says to run as root", async (ctx) => {
    if (reason) return ctx.skip();
    const stateDir = path.join(tmp, "writable");
    mkdirSync(stateDir);
    chmodSync(stateDir, 0o777);
    const r = await asNobody(["--state-dir", stateDir, "cgroup", "setup", "--name", "nr1", "--memory-max", "64M", "--parent", "self"]);
    expect(r.exitCode).toBe(1);
    expect(expectOneLine(r.stderr)).toMatch(/^drill: cannot create \/sys\/fs\/cgroup\/\S*nr1: EACCES \(run as root/);
  });

  it("up names the state directory it could not create, before touching anything", async (ctx) => {
    if (reason) return ctx.skip();
    const rootOnly = path.join(tmp, "root-only");
    mkdirSync(rootOnly);
    chmodSync(rootOnly, 0o700);
    const r = await asNobody(["--state-dir", rootOnly, "up"]);
    expect(r.exitCode).toBe(1);
    expect(expectOneLine(r.stderr)).toBe(`drill: cannot create the state directory ${path.join(rootOnly, "smoke")}: EACCES (run as root, or give --state-dir a directory you can write)`);
  });

  it("doctor refuses (exit 3) and says root is needed", async (ctx) => {
    if (reason) return ctx.skip();
    const r = await asNobody(["doctor"]);
    expect(r.exitCode).toBe(3);
    expect(expectOneLine(r.stderr)).toMatch(/^drill: doctor refused: root: .*run as root/);
  });
});
