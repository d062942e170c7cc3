// QA: a rollback that left its drain pending said "(run drill rollback again)": pasted, that ran on the
// default state dir and said "nothing to roll back", exit 0. Each command in `left` (and on stderr) is
// the rollback as it was run: its state dir, --name and --queue.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { pastedArgv } from "../helpers/pasted.js";

const root = mkdtempSync(path.join(os.tmpdir(), "drill-left-rerun-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("rollback's left: the command that runs it again, as pasted", () => {
  it("a drain pending (its Redis does not answer): --state-dir, --name and --queue as given", async () => {
    const stateDir = path.join(root, "s $X");
    writeFakeDrill(stateDir, "pend", "q2", "redis://127.0.0.1:1");
    const run = await runDrill(["--state-dir", stateDir, "--json", "rollback", "--name", "pend", "--queue", "q2"], { timeout: 60_000 });
    expect(run.exitCode, run.stderr).toBe(4);
    const left = (JSON.parse(run.stdout) as { left: string[] }).left;
    const pending = left.find((l) => l.includes("drain pending"));
    const command = /\(run (drill .*)\)$/.exec(pending ?? "")?.[1];
    expect(command, left.join("\n")).toBeDefined();
    expect(pastedArgv(command!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "pend", "--queue", "q2"]);
    expect(run.stderr).toContain(`(run ${command})`);
    expect(left.join("\n")).not.toMatch(/run drill rollback/);
  });
});
