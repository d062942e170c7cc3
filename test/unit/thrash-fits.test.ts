import { describe, expect, it } from "vitest";
import { thrashFitsNote } from "../../src/cgroup/hog.js";

const MiB = 1024 * 1024;

// QA: `inject --mode thrash --size 32M` into a 64M cgroup held its file resident and showed stall 0.0 % with nothing said.
describe("thrashFitsNote: a thrash file that fits beside the cgroup's usage is said, once, before the hog starts", () => {
  it("fits: names the size, the limit, the usage and the size that thrashes", () => {
    expect(thrashFitsNote(32 * MiB, 2 * MiB, 64 * MiB)).toBe(
      "the thrash file (32.0MiB) fits under the cgroup's limit (64.0MiB, 2.0MiB in use): its pages stay resident, nothing refaults and the stall stays near 0; a --size above 62.0MiB thrashes",
    );
    expect(thrashFitsNote(62 * MiB, 2 * MiB, 64 * MiB)).not.toBeNull();
  });

  it("does not fit, no limit (max: setup refuses it anyway), or unreadable usage or limit: nothing said", () => {
    expect(thrashFitsNote(63 * MiB, 2 * MiB, 64 * MiB)).toBeNull();
    expect(thrashFitsNote(256 * MiB, 0, 128 * MiB)).toBeNull();
    expect(thrashFitsNote(32 * MiB, 2 * MiB, "max")).toBeNull();
    expect(thrashFitsNote(32 * MiB, null, 64 * MiB)).toBeNull();
    expect(thrashFitsNote(32 * MiB, 2 * MiB, null)).toBeNull();
  });
});
