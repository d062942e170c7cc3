import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";

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

  // QA (qa35): the step-by-step path rolled back (cgroup setup, inject, rollback: 0), the same rollback run
  // again exited 4 naming another operator's drill up from its own state dir (RELIABILITY 8: again exits 0).
  // Its cgroups/ record dir says the state dir is drill's, used and rolled back, as a complete drill does.
  it("rollback again in a state dir whose cgroup setup cgroups are torn down: a drill up elsewhere is named, exit 0", async () => {
    const used = path.join(root, "used");
    mkdirSync(path.join(used, "cgroups"), { recursive: true, mode: 0o700 });
    const r = await runDrill(["--state-dir", used, "--procfs", path.join(root, "proc"), "rollback"], { timeout: 15_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`nothing to do in ${used} (no drill); up from another state dir, not this rollback's to undo:`);
    expect(r.stdout).toContain("fifo-r1");
    expect(r.stderr).not.toMatch(/rollback incomplete/);
    // --name asks for one drill: not here, up elsewhere, is a wrong --state-dir (exit 4), as from a dir drill never used.
    const named = await runDrill(["--state-dir", used, "--procfs", path.join(root, "proc"), "rollback", "--name", "fifo-r1"], { timeout: 15_000 });
    expect(named.exitCode, named.stdout + named.stderr).toBe(4);
  });

  // QA S re-check 1: --queue with no --redis and no drill up in its state dir took 6379, flipped a lever there
  // and exited 0, while the queue was a drill's up from another state dir, still admitting on its own Redis.
  it("rollback --queue of a drill's queue, no --redis, from a state dir with no drill: names that drill and its rollback, exit 4, no Redis touched", async () => {
    const other = path.join(root, "other dir"); // a space: the command to paste names it quoted
    writeFakeDrill(other, "elsw", "eq", "redis://127.0.0.1:1", { runId: "elsw-20260101000000-abcdef" });
    mkdirSync(path.join(root, "proc", "4244"), { recursive: true });
    writeFileSync(path.join(root, "proc", "4244", "stat"), readFileSync("/proc/self/stat", "utf8").replace(/^\d+ /, "4244 "));
    writeFileSync(path.join(root, "proc", "4244", "environ"), `DRILL_RUN_ID=elsw-20260101000000-abcdef\0DRILL_STATE_DIR=${other}\0`);
    const r = await runDrill(["--state-dir", path.join(root, "empty"), "--procfs", path.join(root, "proc"), "rollback", "--queue", "eq"], { timeout: 15_000 });
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stdout).toContain(`FAIL deny-all: not done on redis://127.0.0.1:6379 (the default, no drill being up in ${path.join(root, "empty")}): queue eq is drill elsw's (run elsw-20260101000000-abcdef, state dir ${other}, redis redis://127.0.0.1:1)`);
    expect(r.stderr).toContain(`run that: drill --state-dir '${other}' rollback --name elsw`);
  });
});
