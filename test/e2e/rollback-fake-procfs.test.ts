import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";

// QA: a FIFO for a process's environ in a --procfs tree held `drill rollback`
// in its open (the main thread blocked, so past SIGTERM too), as a FIFO for
// pressure/memory once held the gate: environ is read as the kernel files are.

let root: string;
beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "drill-fake-procfs-"));
  const proc = path.join(root, "proc");
  for (const pid of ["4242", "4243"]) {
    mkdirSync(path.join(proc, pid), { recursive: true });
    // A real stat line (this process's, under the fake pid): a live, non-zombie process with a start time.
    writeFileSync(path.join(proc, pid, "stat"), readFileSync("/proc/self/stat", "utf8").replace(/^\d+ /, `${pid} `));
  }
  execFileSync("mkfifo", [path.join(proc, "4242", "environ")]);
  writeFileSync(path.join(proc, "4243", "environ"), "PATH=/usr/bin\0DRILL_RUN_ID=fifo-r1\0DRILL_STATE_DIR=/elsewhere\0");
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("rollback on a --procfs tree with a FIFO for an environ (built binary)", () => {
  it("reads past it at once and still finds the drill process beside it", async () => {
    const r = await runDrill(["--state-dir", path.join(root, "state"), "--procfs", path.join(root, "proc"), "rollback"], { timeout: 15_000 });
    expect(r.stderr).not.toMatch(/after the command had finished/);
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout + r.stderr).toContain("fifo-r1");
    expect(r.stdout + r.stderr).toContain("/elsewhere");
  });
});
