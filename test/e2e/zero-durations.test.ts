import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";

// A zero run, idle or look-back time is a typo, not a request: before, `watch
// --duration 0s` exited 0 with no sample and `report --since 0s` reported an
// empty window. Refused before any connection (the Redis URL is a closed port).
const stateDir = mkdtempSync(path.join(tmpdir(), "drill-zero-"));
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

describe("zero durations are exit 2 naming the flag", () => {
  it.each([
    [["watch", "--duration", "0s"], "--duration"],
    [["gate", "--duration", "0ms"], "--duration"],
    [["gate", "--idle-exit", "0s"], "--idle-exit"],
    [["worker", "--idle-exit", "0s"], "--idle-exit"],
    [["report", "--since", "0s"], "--since"],
    [["pack", "--deadline", "0s"], "--deadline"],
  ])("drill %j", async (args, flag) => {
    const r = await runDrill(["--redis", "redis://127.0.0.1:1", "--state-dir", stateDir, ...args]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain(`drill: ${flag}: "${args[2]}" must be more than 0`);
  });
});
