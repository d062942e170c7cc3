import { afterEach, describe, expect, it } from "vitest";
import { rmSync } from "node:fs";
import path from "node:path";
import { detectLayout, parseProcCgroup, processCgroups, requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup, twinName } from "../../src/cgroup/paths.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

let host: FakeHost | undefined;
afterEach(() => host?.cleanup());

describe("parseProcCgroup", () => {
  it("parses a hybrid host's lines", () => {
    const text = "9:name=systemd:/\n4:memory:/process_api/b4e5d37c\n2:cpu,cpuacct:/x\n0::/\n";
    const lines = parseProcCgroup(text, "/proc/self/cgroup");
    expect(lines.ok).toBe(true);
    if (!lines.ok) return;
    expect(lines.value[1]).toEqual({ hierarchyId: 4, controllers: ["memory"], path: "/process_api/b4e5d37c" });
    expect(lines.value[2]!.controllers).toEqual(["cpu", "cpuacct"]);
    expect(processCgroups(lines.value)).toEqual({ memory: "/process_api/b4e5d37c", unified: "/" });
  });
  it("keeps colons inside the path", () => {
    const lines = parseProcCgroup("0::/user.slice/weird:name\n", "f");
    expect(lines.ok && lines.value[0]!.path).toBe("/user.slice/weird:name");
  });
  it.each(["garbage", "x:memory:/a", "4:memory:relative", ""])("fails on %j", (text) => {
    expect(parseProcCgroup(text, "f").ok).toBe(false);
  });
  it("pure v2 has only the 0:: line", () => {
    const lines = parseProcCgroup("0::/user.slice/session-1.scope\n", "f");
    expect(lines.ok && processCgroups(lines.value)).toEqual({ memory: null, unified: "/user.slice/session-1.scope" });
  });
});

describe("detectLayout on fake trees", () => {
  it.each(["v2", "hybrid", "v1"] as const)("detects %s", (kind) => {
    host = makeFakeHost(kind);
    const layout = detectLayout(host.roots);
    expect(layout.ok && layout.value.kind).toBe(kind);
  });
  it("reports an empty tree with the root named", () => {
    host = makeFakeHost("v1");
    rmSync(path.join(host.cgroupRoot, "memory"), { recursive: true });
    const layout = detectLayout(host.roots);
    expect(layout.ok).toBe(false);
    expect(() => requireLayout(host!.roots)).toThrow(/no usable memory cgroup hierarchy at .*fs\/cgroup/);
  });
});

describe("resolveWorkerCgroup", () => {
  it("v2: --parent self nests under the caller's cgroup; one dir holds everything", () => {
    host = makeFakeHost("v2", { selfPath: "/user.slice/me" });
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "t1", { kind: "self" });
    expect(cg.memory).toBeNull();
    expect(cg.unified!.cgroupPath).toBe("/user.slice/me/t1");
    expect(cg.limits).toBe(cg.unified);
    expect(cg.procsFiles).toEqual([path.join(host.cgroupRoot, "user.slice/me/t1/cgroup.procs")]);
    expect(cg.pressureFile).toBe(path.join(host.cgroupRoot, "user.slice/me/t1/memory.pressure"));
    expect(cg.killFile).toBe(path.join(host.cgroupRoot, "user.slice/me/t1/cgroup.kill"));
  });
  it("v2: default parent is the root", () => {
    host = makeFakeHost("v2");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "infer", { kind: "path", path: "/" });
    expect(cg.unified!.dir).toBe(path.join(host.cgroupRoot, "infer"));
  });
  it("hybrid: v1 memory dir is authoritative, the twin sits under the caller's unified cgroup", () => {
    host = makeFakeHost("hybrid");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "t1", { kind: "self" });
    expect(cg.memory!.dir).toBe(path.join(host.cgroupRoot, "memory/process_api/abc/t1"));
    expect(cg.unified!.dir).toBe(path.join(host.cgroupRoot, "unified", twinName("t1", "/process_api/abc/t1")));
    expect(cg.limits).toBe(cg.memory);
    expect(cg.procsFiles[0]).toBe(path.join(cg.memory!.dir, "cgroup.procs"));
    expect(cg.procsFiles[1]).toBe(path.join(cg.unified!.dir, "cgroup.procs"));
    expect(cg.pressureFile).toBe(path.join(cg.unified!.dir, "memory.pressure"));
  });
  it("hybrid: twins of the same name under different v1 parents do not collide", () => {
    expect(twinName("infer", "/a/infer")).not.toBe(twinName("infer", "/b/infer"));
    expect(twinName("infer", "/a/infer")).toMatch(/^drill-infer-[0-9a-f]{10}$/);
  });
  it("v1: memory only, no PSI, no cgroup.kill", () => {
    host = makeFakeHost("v1");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "infer", { kind: "path", path: "/drills" });
    expect(cg.memory!.cgroupPath).toBe("/drills/infer");
    expect(cg.unified).toBeNull();
    expect(cg.pressureFile).toBeNull();
    expect(cg.killFile).toBeNull();
  });
});
