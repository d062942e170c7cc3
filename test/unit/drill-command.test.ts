import { describe, expect, it } from "vitest";
import { drillCommandAt, drillCommandFor } from "../../src/context.js";
import { teardownCommand } from "../../src/commands/cgroup.run.js";

// The commands drill suggests (a rerun after an interrupt, the next step) are
// copied as typed: they carry every global flag that selects what to act on.
describe("drillCommandAt: the global flags a suggested command needs", () => {
  it("defaults: bare drill", () => {
    expect(drillCommandAt({ stateDir: "/var/lib/drill", sysfs: "/sys", procfs: "/proc" })).toBe("drill");
    expect(drillCommandFor("/var/lib/drill")).toBe("drill");
  });

  it("a fake tree, a state dir and a Redis: each named, in one order", () => {
    expect(drillCommandAt({ stateDir: "/s", sysfs: "/t/sys", procfs: "/t/proc", redisUrl: "redis://127.0.0.1:7000/2" })).toBe(
      "drill --state-dir /s --sysfs /t/sys --procfs /t/proc --redis redis://127.0.0.1:7000/2",
    );
    expect(drillCommandFor("/s")).toBe("drill --state-dir /s");
  });

  it("the password of --redis is never shown; a path with a space or a quote is quoted for the shell", () => {
    expect(drillCommandAt({ stateDir: "/var/lib/drill", redisUrl: "redis://:secret@h:6379" })).toBe("drill --redis 'redis://:***@h:6379'");
    expect(drillCommandAt({ stateDir: "/tmp/my state", sysfs: "/tmp/o'k" })).toBe(`drill --state-dir '/tmp/my state' --sysfs '/tmp/o'\\''k'`);
  });
});

describe("teardownCommand: the teardown an interrupted one says to finish with", () => {
  it("the cgroup's --name and --parent as the shell reads them back (a cgroup name is any but a path's)", () => {
    expect(teardownCommand("drill", "infer", { parent: undefined, force: false })).toBe("drill cgroup teardown --name infer");
    expect(teardownCommand("drill --state-dir /s", "my cg", { parent: "/a b/c", force: true })).toBe("drill --state-dir /s cgroup teardown --name 'my cg' --parent '/a b/c' --force");
  });
});
