import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { injectAction } from "../../src/commands/inject.run.js";
import { locatePageToucher } from "../../src/native/pagetoucher.js";
import type { Output } from "../../src/output.js";
import { findOnPath } from "../../src/util/findOnPath.js";
import { realCgroupForFile, realCgroupSkipReason } from "../helpers/cgroupFixtures.js";

const skip = realCgroupSkipReason() ?? (findOnPath("python3", process.env.PATH ?? "") ? null : "python3 is not on PATH");
if (skip) console.warn(`skipping inject with the python fallback: ${skip}`);

/**
 * DESIGN: the C helper, "with a clear error and a marked weak fallback when
 * it cannot build". QA: the worker marks it ("python fallback"), inject said
 * nothing: its outcome read the same from either.
 */
describe.skipIf(skip !== null)("inject with the python fallback page toucher (real cgroup under --parent self)", () => {
  const name = `ifb${process.pid}`;
  const made = realCgroupForFile(name);

  it("says so on stderr before the fill and in --json (page_toucher)", async () => {
    const err: string[] = [];
    const docs: unknown[] = [];
    const output = { out: () => undefined, err: (l: string) => err.push(l), json: (v: unknown) => docs.push(v), document: () => undefined, color: new Chalk({ level: 0 }), isTTY: false } as unknown as Output;
    const globals = { redisUrl: undefined, procfs: "/proc", sysfs: "/sys", stateDir: made.stateDir, json: true, color: false };
    const flags = { name, parent: "self", size: "8M", mode: "anon", hold: "0s", fileDir: "/var/tmp" };
    const report = await injectAction(globals, flags, output, { onSignal: () => () => undefined, locate: () => locatePageToucher({ prefer: "python" }) });
    expect(report.outcome).toBe("packed");
    expect(report.page_toucher).toBe("python-fallback");
    expect(docs).toHaveLength(1);
    expect(docs[0]).toMatchObject({ page_toucher: "python-fallback" });
    expect(err[0]).toMatch(/^drill inject: pages faulted by the python fallback \(.*\): slower per page than the C helper/);
  });
});
