import { describe, expect, it } from "vitest";
import { countCpuList, vcpusMismatch } from "../../src/host/cpu.js";
import { fail, ok } from "../../src/host/kernelFile.js";

describe("countCpuList (/sys/devices/system/cpu/online)", () => {
  it.each([
    ["0", 1],
    ["0-1\n", 2],
    ["0-3,8-11", 8],
    ["0,2,4-5", 4],
  ])("%j names %d CPUs", (text, count) => expect(countCpuList(text)).toBe(count));

  it.each(["", "\n", "0-", "a-b", "3-1", "0,,1", "0 1"])("%j is not a cpu list: null", (text) => expect(countCpuList(text)).toBeNull());
});

describe("vcpusMismatch", () => {
  it("said only when both are known and differ", () => {
    expect(vcpusMismatch(4, ok(2), "drills/packing.yaml")).toBe(
      "host.vcpus 4 in drills/packing.yaml, this host has 2 online: its thresholds were written for 4 vCPU; if your box differs, rewrite the thresholds, not the story",
    );
    expect(vcpusMismatch(2, ok(2), "d.yaml")).toBeNull();
    expect(vcpusMismatch(undefined, ok(2), "d.yaml")).toBeNull();
    expect(vcpusMismatch(4, fail("/sys/devices/system/cpu/online", "missing"), "d.yaml")).toBeNull();
  });
});
