import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readHostMemoryBytes, readMeminfo } from "../../src/host/meminfo.js";
import { cpuUsageBetween, parseProcStatCpu } from "../../src/host/cpu.js";
import { parseProcessStat } from "../../src/host/process.js";
import { parseVmstat, parseVmstatCounters, SWAP_COUNTER_NAMES, swapCounters } from "../../src/host/vmstat.js";

describe("parseVmstat", () => {
  it("parses counters and picks the swap and refault ones (new kernels split refaults)", () => {
    const r = parseVmstat("nr_free_pages 5706440\npswpin 12\npswpout 34\nworkingset_refault_anon 5\nworkingset_refault_file 7\n", "/proc/vmstat");
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(swapCounters(r.value)).toEqual({ pswpin: 12, pswpout: 34, workingsetRefault: 12 });
  });
  it("uses workingset_refault on older kernels", () => {
    const r = parseVmstat("pswpin 0\npswpout 0\nworkingset_refault 99\n", "f");
    expect(r.ok && swapCounters(r.value).workingsetRefault).toBe(99);
  });
  it("reports absent counters as null, not 0", () => {
    const r = parseVmstat("nr_free_pages 1\n", "f");
    expect(r.ok && swapCounters(r.value)).toEqual({ pswpin: null, pswpout: null, workingsetRefault: null });
  });
  it.each([
    ["empty", "", /empty/],
    ["garbage", "hello world\n", /unparseable/],
    ["negative", "pswpin -1\n", /unparseable/],
    ["duplicate", "pswpin 1\npswpin 2\n", /duplicated counter pswpin/],
  ])("rejects %s", (_n, text, reason) => {
    const r = parseVmstat(text, "/proc/vmstat");
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(reason);
  });
});

describe("parseVmstatCounters (the sidecar's per-sample reader)", () => {
  const host = "nr_free_pages 5706440\npswpin 12\npswpout 34\nworkingset_refault_anon 5\nworkingset_refault_file 7\npgfault 9007199254740993\n";
  it("keeps only the named counters, with the values parseVmstat gives", () => {
    const fast = parseVmstatCounters(host, "/proc/vmstat", SWAP_COUNTER_NAMES);
    const full = parseVmstat(host, "/proc/vmstat");
    expect(fast.ok && full.ok).toBe(true);
    if (!fast.ok || !full.ok) return;
    expect([...fast.value.keys()]).toEqual(["pswpin", "pswpout", "workingset_refault_anon", "workingset_refault_file"]);
    expect(swapCounters(fast.value)).toEqual(swapCounters(full.value));
  });
  it("accepts what parseVmstat accepts (blank lines, padding, tabs)", () => {
    const r = parseVmstatCounters("\n  pswpin\t3  \n\npswpout 4\r\n", "f", SWAP_COUNTER_NAMES);
    expect(r.ok && Object.fromEntries(r.value)).toEqual({ pswpin: 3, pswpout: 4 });
  });
  it("reports absent counters as null, not 0", () => {
    const r = parseVmstatCounters("nr_free_pages 1\n", "f", SWAP_COUNTER_NAMES);
    expect(r.ok && swapCounters(r.value)).toEqual({ pswpin: null, pswpout: null, workingsetRefault: null });
  });
  it.each([
    ["empty", "", /empty/],
    ["blank", "\n \n", /empty/],
    ["garbage", "hello world\n", /unparseable line "hello world"/],
    ["garbage in a counter it does not keep", "pswpin 1\nnr_free_pages 12x\n", /unparseable line "nr_free_pages 12x"/],
    ["negative", "pswpin -1\n", /unparseable/],
    ["a name alone", "pswpin\n", /unparseable/],
    ["upper case", "PSWPIN 1\n", /unparseable/],
    ["duplicate", "pswpin 1\npswpin 2\n", /duplicated counter pswpin/],
  ])("rejects %s like parseVmstat", (_n, text, reason) => {
    const r = parseVmstatCounters(text, "/proc/vmstat", SWAP_COUNTER_NAMES);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(reason);
  });
});

