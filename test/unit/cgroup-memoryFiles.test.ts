import { afterEach, describe, expect, it } from "vitest";
import { chmodSync, rmSync } from "node:fs";
import path from "node:path";
import { parseCounter, parseFlatKeyed, parseLimit, parsePids, readCgroupMemory, readCgroupSwap, readOomKillCount } from "../../src/cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { workerCgroupProbe } from "../../src/gate/workerCgroup.js";
import { makeFakeHost, v1MemoryFiles, v2MemoryFiles, type FakeHost } from "../helpers/cgroupFixtures.js";

let host: FakeHost | undefined;
afterEach(() => host?.cleanup());

describe("memory file parsers", () => {
  it.each([
    ["max\n", "max"],
    ["268435456\n", 268435456],
    ["9223372036854771712\n", "max"],
    ["0\n", 0],
  ] as const)("parseLimit %j", (text, value) => {
    const reading = parseLimit(text, "f");
    expect(reading.ok && reading.value).toBe(value);
  });
  it.each(["", "-1", "12k", "max max"])("parseLimit refuses %j", (text) => expect(parseLimit(text, "f").ok).toBe(false));
  it("parseCounter", () => {
    expect(parseCounter("4571136\n", "f")).toEqual({ ok: true, value: 4571136 });
    expect(parseCounter("", "f").ok).toBe(false);
  });
  it("parseFlatKeyed reads memory.events and oom_control", () => {
    const events = parseFlatKeyed("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", "memory.events");
    expect(events.ok && events.value.get("oom_kill")).toBe(1);
    const oom = parseFlatKeyed("oom_kill_disable 0\nunder_oom 1\noom_kill 3\n", "memory.oom_control");
    expect(oom.ok && oom.value.get("under_oom")).toBe(1);
    expect(parseFlatKeyed("oom_kill 1\noom_kill 2\n", "f").ok).toBe(false);
    expect(parseFlatKeyed("oom_kill one\n", "f").ok).toBe(false);
  });
  it("parsePids", () => {
    expect(parsePids("12\n34\n", "f")).toEqual({ ok: true, value: [12, 34] });
    expect(parsePids("", "f")).toEqual({ ok: true, value: [] });
    expect(parsePids("x\n", "f").ok).toBe(false);
  });
});

