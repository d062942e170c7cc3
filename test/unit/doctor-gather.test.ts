import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { gatherFacts } from "../../src/doctor/gather.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

const gather = (h: FakeHost) =>
  gatherFacts({ roots: h.roots, parent: { kind: "self" }, redisUrl: undefined, hogDir: h.root, hogBytes: 1024, stateDir: h.stateDir });

describe("doctor's probe cgroup", () => {
  it("hybrid: the probe is drill-doctor-<pid> and its twin drill-doctor-<pid>-<hash>, not drill-drill-doctor-…; both removed", async () => {
    host = makeFakeHost("hybrid");
    const facts = await gather(host);
    const memoryDir = path.join(host.cgroupRoot, "memory", "process_api", "abc", `drill-doctor-${process.pid}`);
    expect(facts.memoryWritable).toMatchObject({ ok: true });
    expect(facts.swapControl.file).toBe(path.join(memoryDir, "memory.memsw.limit_in_bytes"));
    const twin = path.dirname(facts.cgroupPsi.file!);
    expect(path.dirname(twin)).toBe(path.join(host.cgroupRoot, "unified"));
    expect(path.basename(twin)).toMatch(new RegExp(`^drill-doctor-${process.pid}-[0-9a-f]{10}$`));
    expect(facts.cgroupKill.file).toBe(path.join(twin, "cgroup.kill"));
    expect(existsSync(memoryDir) || existsSync(twin)).toBe(false);
    expect(readdirSync(path.join(host.cgroupRoot, "unified")).filter((n) => n.startsWith("drill-"))).toEqual([]);
  });

  it("v2: one probe dir, drill-doctor-<pid>, removed", async () => {
    host = makeFakeHost("v2");
    const facts = await gather(host);
    const dir = path.join(host.cgroupRoot, "process_api", "abc", `drill-doctor-${process.pid}`);
    expect(facts.cgroupPsi.file).toBe(path.join(dir, "memory.pressure"));
    expect(existsSync(dir)).toBe(false);
  });
});
