import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/errors.js";
import { cgroupNameProblem, validateCgroupName, validateParent } from "../../src/cgroup/names.js";

describe("cgroup names (RELIABILITY case 1)", () => {
  const refused: Array<[string, string]> = [
    ["..", "relative path component"],
    ["../x", '"/"'],
    ["a/b", '"/"'],
    [".x", 'starts with "."'],
    [".", "relative path component"],
    ["", "empty"],
    ["tasks", "interface file"],
    ["notify_on_release", "interface file"],
    ["release_agent", "interface file"],
    ["cgroup.procs", "cgroup interface file"],
    ["cgroup.kill", "cgroup interface file"],
    ["memory.max", "memory interface file"],
    ["memory.limit_in_bytes", "memory interface file"],
    ["cpu.weight", "cpu interface file"],
    ["x".repeat(300), "longer than 255 bytes"],
    ["é".repeat(128), "longer than 255 bytes"], // 256 bytes in UTF-8
    ["in\nfer", "control character"],
    ["in\u0000fer", "control character"],
    ["in\tfer", "control character"],
    ["in\u007ffer", "control character"],
  ];
  it.each(refused)("refuses %j", (name, why) => {
    expect(cgroupNameProblem(name)).toContain(why);
    expect(() => validateCgroupName(name)).toThrow(UsageError);
    try {
      validateCgroupName(name);
    } catch (err) {
      expect((err as UsageError).exitCode).toBe(2);
      expect((err as UsageError).message).toMatch(/^--name: /);
    }
  });

  it.each(["infer", "t1", "drill-infer", "infer.v2", "memoryhog", "x".repeat(255), "a b"])("accepts %j", (name) => {
    expect(cgroupNameProblem(name)).toBeNull();
    expect(validateCgroupName(name)).toBe(name);
  });
});

describe("--parent", () => {
  it("defaults to the hierarchy root", () => {
    expect(validateParent(undefined)).toEqual({ kind: "path", path: "/" });
    expect(validateParent("/")).toEqual({ kind: "path", path: "/" });
  });
  it("takes self", () => expect(validateParent("self")).toEqual({ kind: "self" }));
  it("normalises paths", () => {
    expect(validateParent("drills/a")).toEqual({ kind: "path", path: "/drills/a" });
    expect(validateParent("/drills/a/")).toEqual({ kind: "path", path: "/drills/a" });
  });
  it.each(["", "/a/../b", "a//b", "/.hidden", "/a/cgroup.procs", "/a/memory.max", "/a\n/b"])("refuses %j with exit 2", (raw) => {
    expect(() => validateParent(raw)).toThrow(UsageError);
  });
});
