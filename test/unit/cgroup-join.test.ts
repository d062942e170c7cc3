import { afterAll, afterEach, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HOG_OOM_SCORE_ADJ, JOIN_FAILED_EXIT, joinArgv, joinedUnlessGone, spawnInCgroup } from "../../src/cgroup/join.js";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { makeFakeHost } from "../helpers/cgroupFixtures.js";
import type { UsageError } from "../../src/errors.js";
import { classifyHogExit, samplePhase, summarizeStall, checkThrashDir, type StallSample } from "../../src/cgroup/hog.js";

let dir = "";
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function run(child: ReturnType<typeof spawnInCgroup>): Promise<{ code: number | null; out: string; err: string }> {
  let out = "";
  let err = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, out, err })));
}

describe("join shim", () => {
  it("passes paths and argv as positional parameters, never in the script", () => {
    const argv = joinArgv(["/a/$(reboot)/cgroup.procs", "/b/cgroup.procs"], "/bin/echo", ["; rm -rf /", "x"]);
    expect(argv[1]).not.toContain("reboot");
    expect(argv.slice(2)).toEqual(["drill-join", "2", "/a/$(reboot)/cgroup.procs", "/b/cgroup.procs", "/bin/echo", "; rm -rf /", "x"]);
  });

  it("writes its pid to every procs file before exec; the program keeps that pid", async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-join-"));
    const files = [path.join(dir, "v1 procs"), path.join(dir, "twin'procs")];
    for (const f of files) writeFileSync(f, "");
    // The exec'd program reads the files: they already hold its own pid.
    const child = spawnInCgroup({ procsFiles: files }, "/bin/sh", ["-c", 'echo "$$"; cat "$1" "$2"', "prog", ...files], { stdio: ["ignore", "pipe", "pipe"] });
    const { code, out } = await run(child);
    expect(code).toBe(0);
    const [self, first, second] = out.trim().split("\n");
    expect(self).toBe(String(child.pid));
    expect(first).toBe(self);
    expect(second).toBe(self);
    expect(readFileSync(files[0]!, "utf8").trim()).toBe(String(child.pid));
  });

  // QA: at 96M the OOM killer took the Node worker over a 192M anon hog still filling.
  it("with an oom_score_adj, the program starts with it (the hog: the OOM killer's first pick), joined as before", async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-join-"));
    const files = [path.join(dir, "procs")];
    writeFileSync(files[0]!, "");
    expect(joinArgv(files, "/bin/true", [], HOG_OOM_SCORE_ADJ).slice(2)).toEqual(["drill-join", "1000", "1", files[0], "/bin/true"]);
    const child = spawnInCgroup({ procsFiles: files }, "/bin/sh", ["-c", 'cat "/proc/$$/oom_score_adj"'], { stdio: ["ignore", "pipe", "pipe"] }, HOG_OOM_SCORE_ADJ);
    const { code, out, err } = await run(child);
    expect(code, err).toBe(0);
    expect(out.trim()).toBe("1000");
    expect(readFileSync(files[0]!, "utf8").trim()).toBe(String(child.pid));
    expect(() => joinArgv(files, "/bin/true", [], 1001)).toThrow(RangeError);
  });

  it("exits 125 naming the file when a join fails; the program never runs", async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-join-"));
    const marker = path.join(dir, "ran");
    const child = spawnInCgroup({ procsFiles: [path.join(dir, "missing", "cgroup.procs")] }, "/bin/touch", [marker], { stdio: ["ignore", "pipe", "pipe"] });
    const { code, err } = await run(child);
    expect(code).toBe(JOIN_FAILED_EXIT);
    expect(err).toContain(path.join(dir, "missing", "cgroup.procs"));
    expect(() => readFileSync(marker)).toThrow();
  });
});

