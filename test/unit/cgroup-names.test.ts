import path from "node:path";
import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/errors.js";
import { cgroupNameProblem, validateCgroupName, validateParent } from "../../src/cgroup/names.js";
import { workerCgroupAt } from "../../src/cgroup/paths.js";
import { markerFile, newHogRecordFile } from "../../src/cgroup/stateFiles.js";

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
    ["irq.pressure", "irq interface file"],
    ["x".repeat(300), "longer than 200 bytes"],
    ["x".repeat(226), "longer than 200 bytes"],
    ["x".repeat(201), "longer than 200 bytes"],
    ["é".repeat(101), "longer than 200 bytes"], // 202 bytes in UTF-8
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

  it("an error shows a DEL in the name escaped, as it shows a newline (QA: printed raw, the name looked valid)", () => {
    expect(() => validateCgroupName("qac\u007f")).toThrow('--name: cgroup name "qac\\u007f" contains a control character');
    expect(() => validateCgroupName("qac\n")).toThrow('--name: cgroup name "qac\\n" contains a control character');
    expect(cgroupNameProblem("x".repeat(201))).toBe("is longer than 200 bytes (drill names files after it, and each must fit the kernel's 255-byte limit)");
  });

  it.each(["infer", "t1", "drill-infer", "infer.v2", "memoryhog", "irqbalance", "x".repeat(200), "é".repeat(100), "a b"])("accepts %j", (name) => {
    expect(cgroupNameProblem(name)).toBeNull();
    expect(validateCgroupName(name)).toBe(name);
  });

  it("every file name drill derives from the longest accepted name fits NAME_MAX (255)", () => {
    let longest = 0;
    for (let n = 1; n <= 300; n++) if (cgroupNameProblem("x".repeat(n)) === null) longest = n;
    const name = "x".repeat(longest);
    const hybrid = workerCgroupAt({ kind: "hybrid", memoryMount: "/sys/fs/cgroup/memory", unifiedMount: "/sys/fs/cgroup/unified" }, name, { memory: "/", unified: "/" });
    const maxPid = 4194304; // PID_MAX_LIMIT: the longest pid writeJsonDurably puts in a temp name
    const hogRecord = newHogRecordFile("/var/lib/drill", hybrid);
    const derived = [
      ...hybrid.dirs.map((d) => path.basename(d.dir)), // the name and its unified twin
      markerFile("/var/lib/drill", hybrid),
      `${markerFile("/var/lib/drill", hybrid)}.${maxPid}.tmp`,
      hogRecord,
      `${hogRecord}.${maxPid}.tmp`,
      hogRecord.replace(/\.json$/, ".log"),
      `drill-hog-${name}-0123abcd.bin`, // inject's thrash file
    ].map((f) => path.basename(f));
    expect(derived.filter((file) => Buffer.byteLength(file) > 255)).toEqual([]);
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
  it("takes a component up to NAME_MAX (nothing is derived from a parent's name)", () => {
    expect(validateParent(`/${"p".repeat(255)}`)).toEqual({ kind: "path", path: `/${"p".repeat(255)}` });
  });
  it.each(["", "/a/../b", "a//b", "/.hidden", "/a/cgroup.procs", "/a/memory.max", "/a/irq.pressure", "/a\n/b", `/${"p".repeat(256)}`])("refuses %j with exit 2", (raw) => {
    expect(() => validateParent(raw)).toThrow(UsageError);
  });
});
