import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, runDrill } from "../helpers/cli.js";

const smoke = readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8");
const NOTE = "note: cgroup.memory_max 32.0MiB is below worker.weights 64.0MiB: the worker reclaims from its first token (intended for a thrash rehearsal)";

/**
 * A memory_max below the worker's weights is a real scenario (the worker
 * thrashes on its own weights), so up allows it, but says so in one line
 * before the drill starts. Run against an empty --sysfs: doctor refuses
 * (exit 3) right after the plan lines, before anything is created.
 */
describe("drill up: memory_max below the worker's weights is said, not refused", () => {
  let root = "";
  let sysfs = "";
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-reclaim-note-"));
    sysfs = path.join(root, "sys");
    mkdirSync(sysfs);
    writeFileSync(path.join(root, "tight.yaml"), smoke.replace("memory_max: 160M", "memory_max: 32M"));
    writeFileSync(path.join(root, "smoke.yaml"), smoke);
  });
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true });
  });

  const up = (stateDir: string, file: string, options: { json?: boolean; flags?: string[] } = {}) =>
    runDrill([
      "--sysfs", sysfs, "--state-dir", path.join(root, stateDir), ...(options.json ? ["--json"] : []),
      "up", "--drill", path.join(root, file), "--parent", "self", "--name", "reclaimnotecg", "--file-dir", root, ...(options.flags ?? []),
    ]);

  it("one note line before doctor, and the exit code a drill without it gets", async () => {
    const tight = await up("tight", "tight.yaml");
    const fits = await up("fits", "smoke.yaml");
    expect(fits.exitCode, fits.stdout + fits.stderr).toBe(3);
    expect(tight.exitCode, tight.stdout + tight.stderr).toBe(fits.exitCode);
    const lines = tight.stdout.split("\n");
    expect(lines.filter((l) => l.startsWith("note:"))).toEqual([NOTE]);
    expect(lines.indexOf(NOTE)).toBeLessThan(lines.indexOf("doctor: checking the host"));
    expect(fits.stdout).not.toContain("note:");
    expect(existsSync(path.join(root, "tight", "smoke")), "state written for a drill that never started").toBe(false);
  });

  it("--json: the note is on stderr with up's other plan lines; stdout stays up's one document", async () => {
    const r = await up("json", "tight.yaml", { json: true });
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr.split("\n").filter((l) => l.startsWith("note:"))).toEqual([NOTE]);
    expect(JSON.parse(r.stdout)).toMatchObject({ name: "smoke", verdict: "refused" });
  });

  it("--detach says it before it returns, and the background up's log has it too", async () => {
    const r = await up("detach", "tight.yaml", { flags: ["--detach"] });
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout.split("\n").filter((l) => l.startsWith("note:"))).toEqual([NOTE]);
    expect(readFileSync(path.join(root, "detach", "smoke-up.log"), "utf8")).toContain(NOTE);
  });

  it("an --memory-max below the weights is named as the flag", async () => {
    const r = await up("flag", "smoke.yaml", { flags: ["--memory-max", "32M"] });
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout).toContain("note: --memory-max 32.0MiB is below worker.weights 64.0MiB: ");
  });

  it("a drill file without a description: its first line names the file, with no empty description before it", async () => {
    const bare = smoke.replace(/^description:.*\n/m, "");
    expect(bare).not.toContain("description:");
    writeFileSync(path.join(root, "bare.yaml"), bare);
    const r = await up("bare", "bare.yaml");
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout.split("\n")[0]).toBe(`drill smoke: ${path.join(root, "bare.yaml")}; every number below is a lab expectation from a declared drill, not observed production`);
  });
});
