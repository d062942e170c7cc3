import { existsSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
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

describe("doctor's state dir", () => {
  it("names where a symlink on its path leads (the dir itself may not exist yet); nothing when there is none", async () => {
    host = makeFakeHost("v2");
    mkdirSync(path.join(host.root, "real"));
    symlinkSync(path.join(host.root, "real"), path.join(host.root, "link"));
    const linked = await gatherFacts({ roots: host.roots, parent: { kind: "self" }, redisUrl: undefined, hogDir: host.root, hogBytes: 1024, stateDir: path.join(host.root, "link", "state") });
    expect(linked.stateDir).toMatchObject({ dir: path.join(host.root, "link", "state"), realDir: path.join(host.root, "real", "state") });
    expect((await gather(host)).stateDir.realDir).toBeUndefined();
  });

  // QA AB 7: doctor passed a state dir up could not write.
  it("writes and removes a probe file, making a state dir not there yet as up would, and leaves nothing behind", async () => {
    host = makeFakeHost("v2");
    const stateDir = path.join(host.root, "fresh", "state");
    const facts = await gatherFacts({ roots: host.roots, parent: { kind: "self" }, redisUrl: undefined, hogDir: host.root, hogBytes: 1024, stateDir });
    expect(facts.stateDir).toMatchObject({ dir: stateDir, notDirectories: [], freeBytes: expect.any(Number) });
    expect(facts.stateDir.writeError).toBeUndefined();
    expect(existsSync(path.join(host.root, "fresh"))).toBe(false);
    expect(readdirSync(host.root)).not.toContain("fresh");
  });

  // QA AB 6: a file named `served` let up start everything; its worker then died writing its record.
  it("names each file standing where drill makes a directory: its records', and up's drill dirs when given", async () => {
    host = makeFakeHost("v2");
    const stateDir = host.stateDir;
    mkdirSync(path.join(stateDir, "smoke"), { recursive: true });
    for (const name of ["served", "hogs", path.join("smoke", "runs")]) writeFileSync(path.join(stateDir, name), "");
    mkdirSync(path.join(stateDir, "cgroups"));
    const facts = await gatherFacts({
      roots: host.roots, parent: { kind: "self" }, redisUrl: undefined, hogDir: host.root, hogBytes: 1024, stateDir,
      drillDirs: [path.join(stateDir, "smoke"), path.join(stateDir, "smoke", "runs")],
    });
    expect(facts.stateDir.notDirectories).toEqual([
      { dir: path.join(stateDir, "hogs"), problem: "not a directory" },
      { dir: path.join(stateDir, "served"), problem: "not a directory" },
      { dir: path.join(stateDir, "smoke", "runs"), problem: "not a directory" },
    ]);
    // The probe file went, and only it: the state dir holds what it held.
    expect(readdirSync(stateDir).sort()).toEqual(["cgroups", "hogs", "served", "smoke"]);
  });
});

describe("doctor's host swap", () => {
  it("names /proc/meminfo when it does not read or has no SwapTotal line, instead of reading as a host with swap", async () => {
    host = makeFakeHost("v2");
    const meminfo = path.join(host.roots.proc("meminfo"));
    let facts = await gather(host);
    expect(facts.hostSwapTotalBytes).toBeNull();
    expect(facts.hostSwapUnknown).toBe(`${meminfo}: missing`);

    mkdirSync(meminfo);
    facts = await gather(host);
    expect(facts.hostSwapUnknown).toMatch(new RegExp(`^${meminfo}: .*directory`));

    host.cleanup();
    host = makeFakeHost("v2");
    writeFileSync(host.roots.proc("meminfo"), "MemTotal:       24000000 kB\n");
    facts = await gather(host);
    expect(facts.hostSwapUnknown).toBe(`no SwapTotal line in ${host.roots.proc("meminfo")}`);

    writeFileSync(host.roots.proc("meminfo"), "MemTotal:       24000000 kB\nSwapTotal:             0 kB\n");
    facts = await gather(host);
    expect(facts).toMatchObject({ hostSwapTotalBytes: 0 });
    expect(facts.hostSwapUnknown).toBeUndefined();
  });
});