describe("readCgroupMemory", () => {
  it("v1: memsw − limit is the swap limit, memory.stat's total_swap the swap in use, oom_kill from oom_control", () => {
    host = makeFakeHost("v1");
    host.cgroup("memory", "/process_api", v1MemoryFiles({ "memory.limit_in_bytes": "134217728\n" }));
    const dir = host.cgroup("memory", "/process_api/t1", v1MemoryFiles({
      "memory.limit_in_bytes": "268435456\n",
      "memory.memsw.limit_in_bytes": "268435456\n",
      "memory.usage_in_bytes": "104857600\n",
      "memory.memsw.usage_in_bytes": "106954752\n",
      "memory.max_usage_in_bytes": "268435456\n",
      "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
      "memory.stat": "cache 1024\nrss 4096\nswap 2097152\ntotal_cache 1024\ntotal_rss 4096\ntotal_swap 2097152\n",
      "memory.failcnt": "77\n",
      "cgroup.procs": "100\n101\n",
    }));
    const m = readCgroupMemory({ version: 1, mount: path.join(host.cgroupRoot, "memory"), cgroupPath: "/process_api/t1", dir });
    expect(m).toMatchObject({
      limit: 268435456,
      effectiveLimit: 134217728,
      effectiveLimitDir: path.join(host.cgroupRoot, "memory/process_api"),
      swapLimit: 0,
      usage: 104857600,
      peak: 268435456,
      swapCurrent: 2097152,
      events: { oom: null, oomKill: 2, underOom: false, failcnt: 77, max: null },
      tasks: [100, 101],
    });
    expect(m.missing).toEqual([]);
  });

  it("v1: swap in use comes from memory.stat total_swap, not the flickering memsw − usage difference", () => {
    host = makeFakeHost("v1");
    const dir = host.cgroup("memory", "/t2", v1MemoryFiles({
      "memory.limit_in_bytes": "268435456\n",
      "memory.memsw.limit_in_bytes": "268435456\n",
      "memory.usage_in_bytes": "104857600\n",
      // read a moment later than usage, in per-CPU batches: 512 KiB apart on a host with no swap
      "memory.memsw.usage_in_bytes": "105381888\n",
      "memory.stat": "cache 1024\nrss 4096\nswap 0\ntotal_cache 1024\ntotal_rss 4096\ntotal_swap 0\n",
    }));
    const m = readCgroupMemory({ version: 1, mount: path.join(host.cgroupRoot, "memory"), cgroupPath: "/t2", dir });
    expect(m.swapCurrent).toBe(0);
  });

  it.each([
    ["no swap line in memory.stat", { "memory.stat": "cache 1024\nrss 4096\n" }, "no swap line (swap accounting off)"],
    ["memory.stat unreadable", { "memory.stat": null }, "missing"],
  ] as const)("v1, %s: swap in use is null with its file in missing, never memsw usage − usage", (_name, files, reason) => {
    host = makeFakeHost("v1");
    const all: Record<string, string> = v1MemoryFiles({
      "memory.limit_in_bytes": "268435456\n",
      "memory.memsw.limit_in_bytes": "268435456\n",
      "memory.usage_in_bytes": "104857600\n",
      "memory.memsw.usage_in_bytes": "106954752\n", // 2 MiB apart: the flicker, or real swap; memsw cannot tell
    });
    for (const [name, text] of Object.entries(files)) {
      if (text === null) delete all[name];
      else all[name] = text;
    }
    const limits = { version: 1 as const, mount: path.join(host.cgroupRoot, "memory"), cgroupPath: "/t3", dir: host.cgroup("memory", "/t3", all) };
    const swap = readCgroupSwap(limits);
    expect(swap).toMatchObject({ swapLimit: 0, swapCurrent: null });
    expect(swap.missing).toContainEqual({ file: path.join(limits.dir, "memory.stat"), reason: expect.stringContaining(reason) });
    expect(readCgroupMemory(limits).swapCurrent).toBeNull();
    // The gate's probe: no swap in use read, so no swap leak (a reject_host_pressure) made up from memsw.
    const probe = workerCgroupProbe({ name: "t3", layout: "v1", memory: limits, unified: null, limits, procsFiles: [], pressureFile: null, killFile: null, dirs: [limits] } satisfies WorkerCgroup);
    expect(probe()).toEqual({ pressure: null, swapLeak: false });
  });

  it("v1: a parent with use_hierarchy=0 does not limit its child", () => {
    host = makeFakeHost("v1");
    host.cgroup("memory", "/p", v1MemoryFiles({ "memory.limit_in_bytes": "1048576\n", "memory.use_hierarchy": "0\n" }));
    const dir = host.cgroup("memory", "/p/t1", v1MemoryFiles({ "memory.limit_in_bytes": "268435456\n" }));
    const m = readCgroupMemory({ version: 1, mount: path.join(host.cgroupRoot, "memory"), cgroupPath: "/p/t1", dir });
    expect(m.effectiveLimit).toBe(268435456);
  });

  it("v2: memory.events, swap files, max limit", () => {
    host = makeFakeHost("v2");
    const dir = host.cgroup("", "/t1", v2MemoryFiles({
      "memory.max": "268435456\n",
      "memory.swap.max": "0\n",
      "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
    }));
    const m = readCgroupMemory({ version: 2, mount: host.cgroupRoot, cgroupPath: "/t1", dir });
    expect(m).toMatchObject({ limit: 268435456, effectiveLimit: 268435456, swapLimit: 0, swapCurrent: 0, events: { oom: 1, oomKill: 1, max: 12, underOom: null, failcnt: null } });
    expect(readOomKillCount({ version: 2, mount: host.cgroupRoot, cgroupPath: "/t1", dir })).toEqual({ ok: true, value: 1 });
  });

  // QA: an ancestor's memory.max "abc" was skipped as if it were max: cgroup status said
  // effective_limit "max" with nothing missing.
  it("v2: an ancestor's limit that does not read leaves the effective limit null, with that file in missing", () => {
    host = makeFakeHost("v2", { selfPath: "/p" });
    host.cgroup("", "/p", v2MemoryFiles({ "memory.max": "abc\n" }));
    const dir = host.cgroup("", "/p/t1", v2MemoryFiles({ "memory.max": "max\n" }));
    const m = readCgroupMemory({ version: 2, mount: host.cgroupRoot, cgroupPath: "/p/t1", dir });
    expect(m).toMatchObject({ limit: "max", effectiveLimit: null, effectiveLimitDir: null });
    expect(m.missing).toEqual([{ file: path.join(host.cgroupRoot, "p", "memory.max"), reason: 'not a limit: "abc"' }]);
  });

  // QA: v1 listed memory.limit_in_bytes twice (read for the limit, and again for memsw − limit).
  it("v1: an own limit file that does not read is one missing entry", () => {
    host = makeFakeHost("v1");
    const dir = host.cgroup("memory", "/t4", v1MemoryFiles({ "memory.limit_in_bytes": "abc\n", "memory.stat": "rss 4096\nswap 0\ntotal_rss 4096\ntotal_swap 0\n" }));
    const m = readCgroupMemory({ version: 1, mount: path.join(host.cgroupRoot, "memory"), cgroupPath: "/t4", dir });
    expect(m).toMatchObject({ limit: null, effectiveLimit: null, swapLimit: null });
    expect(m.missing).toEqual([{ file: path.join(dir, "memory.limit_in_bytes"), reason: 'not a limit: "abc"' }]);
  });

  it("unreadable or missing files are null with the file named, never 0", () => {
    host = makeFakeHost("v2");
    const dir = host.cgroup("", "/t1", v2MemoryFiles({ "memory.current": "garbage\n" }));
    rmSync(path.join(dir, "memory.peak"));
    rmSync(path.join(dir, "memory.events"));
    const m = readCgroupMemory({ version: 2, mount: host.cgroupRoot, cgroupPath: "/t1", dir });
    expect(m.usage).toBeNull();
    expect(m.peak).toBeNull();
    expect(m.events.oomKill).toBeNull();
    const files = m.missing.map((x) => path.basename(x.file));
    expect(files).toEqual(expect.arrayContaining(["memory.current", "memory.peak", "memory.events"]));
    expect(m.missing.find((x) => x.file.endsWith("memory.peak"))!.reason).toBe("missing");
  });

  const isRoot = process.getuid?.() === 0;
  if (isRoot) console.warn("skipping the EACCES read case: running as root, every file is readable");
  it.skipIf(isRoot)("EACCES is null + missing (non-root)", () => {
    host = makeFakeHost("v2");
    const dir = host.cgroup("", "/t1", v2MemoryFiles());
    chmodSync(path.join(dir, "memory.current"), 0);
    const m = readCgroupMemory({ version: 2, mount: host.cgroupRoot, cgroupPath: "/t1", dir });
    expect(m.usage).toBeNull();
  });
});
