import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { buildProgram } from "../../src/cli.js";

/** DESIGN.md's command table and flags, as the defaults commander holds (what --help shows and an action gets). */
function find(path: string[]): Command {
  let command: Command = buildProgram();
  for (const name of path) {
    const next = command.commands.find((c) => c.name() === name);
    if (!next) throw new Error(`no command ${path.join(" ")}`);
    command = next;
  }
  return command;
}

function defaultOf(path: string[], flag: string): unknown {
  const option = find(path).options.find((o) => o.long === flag);
  if (!option) throw new Error(`drill ${path.join(" ")} has no ${flag}`);
  return option.defaultValue;
}

describe("flag defaults are DESIGN.md's", () => {
  it.each([
    [[], "--procfs", "/proc"],
    [[], "--sysfs", "/sys"],
    [[], "--state-dir", "/var/lib/drill"],
    [["cgroup", "setup"], "--memory-max", "2G"],
    [["cgroup", "setup"], "--swap-max", "0"],
    // `inject --size 3G --mode anon|thrash --hold 30s`: the runbook's 3G map, like every other number of the table a default.
    [["inject"], "--size", "3G"],
    [["inject"], "--mode", "anon"],
    [["inject"], "--hold", "30s"],
    [["pack"], "--jobs", "8"],
    [["pack"], "--files", "8"],
    [["pack"], "--prompt-tokens", "24000"],
    [["pack"], "--completion-tokens", "256"],
    [["pack"], "--deadline", "8s"],
    [["pack"], "--upstream-age", "0s"],
    [["pack"], "--queue", "jobs"],
    [["worker"], "--weights", "1G"],
    [["gate"], "--psi-limit", "10"],
    [["gate"], "--psi-rate-limit", "10"],
    [["gate"], "--slack-limit", "1500ms"],
    [["gate"], "--packed-token-limit", "32000"],
    [["gate"], "--retry-host-class", "dedicated"],
    [["watch"], "--interval", "1s"],
  ])("drill %j %s defaults to %j", (path, flag, expected) => {
    expect(defaultOf(path as string[], flag)).toBe(expected);
  });

  // Left out, --since is the run's last 10m up to its end, not `--since 10m` (a window ending now): no default to show.
  it("drill report --since holds no default, its help says the real one", () => {
    const since = find(["report"]).options.find((o) => o.long === "--since");
    expect(since?.defaultValue).toBeUndefined();
    expect(since?.description).toContain("(default: the last 10m of the drill's current run, up to its end)");
  });

  it.each([["cgroup", "setup"], ["cgroup", "status"], ["cgroup", "teardown"], ["inject"], ["worker"], ["watch"], ["gate"]])(
    "drill %s takes --name (default infer) and --parent (default: the hierarchy's root)",
    (...path) => {
      expect(defaultOf(path, "--name")).toBe("infer");
      expect(defaultOf(path, "--parent")).toBeUndefined();
    },
  );

  // QA: only doctor's help said where a cgroup goes without --parent.
  it.each([["doctor"], ["cgroup", "setup"], ["cgroup", "status"], ["cgroup", "teardown"], ["inject"], ["worker"], ["watch"], ["gate"]])(
    "drill %s --help says --parent's default",
    (...path) => {
      expect(find(path).options.find((o) => o.long === "--parent")?.description).toMatch(/\(default: the hierarchy's root\)$/);
    },
  );
});
