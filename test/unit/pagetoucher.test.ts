import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DrillError, UsageError } from "../../src/errors.js";
import { oomKillRose } from "../../src/cgroup/hog.js";
import {
  anonCommand,
  describePageToucherExit,
  findPackageRoot,
  joinCgroupsFirst,
  locatePageToucher,
  parsePageToucherLine,
  serveCommand,
  thrashCommand,
  WeightsToucher,
  type PageToucherImpl,
} from "../../src/native/pagetoucher.js";

const native: PageToucherImpl = { kind: "native", binary: "/opt/drill/native/build/pagetoucher" };
const python: PageToucherImpl = { kind: "python", python: "/usr/bin/python3", script: "/opt/drill/native/pagetoucher.py" };

describe("argv builders", () => {
  it("anon: bytes and ms, lifetime defaults to hold + 5 min", () => {
    expect(anonCommand(native, { sizeBytes: 3 * 1024 ** 3, holdMs: 30_000 })).toEqual({
      file: "/opt/drill/native/build/pagetoucher",
      args: ["anon", "--size", "3221225472", "--hold-ms", "30000", "--max-lifetime-ms", "330000"],
      fallback: false,
    });
  });

  it("the longest drill hold (7 days) gets its lifetime: 5 min past the helper's old 7-day cap", () => {
    const args = anonCommand(native, { sizeBytes: 4096, holdMs: 7 * 86_400_000 }).args;
    expect(args.slice(-2)).toEqual(["--max-lifetime-ms", String(7 * 86_400_000 + 300_000)]);
  });

  it("thrash: defaults to random order, normal advice; seed only when given", () => {
    const cmd = thrashCommand(native, { file: "/var/tmp/hog", sizeBytes: 256 << 20, holdMs: 10_000 });
    expect(cmd.args).toEqual([
      "thrash", "--file", "/var/tmp/hog", "--size", "268435456", "--hold-ms", "10000",
      "--order", "random", "--advice", "normal", "--max-lifetime-ms", "310000",
    ]);
    const seeded = thrashCommand(native, { file: "/var/tmp/hog", sizeBytes: 4096, holdMs: 0, order: "seq", advice: "random", seed: 7, maxLifetimeMs: 1000 });
    expect(seeded.args).toEqual([
      "thrash", "--file", "/var/tmp/hog", "--size", "4096", "--hold-ms", "0",
      "--order", "seq", "--advice", "random", "--max-lifetime-ms", "1000", "--seed", "7",
    ]);
  });

  it("python fallback: python3 runs the script with the same arguments, marked fallback", () => {
    const cmd = serveCommand(python, { file: "/var/tmp/weights", sizeBytes: 1 << 30 });
    expect(cmd).toEqual({
      file: "/usr/bin/python3",
      args: ["/opt/drill/native/pagetoucher.py", "serve", "--file", "/var/tmp/weights", "--size", "1073741824", "--advice", "normal", "--max-lifetime-ms", "3600000"],
      fallback: true,
    });
  });

  it.each([
    ["zero size", () => anonCommand(native, { sizeBytes: 0, holdMs: 1 }), /--size/],
    ["fractional size", () => anonCommand(native, { sizeBytes: 1.5, holdMs: 1 }), /--size/],
    ["negative hold", () => anonCommand(native, { sizeBytes: 4096, holdMs: -1 }), /--hold/],
    ["hold past 7 days", () => anonCommand(native, { sizeBytes: 4096, holdMs: 7 * 86_400_000 + 1 }), /--hold/],
    ["relative file", () => thrashCommand(native, { file: "hog", sizeBytes: 4096, holdMs: 1 }), /--file/],
    ["zero lifetime", () => serveCommand(native, { file: "/var/tmp/w", sizeBytes: 4096, maxLifetimeMs: 0 }), /--max-lifetime/],
    ["negative seed", () => serveCommand(native, { file: "/var/tmp/w", sizeBytes: 4096, seed: -1 }), /--seed/],
  ])("refuses %s with a UsageError naming the flag", (_name, build, flag) => {
    expect(build).toThrow(UsageError);
    expect(build).toThrow(flag);
  });

  it("joinCgroupsFirst passes paths as arguments, never inside the script", () => {
    const cmd = joinCgroupsFirst(thrashCommand(python, { file: "/var/tmp/h", sizeBytes: 4096, holdMs: 0 }), ["/sys/fs/cgroup/memory/a b/cgroup.procs", "/u/$(x)/cgroup.procs"]);
    expect(cmd.file).toBe("/bin/sh");
    expect(cmd.fallback).toBe(true);
    expect(cmd.args[1]).not.toContain("a b");
    expect(cmd.args.slice(2, 6)).toEqual(["drill-join", "2", "/sys/fs/cgroup/memory/a b/cgroup.procs", "/u/$(x)/cgroup.procs"]);
    expect(cmd.args.slice(6, 9)).toEqual(["/usr/bin/python3", "/opt/drill/native/pagetoucher.py", "thrash"]);
  });

  it("the shim joins each file in order, then execs the command", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "pt-shim-"));
    try {
      const files = [path.join(dir, "v1"), path.join(dir, "unified")];
      const cmd = joinCgroupsFirst({ file: "/bin/sh", args: ["-c", "echo $$"], fallback: false }, files);
      const run = spawnSync(cmd.file, cmd.args, { encoding: "utf8" });
      expect(run.status).toBe(0);
      const pid = run.stdout.trim();
      expect(spawnSync("cat", files, { encoding: "utf8" }).stdout).toBe(`${pid}\n${pid}\n`);
      const failing = joinCgroupsFirst({ file: "/bin/true", args: [], fallback: false }, [path.join(dir, "missing", "cgroup.procs")]);
      expect(spawnSync(failing.file, failing.args).status).toBe(125);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("parsePageToucherLine", () => {
  it.each([
    ["hello impl=c mode=thrash pid=4242 page=4096 size=268435456 order=random advice=normal seed=18446744073709551615",
      { kind: "hello", impl: "c", mode: "thrash", pid: 4242, pageSize: 4096, sizeBytes: 268435456, order: "random", advice: "normal", seed: "18446744073709551615" }],
    ["hello impl=python-fallback mode=anon pid=1 page=4096 size=4096",
      { kind: "hello", impl: "python-fallback", mode: "anon", pid: 1, pageSize: 4096, sizeBytes: 4096, order: null, advice: null, seed: null }],
    ["touched 134217728", { kind: "touched", bytes: 134217728 }],
    ["packed 268435456", { kind: "packed", bytes: 268435456 }],
    ["ready 268435456\n", { kind: "ready", bytes: 268435456 }],
    ["pass 3 812345", { kind: "pass", passes: 3, us: 812345 }],
    ["reads 2560 10154954", { kind: "reads", pages: 2560, us: 10154954 }],
    ["done 124852", { kind: "done", us: 124852 }],
    ["err unknown command (pass, pass seq, pass random, quit)", { kind: "err", reason: "unknown command (pass, pass seq, pass random, quit)" }],
    ["exit signal SIGTERM", { kind: "exit", reason: "signal SIGTERM" }],
    ["exit hold", { kind: "exit", reason: "hold" }],
  ])("%s", (line, expected) => {
    expect(parsePageToucherLine(line)).toEqual(expected);
  });

  it.each([
    ["", "unknown line"],
    ["garbage", "unknown line"],
    ["touched", "byte count"],
    ["touched -1", "byte count"],
    ["touched 1.5", "byte count"],
    ["touched 12 34", "byte count"],
    ["touched 99999999999999999999", "byte count"],
    ["pass 3", "count and microseconds"],
    ["done", "microseconds"],
    ["exit", "reason"],
    ["hello impl=rust mode=anon pid=1 page=4096 size=1", "impl"],
    ["hello impl=c mode=anon pid=1 pid=2 page=4096 size=1", "duplicated"],
    ["hello impl=c mode=anon pid=x page=4096 size=1", "whole numbers"],
    ["hello impl=c mode=anon pid=1 page=4096 size=1 order=zigzag", "order"],
    ["hello impl=c mode=anon novalue", "bad field"],
  ])("%j is invalid (%s)", (line, reason) => {
    const parsed = parsePageToucherLine(line);
    expect(parsed.kind).toBe("invalid");
    if (parsed.kind === "invalid") expect(parsed.reason).toContain(reason);
  });
});

describe("locatePageToucher", () => {
  let root: string;
  let bin: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "pt-root-"));
    bin = mkdtempSync(path.join(tmpdir(), "pt-bin-"));
    mkdirSync(path.join(root, "native", "build"), { recursive: true });
    writeFileSync(path.join(root, "native", "pagetoucher.py"), "");
    writeFileSync(path.join(bin, "python3"), "#!/bin/sh\n");
    chmodSync(path.join(bin, "python3"), 0o755);
  });
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(bin, { recursive: true, force: true });
  });

  it("falls back to python3 when the C helper is not built", () => {
    expect(locatePageToucher({ packageRoot: root, pathEnv: bin })).toEqual({
      kind: "python",
      python: path.join(bin, "python3"),
      script: path.join(root, "native", "pagetoucher.py"),
    });
  });

  it("names everything missing when neither is there", () => {
    const find = () => locatePageToucher({ packageRoot: root, pathEnv: "/nonexistent" });
    expect(find).toThrow(DrillError);
    expect(find).toThrow(/native\/build\/pagetoucher is not built.*python3 is not on PATH/);
  });

  it("prefers the built binary, unless python is asked for", () => {
    const binary = path.join(root, "native", "build", "pagetoucher");
    writeFileSync(binary, "#!/bin/sh\n");
    chmodSync(binary, 0o755);
    try {
      expect(locatePageToucher({ packageRoot: root, pathEnv: bin })).toEqual({ kind: "native", binary });
      expect(locatePageToucher({ packageRoot: root, pathEnv: bin, prefer: "python" }).kind).toBe("python");
      chmodSync(binary, 0o644); // not executable: not usable
      expect(locatePageToucher({ packageRoot: root, pathEnv: bin }).kind).toBe("python");
    } finally {
      rmSync(binary, { force: true });
    }
  });

  it("finds the package root from src/ and from dist/", () => {
    const repo = findPackageRoot();
    expect(findPackageRoot(new URL(`file://${repo}/src/native/pagetoucher.ts`).href)).toBe(repo);
    expect(findPackageRoot(new URL(`file://${repo}/dist/native/pagetoucher.js`).href)).toBe(repo);
  });
});

