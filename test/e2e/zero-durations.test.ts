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

// QA: `watch --duration 500ms` (at the default 1s interval) ended at its
// duration before its first sample, which comes one interval after the start:
// exit 0 and nothing printed, as `--duration 0s` did.
describe("a watch --duration shorter than its --interval is exit 2", () => {
  it.each([
    [["--duration", "500ms"], "500ms", "1s"],
    [["--duration", "1s", "--interval", "2s"], "1s", "2s"],
  ])("drill watch %j", async (args, duration, interval) => {
    const r = await runDrill(["--redis", "redis://127.0.0.1:1", "--state-dir", stateDir, "watch", ...args]);
    expect(r.exitCode).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`drill: --duration: ${duration} is shorter than --interval (${interval}): the first sample comes one interval after the start`);
  });
  it("a duration of exactly one interval takes its one sample", async () => {
    const r = await runDrill(["--redis", "redis://127.0.0.1:1", "--state-dir", stateDir, "--json", "watch", "--duration", "1s", "--interval", "1s"]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout.trim().split("\n")).toHaveLength(1);
  });
});
