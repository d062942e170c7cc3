import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, runDrill } from "../helpers/cli.js";

const smoke = readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8");

/**
 * A memory limit of 0 and a map no host could hold are bad input: exit 2
 * naming the flag or field, before anything starts (no state, no cgroup).
 * Were: memory.limit_in_bytes 0 with the worker OOM-killed at once and exit 0;
 * a 100T inject accepted, the hog failing "exited 2: bad arguments" mid-drill.
 */
describe("memory max 0 and impossible sizes are exit 2 before anything starts", () => {
  let root: string;
  let stateDir: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-cli-sizes-"));
    stateDir = path.join(root, "state");
  });
  afterAll(async () => {
    // Only does something when a case failed half-way: never leave a drill running.
    if (existsSync(stateDir)) await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    rmSync(root, { recursive: true, force: true });
  });

  const nothingStarted = () => {
    expect(existsSync(stateDir) ? readdirSync(stateDir) : []).toEqual([]);
  };

  it("cgroup setup --memory-max 0", async () => {
    const r = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", "drill-cli-sizes", "--memory-max", "0"]);
    expect(r.exitCode, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^drill: --memory-max: "0" is below one page/);
    nothingStarted();
  });

  it("up --memory-max 0", async () => {
    const r = await runDrill(["--state-dir", stateDir, "up", "--name", "drill-cli-sizes", "--parent", "self", "--memory-max", "0"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^drill: --memory-max: "0" is below one page/);
    nothingStarted();
  });

  it.each([
    ["cgroup.memory_max: 0", smoke.replace("memory_max: 160M", "memory_max: 0"), /cgroup\.memory_max: is below one page/],
    ["inject size 100T", smoke.replace("size: 256M", "size: 100T"), /phases\.2\.inject\.size: is more than this host's RAM \+ swap/],
    ["weights 100T", smoke.replace("weights: 64M", "weights: 100T"), /worker\.weights: is more than this host's RAM \+ swap/],
  ])("up with a drill file's %s", async (_n, text, message) => {
    const file = path.join(root, "bad.yaml");
    writeFileSync(file, text);
    const r = await runDrill(["--state-dir", stateDir, "up", "--drill", file, "--name", "drill-cli-sizes", "--parent", "self"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^drill: ${file.replace(/[.]/g, "\\.")}: `));
    expect(r.stderr).toMatch(message);
    nothingStarted();
  });

  it("inject --size 100T: the same bound as the drill file's, before the hog starts", async () => {
    const r = await runDrill(["--state-dir", stateDir, "inject", "--name", "drill-cli-sizes", "--parent", "self", "--size", "100T"]);
    expect(r.exitCode, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^drill: --size: "100T" is more than this host's RAM \+ swap/);
    nothingStarted();
  });
});