describe("parseProcStatCpu / cpuUsageBetween", () => {
  const line = (idle: number, iowait: number) => `cpu  100 0 100 ${idle} ${iowait} 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n`;
  it("computes idle and iowait apart", () => {
    const a = parseProcStatCpu(line(1000, 0), "/proc/stat");
    const b = parseProcStatCpu("cpu  150 0 150 1080 20 0 0 0 0 0\n", "/proc/stat");
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    const usage = cpuUsageBetween(a.value, b.value);
    expect(usage?.idlePct).toBeCloseTo(40);
    expect(usage?.iowaitPct).toBeCloseTo(10);
  });
  it("iowait going back (proc(5) allows it) is 0 iowait, and idle is still computed", () => {
    const a = parseProcStatCpu("cpu  1000 0 1000 5000 300 0 0 0 0 0\n", "/proc/stat");
    const b = parseProcStatCpu("cpu  1100 0 1100 5100 295 0 0 0 0 0\n", "/proc/stat");
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    const usage = cpuUsageBetween(a.value, b.value);
    expect(usage?.idlePct).toBeCloseTo((100 / 295) * 100);
    expect(usage?.iowaitPct).toBe(0);
  });
  it("is null when no time passed", () => {
    const a = parseProcStatCpu(line(1000, 0), "f");
    expect(a.ok && cpuUsageBetween(a.value, a.value)).toBeNull();
  });
  it.each([
    ["no cpu line", "intr 1 2 3\n"],
    ["too few fields", "cpu  1 2\n"],
    ["garbage", "cpu  a b c d\n"],
  ])("rejects %s", (_n, text) => {
    expect(parseProcStatCpu(text, "/proc/stat").ok).toBe(false);
  });
});

describe("parseProcessStat", () => {
  const tail = "S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 100";
  it("reads pid, comm, state, ppid and start time (field 22)", () => {
    const r = parseProcessStat(`4242 (node) ${tail}\n`, "/proc/4242/stat");
    expect(r).toEqual({ ok: true, value: { pid: 4242, comm: "node", state: "S", ppid: 1, startTime: 987654 } });
  });
  it("handles names with spaces and parentheses (split at the last paren)", () => {
    const r = parseProcessStat(`77 (a) R 1 (b c) ${tail}\n`, "f");
    expect(r.ok && r.value.comm).toBe("a) R 1 (b c");
    expect(r.ok && r.value.startTime).toBe(987654);
  });
  it.each([
    ["empty", ""],
    ["no parens", "4242 node S 1"],
    ["truncated", "4242 (node) S 1 2 3"],
    ["bad pid", "x (node) " + tail],
  ])("rejects %s", (_n, text) => {
    expect(parseProcessStat(text, "f").ok).toBe(false);
  });
});

describe("readMeminfo", () => {
  const procWith = (text: string | null): HostRoots => {
    const root = mkdtempSync(path.join(tmpdir(), "drill-meminfo-"));
    cleanup.push(root);
    if (text !== null) writeFileSync(path.join(root, "meminfo"), text);
    return new HostRoots(root, root);
  };
  const cleanup: string[] = [];
  afterAll(() => {
    for (const dir of cleanup) rmSync(dir, { recursive: true, force: true });
  });

  it("reads MemTotal and SwapTotal in bytes; the host bound is their sum", () => {
    const roots = procWith("MemTotal:       24576000 kB\nMemFree:        20000000 kB\nSwapTotal:        1024 kB\n");
    expect(readMeminfo(roots)).toEqual({ memTotalBytes: 24576000 * 1024, swapTotalBytes: 1024 * 1024 });
    expect(readHostMemoryBytes(roots)).toBe((24576000 + 1024) * 1024);
  });

  it("an absent field is null, an unreadable file null: never a guessed 0", () => {
    const noSwap = procWith("MemTotal:       1024 kB\n");
    expect(readMeminfo(noSwap)).toEqual({ memTotalBytes: 1024 * 1024, swapTotalBytes: null });
    expect(readHostMemoryBytes(noSwap)).toBe(1024 * 1024);
    expect(readMeminfo(procWith(null))).toBeNull();
    expect(readHostMemoryBytes(procWith("SwapTotal: 0 kB\n"))).toBeNull();
  });
});
