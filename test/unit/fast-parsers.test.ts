import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { OOM_KILL_KEYS, parseFlatKeyed, V1_SWAP_STAT_KEYS } from "../../src/cgroup/memoryFiles.js";
import { parseProcStatCpu } from "../../src/host/cpu.js";
import { scanKeyedCounters } from "../../src/host/keyedCounters.js";
import { parsePsi, parsePsiStrictly, scanUsualPsi } from "../../src/host/psi.js";
import { parseVmstat, SWAP_COUNTER_NAMES } from "../../src/host/vmstat.js";

// The per-sample readers scan in place and hand anything unusual to the strict
// parser: whatever the text, the answer must be the strict parser's.

const keep = (full: ReadonlyMap<string, number>, names: readonly string[]): Map<string, number> =>
  new Map([...full].filter(([name]) => names.includes(name)));

describe("scanKeyedCounters answers what the strict parser answers", () => {
  const vmstatCases: [string, string][] = [
    ["this host's /proc/vmstat", readFileSync("/proc/vmstat", "utf8")],
    ["blanks and CRLF", "\n  pswpin\t3  \n\npswpout 4\r\n"],
    ["none of the names", "nr_free_pages 1\n"],
    ["a bad line", "pswpin 1\npswpout x\n"],
    ["a negative value", "pswpin -1\n"],
    ["a duplicated kept name", "pswpin 1\npswpin 2\n"],
    ["empty", ""],
    ["blank lines only", "\n \n"],
    ["a name that is a prefix of a kept one", "pswp 1\npswpin 2\nworkingset_refault_anon 5\n"],
    ["above 2^53", "pswpin 9007199254740993\n"],
  ];
  it.each(vmstatCases)("vmstat: %s", (_, text) => {
    const strict = parseVmstat(text, "/proc/vmstat");
    const fast = scanKeyedCounters(text, "/proc/vmstat", SWAP_COUNTER_NAMES, parseVmstat);
    expect(fast.ok).toBe(strict.ok);
    if (strict.ok && fast.ok) expect([...fast.value]).toEqual([...keep(strict.value, SWAP_COUNTER_NAMES)]);
    else expect(fast).toEqual(strict);
  });

  it("a name printed twice is only caught among the kept names (the kernel never prints one twice)", () => {
    const text = "nr_free_pages 1\nnr_free_pages 2\npswpin 3\n";
    expect(parseVmstat(text, "/proc/vmstat").ok).toBe(false);
    expect(scanKeyedCounters(text, "/proc/vmstat", SWAP_COUNTER_NAMES, parseVmstat)).toEqual({ ok: true, value: new Map([["pswpin", 3]]) });
  });

  const flatCases: [string, string, readonly string[]][] = [
    ["v1 memory.oom_control", "oom_kill_disable 0\nunder_oom 1\noom_kill 3\n", OOM_KILL_KEYS],
    ["v2 memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", OOM_KILL_KEYS],
    ["v1 memory.stat", "cache 4096\nrss 8192\nswap 0\nhierarchical_memory_limit 9223372036854771712\ntotal_swap 12288\n", V1_SWAP_STAT_KEYS],
    ["a negative value elsewhere (strict allows it)", "low -1\noom_kill 2\n", OOM_KILL_KEYS],
    ["a word for a value", "oom_kill one\n", OOM_KILL_KEYS],
    ["a duplicated key", "oom_kill 1\noom_kill 2\n", OOM_KILL_KEYS],
    ["empty (a valid, empty file)", "", OOM_KILL_KEYS],
  ];
  it.each(flatCases)("flat keyed: %s", (_, text, names) => {
    const strict = parseFlatKeyed(text, "f");
    const fast = scanKeyedCounters(text, "f", names, parseFlatKeyed);
    expect(fast.ok).toBe(strict.ok);
    if (strict.ok && fast.ok) expect([...fast.value]).toEqual([...keep(strict.value, names)]);
    else expect(fast).toEqual(strict);
  });
});

