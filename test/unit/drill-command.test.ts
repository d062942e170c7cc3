import { describe, expect, it } from "vitest";
import { drillCommandAt, drillCommandFor } from "../../src/context.js";

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