describe("describePageToucherExit", () => {
  it("explains SIGKILL as a likely OOM kill, not a generic failure", () => {
    expect(describePageToucherExit(null, "SIGKILL")).toMatch(/OOM killer/);
    // QA: "file unlinked" for an anon hog, which has none.
    expect(describePageToucherExit(143, null)).toBe("exited 143: stopped by SIGTERM; its file, if any, unlinked");
    expect(describePageToucherExit(2, null)).toMatch(/bad arguments/);
  });

  // QA: a hog a rollback killed mid-hold was "killed by SIGKILL: likely the OOM killer" beside cg_oom_kill 0 → 0.
  it("a SIGKILL the cgroup's oom_kill count did not move for is not blamed on the OOM killer; one it rose for is", () => {
    const unchanged = describePageToucherExit(null, "SIGKILL", oomKillRose(0, 0));
    expect(unchanged).toMatch(/^killed by SIGKILL \(oom_kill unchanged: not the OOM killer; a rollback, teardown or kill -9\)/);
    expect(unchanged).not.toMatch(/likely the OOM killer/);
    expect(describePageToucherExit(null, "SIGKILL", oomKillRose(0, 1))).toMatch(/^killed by SIGKILL: the OOM killer \(the cgroup's oom_kill count rose\)/);
    // Counts not read: it may still have been the OOM killer.
    expect(describePageToucherExit(null, "SIGKILL", oomKillRose(null, 1))).toMatch(/^killed by SIGKILL: likely the OOM killer \(check/);
    expect(oomKillRose(3, 3)).toBe(false);
    expect(oomKillRose(3, null)).toBeNull();
  });
});

// The real helpers: bad arguments are exit 2 with `error:` on stderr, before
// anything is created; both implementations agree.
const repoRoot = findPackageRoot();
const implementations: Array<[string, PageToucherImpl | null]> = [
  ["c", (() => {
    try {
      const impl = locatePageToucher({ packageRoot: repoRoot });
      return impl.kind === "native" ? impl : null;
    } catch {
      return null;
    }
  })()],
  ["python-fallback", (() => {
    try {
      return locatePageToucher({ packageRoot: repoRoot, prefer: "python" });
    } catch {
      return null;
    }
  })()],
];

for (const [name, impl] of implementations) {
  const skip = impl === null ? `${name} helper not available (run npm run build / install python3)` : null;
  if (skip) console.warn(`skipping ${name} helper tests: ${skip}`);
  describe.skipIf(skip !== null)(`${name} helper`, () => {
    const run = (args: string[], input?: string) => {
      const prefix = impl?.kind === "python" ? [impl.script] : [];
      const file = impl?.kind === "python" ? impl.python : impl?.kind === "native" ? impl.binary : "/bin/false";
      return spawnSync(file, [...prefix, ...args], { encoding: "utf8", input, timeout: 20_000 });
    };

    it.each([
      [[]],
      [["explode"]],
      [["anon"]],
      [["anon", "--size"]],
      [["anon", "--size", "0"]],
      [["anon", "--size", "12X"]],
      [["anon", "--size", "1M", "--size", "2M"]],
      [["anon", "--size", "1M", "--file", "/var/tmp/x"]],
      [["anon", "--size", "1M", "--hold-ms", "-5"]],
      [["anon", "--size", "1M", "--max-lifetime-ms", "0"]],
      [["anon", "--size", "1M", "--hold-ms", String(7 * 86_400_000 + 1)]],
      [["anon", "--size", "1M", "--max-lifetime-ms", String(8 * 86_400_000 + 1)]],
      [["anon", "--size", "1M", "--bogus", "1"]],
      [["thrash", "--size", "1M"]],
      [["thrash", "--file", "/var/tmp/x", "--size", "1M", "--order", "zigzag"]],
      [["thrash", "--file", "/var/tmp/x", "--size", "1M", "--advice", "sequential"]],
      [["thrash", "--file", "/var/tmp/x", "--size", "1M", "--seed", "x"]],
      [["serve", "--file", "/var/tmp/x", "--size", "1M", "--hold-ms", "5"]],
      [["serve", "--file", "/var/tmp/x", "--size", "1M", "--order", "seq"]],
      [["serve", "--file", "", "--size", "1M"]],
    ])("%j → exit 2", (args) => {
      const result = run(args);
      expect(result.status).toBe(2);
      expect(result.stderr).toMatch(/^error: /);
      expect(result.stdout).toBe("");
    });

    it("refuses a file on tmpfs (exit 3) and an existing file (exit 3), leaving it alone", () => {
      if (spawnSync("stat", ["-f", "-c", "%T", "/dev/shm"], { encoding: "utf8" }).stdout.trim() === "tmpfs") {
        const tmpfs = run(["thrash", "--file", `/dev/shm/pt-unit-${process.pid}`, "--size", "1M"]);
        expect(tmpfs.status).toBe(3);
        expect(tmpfs.stderr).toMatch(/tmpfs/);
      }
      const dir = mkdtempSync(path.join("/var/tmp", "pt-unit-"));
      try {
        const existing = path.join(dir, "weights");
        writeFileSync(existing, "keep me");
        const result = run(["serve", "--file", existing, "--size", "1M"]);
        expect(result.status).toBe(3);
        expect(result.stderr).toMatch(/already exists/);
        expect(spawnSync("cat", [existing], { encoding: "utf8" }).stdout).toBe("keep me");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("takes the lifetime of drill's longest hold: 7 days plus the self-exit grace", () => {
      const result = run(["anon", "--size", "1M", "--hold-ms", "0", "--max-lifetime-ms", String(7 * 86_400_000 + 300_000)]);
      expect(result.stderr).toBe("");
      expect(result.status).toBe(0);
    });

    it("anon packs, holds and says why it exited", () => {
      const result = run(["anon", "--size", "4M", "--hold-ms", "50"]);
      expect(result.status).toBe(0);
      const lines = result.stdout.trim().split("\n").map(parsePageToucherLine);
      expect(lines[0]).toMatchObject({ kind: "hello", impl: name, mode: "anon", sizeBytes: 4 << 20 });
      expect(lines.slice(-2)).toEqual([{ kind: "packed", bytes: 4 << 20 }, { kind: "exit", reason: "hold" }]);
    });

    it("serve answers each command in order and unlinks its file on quit", async () => {
      const dir = mkdtempSync(path.join("/var/tmp", "pt-unit-"));
      const file = path.join(dir, "weights");
      const seen: string[] = [];
      try {
        const toucher = await WeightsToucher.start({ impl: impl!, file, sizeBytes: 2 << 20, seed: 1, onLine: (line) => seen.push(line.kind) });
        expect(toucher.fallback).toBe(impl!.kind === "python");
        expect(await toucher.pass()).toBeGreaterThan(0);
        expect(await toucher.pass("random")).toBeGreaterThan(0);
        const exit = await toucher.close();
        expect(exit).toMatchObject({ code: 0, signal: null });
        expect(await toucher.close()).toBe(exit); // safe twice
        expect(spawnSync("ls", [dir], { encoding: "utf8" }).stdout).toBe("");
        await expect(toucher.pass()).rejects.toThrow(DrillError);
        expect(seen).toEqual(["hello", "ready", "done", "done", "exit"]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("serve replies err to an unknown command and keeps serving", () => {
      const dir = mkdtempSync(path.join("/var/tmp", "pt-unit-"));
      try {
        const result = run(["serve", "--file", path.join(dir, "w"), "--size", "1M"], "dance\npass seq\n");
        expect(result.status).toBe(0);
        const kinds = result.stdout.trim().split("\n").map((line) => parsePageToucherLine(line).kind);
        expect(kinds).toEqual(["hello", "ready", "err", "done", "exit"]);
        expect(result.stdout).toMatch(/exit eof\n$/);
        expect(spawnSync("ls", [dir], { encoding: "utf8" }).stdout).toBe("");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

describe("WeightsToucher.start that fails", () => {
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(path.join("/var/tmp", "pt-unit-start-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A stand-in helper: creates its --file as serve does, then runs `then`. */
  function fakeHelper(name: string, then: string): PageToucherImpl {
    const binary = path.join(dir, name);
    writeFileSync(binary, `#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --file ] && f=$2; shift; done\nprintf partly > "$f"\n${then}\n`);
    chmodSync(binary, 0o755);
    return { kind: "native", binary };
  }

  it("killed (SIGKILL, the OOM killer) before ready: rejects and its partly filled file is gone (the caller gets nothing to close)", async () => {
    const file = path.join(dir, "weights-killed");
    const start = WeightsToucher.start({ impl: fakeHelper("killed.sh", "kill -9 $$"), file, sizeBytes: 8192, readyTimeoutMs: 20_000 });
    await expect(start).rejects.toThrow(/exited before it was ready: killed by SIGKILL.*; file unlinked/);
    expect(existsSync(file)).toBe(false);
  });

  it("refused (exit 3, the path exists): rejects and leaves that file alone", async () => {
    const file = path.join(dir, "weights-refused");
    writeFileSync(file, "keep me");
    const impl: PageToucherImpl = { kind: "native", binary: path.join(dir, "refuses.sh") };
    writeFileSync(impl.binary, "#!/bin/sh\necho 'error: file exists' >&2\nexit 3\n");
    chmodSync(impl.binary, 0o755);
    const start = WeightsToucher.start({ impl, file, sizeBytes: 8192, readyTimeoutMs: 20_000 });
    await expect(start).rejects.toThrow(/exited 3: refused/);
    await expect(start).rejects.not.toThrow(/unlinked/);
    expect(readFileSync(file, "utf8")).toBe("keep me");
  });
});