describe("parsePsi's in-place scan", () => {
  const usual = [
    readFileSync("/proc/pressure/memory", "utf8"),
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    "some avg10=100.00 avg60=12.40 avg300=0.01 total=18446744073709551615\n",
    "some avg10=1 avg60=2 avg300=3 total=4", // no newline, integer averages
  ];
  it.each(usual)("takes the kernel's own text and reads the numbers parsePsiStrictly reads: %j", (text) => {
    const fast = scanUsualPsi(text);
    expect(fast).not.toBeNull();
    expect(parsePsi(text, "f")).toEqual(parsePsiStrictly(text, "f"));
    const strict = parsePsiStrictly(text, "f");
    expect(strict.ok && fast).toEqual(strict.ok ? strict.value : null);
  });

  const unusual = [
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=5 extra=1\n", // extra field: strict tolerates
    "  some avg10=0.22 avg60=0.17 avg300=1.11 total=5\n", // leading blanks
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=5\n\n", // blank line
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=5\nirq avg10=0.00\n", // a future line kind
    "some avg10=0.22=55 avg60=0.17 avg300=1.11 total=5\n",
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=5\nsome avg10=0.22 avg60=0.17 avg300=1.11 total=5\n",
    "some avg10=. avg60=0.17 avg300=1.11 total=5\n",
    "some avg10=0.22 avg60=0.17 avg300=1.11 total=5.5\n",
    "some avg10=0.22 avg60=0.17 total=5\n",
    "some avg10=999.00 avg60=0.17 avg300=1.11 total=5\n", // an avg above 100%: strict names it
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", // no some line
    "garbage\n",
    "",
  ];
  it.each(unusual)("leaves anything else to parsePsiStrictly: %j", (text) => {
    expect(scanUsualPsi(text)).toBeNull();
    expect(parsePsi(text, "f")).toEqual(parsePsiStrictly(text, "f"));
  });
});

// QA: a count past what a double holds (Infinity) made every rate from it NaN,
// printed as `NaN%` and written as a JSON null with no `missing` entry; a
// negative oom_kill or swap count was taken as read. Either is unreadable.
describe("a kernel count out of range is an error value, never a number", () => {
  const huge = "9".repeat(400);
  it("PSI total", () => {
    const text = `some avg10=0.00 avg60=0.00 avg300=0.00 total=${huge}\n`;
    expect(scanUsualPsi(text)).toBeNull();
    expect(parsePsi(text, "f")).toMatchObject({ ok: false, file: "f", reason: expect.stringContaining("total out of range") });
  });
  it("/proc/stat's cpu line", () => {
    expect(parseProcStatCpu(`cpu  ${huge} 0 1 100 0 0 0 0 0 0\n`, "f")).toMatchObject({ ok: false, reason: expect.stringContaining("out of range") });
  });
  it("a kept vmstat counter, and not one that is not kept", () => {
    expect(scanKeyedCounters(`pswpin ${huge}\npswpout 0\n`, "f", SWAP_COUNTER_NAMES, parseVmstat)).toMatchObject({ ok: false, reason: expect.stringContaining("pswpin out of range") });
    expect(scanKeyedCounters(`nr_free_pages ${huge}\npswpin 3\n`, "f", SWAP_COUNTER_NAMES, parseVmstat)).toEqual({ ok: true, value: new Map([["pswpin", 3]]) });
  });
  it("a negative or huge oom_kill or swap count", () => {
    expect(scanKeyedCounters("oom_kill -3\n", "f", OOM_KILL_KEYS, parseFlatKeyed)).toMatchObject({ ok: false, reason: expect.stringContaining("oom_kill out of range") });
    expect(scanKeyedCounters(`oom_kill ${huge}\n`, "f", OOM_KILL_KEYS, parseFlatKeyed)).toMatchObject({ ok: false, reason: expect.stringContaining("oom_kill out of range") });
    expect(scanKeyedCounters("cache 1\ntotal_swap -4096\n", "f", V1_SWAP_STAT_KEYS, parseFlatKeyed)).toMatchObject({ ok: false, reason: expect.stringContaining("total_swap out of range") });
  });
});
