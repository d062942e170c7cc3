// Ctrl-C, SIGTERM or SIGHUP while drill is still loading the command (commands load
// lazily: up to a second on a slow VM) says that nothing was done and exits
// 130/143/129. QA: in the first second of a rollback or an up it exited 130
// without a word. The built binary, its start held 4 s (DRILL_TEST_START_DELAY_MS)
// and the signal sent 1.5 s in.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pathToFileURL } from "node:url";
import { execa } from "execa";
import { drillBin, repoRoot, runDrill } from "../helpers/cli.js";

describe("a signal while drill is starting", () => {
  let root: string;
  beforeAll(() => (root = mkdtempSync(path.join(os.tmpdir(), "drill-interrupt-starting-"))));
  // Had the signal come too late (the start held no more), up would have started a drill: rolled back, not orphaned.
  afterAll(async () => {
    for (const command of ["rollback", "up"]) {
      const stateDir = path.join(root, command, "state");
      if (existsSync(stateDir)) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 90_000 });
    }
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it.each([
    ["rollback", [], "SIGINT", 130],
    ["up", ["--parent", "self", "--name", "startsig", "--file-dir", os.tmpdir()], "SIGTERM", 143],
    // The terminal closed: 128 + 1, as a shell says it.
    ["report", [], "SIGHUP", 129],
  ] as const)("%s %j, %s: said, exit %s, nothing made in the state dir", async (command, args, signal, exitCode) => {
    const stateDir = path.join(root, command, "state");
    const child = spawn("node", [drillBin, "--state-dir", stateDir, command, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1", DRILL_TEST_START_DELAY_MS: "4000" } });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    await new Promise((r) => setTimeout(r, 1500));
    child.kill(signal);
    expect(await exited, stderr).toBe(exitCode);
    expect(stderr).toBe(`drill: interrupted by ${signal} while starting: nothing was done\n`);
    expect(existsSync(stateDir)).toBe(false);
  }, 30_000);

  // QA: a gate SIGTERMed 0.15 s after its start kept deciding jobs. The signal came while the start's
  // listeners were installed, and began() removed them before the event loop dispatched it: dropped.
  // Here the signal is sent and began() called in one synchronous run, before any dispatch.
  const handOver = (commandListens: boolean) => `
    const { began, interruptWhileStarting } = await import(${JSON.stringify(pathToFileURL(path.join(repoRoot, "dist", "interrupt.js")).href)});
    interruptWhileStarting();
    process.kill(process.pid, "SIGTERM");
    began();
    ${commandListens ? `process.on("SIGTERM", () => { console.log("the command got SIGTERM"); process.exit(143); });` : ""}
    setTimeout(() => console.log("survived"), 1000);
  `;
  it.each([
    [true, "the command's own listener gets it", 143, null, "the command got SIGTERM\n"],
    [false, "with no listener of the command's, node's default ends the process", null, "SIGTERM", ""],
  ] as const)("a signal pending as the command takes over is not dropped (%s: %s)", async (commandListens, _what, code, signal, stdout) => {
    const r = await execa(process.execPath, ["--input-type=module", "-e", handOver(commandListens)], { reject: false, timeout: 10_000 });
    expect(r.stdout).toBe(stdout.trimEnd());
    expect(r.exitCode ?? null).toBe(code);
    expect(r.signal ?? null).toBe(signal);
  });
});
