import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { drillBin, repoRoot, runDrill } from "../helpers/cli.js";

describe("README and --help", () => {
  it("the README's command reference matches --help (regenerate with scripts/readme-reference.mjs --write)", async () => {
    const r = await execa("node", ["scripts/readme-reference.mjs"], { cwd: repoRoot, reject: false });
    expect(r.stderr).toBe("");
    expect(r.exitCode).toBe(0);
  });

  it("--help lists every command of DESIGN.md", async () => {
    const r = await runDrill(["--help"]);
    expect(r.exitCode).toBe(0);
    for (const name of ["doctor", "cgroup", "inject", "pack", "worker", "gate", "watch", "up", "rollback", "report"]) {
      expect(r.stdout).toMatch(new RegExp(`^  ${name}\\b`, "m"));
    }
  });

  it("an unknown flag is exit 2 with the flag named", async () => {
    const r = await runDrill(["doctor", "--no-such-flag"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain("--no-such-flag");
    expect(drillBin).toMatch(/drill\.js$/);
  });
});