describe("hog outcome", () => {
  const base = { code: null, signal: null, packedSeen: false, interrupted: false, oomKillBefore: 0, oomKillAfter: 0 } as const;
  it.each([
    ["SIGKILL and oom_kill rose", { ...base, signal: "SIGKILL", oomKillAfter: 1 }, "oom_killed"],
    // QA: a rollback's stop of the hog was written "failed".
    ["SIGKILL, oom_kill flat (someone else killed it)", { ...base, signal: "SIGKILL" }, "stopped"],
    ["exit 143: SIGTERM from outside, file unlinked", { ...base, code: 143 }, "stopped"],
    ["exit 130: SIGINT to the hog alone", { ...base, code: 130 }, "stopped"],
    ["killed by SIGTERM before its handler", { ...base, signal: "SIGTERM" }, "stopped"],
    // QA: a crash is the hog failing, not a stop from outside.
    ["SIGSEGV", { ...base, signal: "SIGSEGV" }, "failed"],
    ["SIGBUS (the thrash file's mapping)", { ...base, signal: "SIGBUS" }, "failed"],
    ["SIGUSR1", { ...base, signal: "SIGUSR1" }, "failed"],
    ["exit 1: the hog's own error", { ...base, code: 1 }, "failed"],
    ["SIGKILL, oom_kill unreadable", { ...base, signal: "SIGKILL", oomKillAfter: null }, "failed"],
    ["exit 0 after packed", { ...base, code: 0, packedSeen: true }, "packed"],
    ["exit 0 without packed", { ...base, code: 0 }, "failed"],
    ["interrupted wins", { ...base, signal: "SIGKILL", oomKillAfter: 1, interrupted: true }, "interrupted"],
    ["join failed", { ...base, code: 125 }, "failed"],
  ] as const)("%s", (_label, facts, outcome) => expect(classifyHogExit(facts)).toBe(outcome));

  it("summarizes the hold's stall rates only", () => {
    const s = (phase: "fill" | "hold", stallPct: number | null): StallSample => ({ tMs: 0, phase, touchedBytes: 0, cgUsageBytes: 0, stallPct });
    expect(summarizeStall([s("fill", 90), s("hold", 4), s("hold", 8), s("hold", 12), s("hold", null)])).toEqual({
      holdSeconds: 3,
      holdMedianPct: 8,
      holdMaxPct: 12,
      holdSecondsOver: 2,
      thresholdPct: 5,
    });
  });

  it("a hold second is one held from its start: the second the filling ended in is fill (an 8 s hold counted 9)", () => {
    // Packed 2.5 s in: the sample over [2 s, 3 s) is still filling, the one over [3 s, 4 s) holds.
    expect(samplePhase(2500, 2000)).toBe("fill");
    expect(samplePhase(2500, 3000)).toBe("hold");
    expect(samplePhase(2500, 2500)).toBe("hold");
    expect(samplePhase(null, 9000)).toBe("fill");
  });

  it("refuses a relative --file-dir", () => expect(() => checkThrashDir("var/tmp", 1)).toThrow(/absolute/));
  it("refuses a --file-dir on a kernel filesystem as that, exit 2, not as a disk with 0B free (QA)", () => {
    for (const dir of ["/proc", "/sys/fs/cgroup/memory"]) {
      let thrown: unknown = null;
      try {
        checkThrashDir(dir, 1);
      } catch (err) {
        thrown = err;
      }
      expect((thrown as UsageError).exitCode, dir).toBe(2);
      expect((thrown as Error).message).toBe(`--file-dir: ${dir} is on a kernel filesystem (procfs, sysfs, cgroupfs), where no file can be made (under cgroupfs a directory is a cgroup); give a directory on a disk filesystem such as /var/tmp`);
    }
  });
});

describe("joinedUnlessGone: the hog after its first word", () => {
  const host = makeFakeHost("v2");
  afterAll(() => host.cleanup());
  const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "joinhog", { kind: "self" });
  const place = (pid: number, cgroupLine: string | null, startTime: number | null): void => {
    const dir = path.join(host.procfs, String(pid));
    mkdirSync(dir, { recursive: true });
    if (cgroupLine !== null) writeFileSync(path.join(dir, "cgroup"), cgroupLine);
    // Field 22 of stat is the start time.
    if (startTime !== null) writeFileSync(path.join(dir, "stat"), `${pid} (pagetoucher) S 1 ${Array.from({ length: 17 }, () => "0").join(" ")} ${startTime} 0 0 0\n`);
  };

  it("inside every dir: true", () => {
    place(5001, `0::${cg.limits.cgroupPath}\n`, 77);
    expect(joinedUnlessGone(host.roots, { pid: 5001, startTime: 77 }, cg)).toBe(true);
  });
  it("running elsewhere: false", () => {
    place(5002, "0::/elsewhere\n", 78);
    expect(joinedUnlessGone(host.roots, { pid: 5002, startTime: 78 }, cg)).toBe(false);
  });
  it("gone before it could be looked at (an OOM kill within ms), or its pid now another's: null, not false (QA)", () => {
    expect(joinedUnlessGone(host.roots, { pid: 5003, startTime: 79 }, cg)).toBeNull();
    place(5004, "0::/elsewhere\n", 99);
    expect(joinedUnlessGone(host.roots, { pid: 5004, startTime: 80 }, cg)).toBeNull();
  });
});
