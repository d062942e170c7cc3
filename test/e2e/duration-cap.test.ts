import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";

// Past 24.8 days (2^31 ms) Node fires a timer at once: before the cap, `gate
// --duration 600h` stopped as it started and `watch --interval 600h` sampled
// back to back, both exit 0. Every timer flag now stops at 7 days, before
// anything starts. Port 1 is closed: nothing here may reach a Redis.
const NO_REDIS = ["--redis", "redis://127.0.0.1:1"];

describe("durations past 7 days: exit 2 naming the flag, nothing started", () => {
  let stateDir: string;
  beforeAll(() => {
    stateDir = mkdtempSync(path.join(tmpdir(), "drill-duration-cap-"));
  });
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  it.each([
    [["watch", "--count", "3", "--interval", "600h", "--json"], /--interval: "600h" must be at most 168h/],
    [["watch", "--duration", "169h"], /--duration: "169h" must be at most 168h/],
    [["gate", "--duration", "600h"], /--duration: "600h" must be at most 168h/],
    [["gate", "--pressure-clear", "10081m"], /--pressure-clear: "10081m" must be at most 168h/],
    [["worker", "--duration", "200h"], /--duration: "200h" must be at most 168h/],
    [["inject", "--mode", "anon", "--size", "64M", "--hold", "200h"], /--hold: "200h" must be at most 168h/],
    [["pack", "--prompt-tokens", "100", "--deadline", "200h"], /--deadline/],
    [["up", "--duration", "200h"], /--duration: "200h" must be at most 168h/],
  ])("drill %j", async (args, message) => {
    const r = await runDrill(["--state-dir", stateDir, ...NO_REDIS, ...args]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe("");
    expect(readdirSync(stateDir)).toEqual([]);
  });

  it("report --since looks back, not a timer: 30 days is a window, not an error", async () => {
    const r = await runDrill(["--state-dir", stateDir, ...NO_REDIS, "report", "--since", "720h"]);
    expect(r.stderr).not.toMatch(/--since/);
  });

  it.each([
    ["99999999h", /--since: "99999999h" must be at most 87600h/],
    ["9999999999999h", /--since: "9999999999999h" is too large \(at most 87600h\)/],
  ])("report --since %s: a window starting before year 0 is refused, exit 2, naming the cap", async (since, message) => {
    const r = await runDrill(["--state-dir", stateDir, ...NO_REDIS, "report", "--since", since]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe("");
  });
});
