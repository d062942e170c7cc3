import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { stateDirError, writeJsonDurably } from "../../src/cgroup/stateFiles.js";

const errno = (code: string) => Object.assign(new Error(code), { code });

// QA: a state dir made read-only mid-drill: up and rollback said
// "EROFS (run as root, ...)" to a root operator.
describe("stateDirError: the advice fits the error and who runs drill", () => {
  it.each([
    ["EACCES", false, "cannot write state file /s/x/state.json: EACCES (permission denied: run as root, or give --state-dir a directory you can write)"],
    ["EACCES", true, "cannot write state file /s/x/state.json: EACCES (permission denied: refused to root too: a read-only or restricted mount, an immutable file or a security policy; give --state-dir a directory you can write)"],
    ["EROFS", true, "cannot write state file /s/x/state.json: EROFS (a read-only filesystem: give --state-dir a writable directory)"],
    ["ENOSPC", true, "cannot write state file /s/x/state.json: ENOSPC (no space left there: free some, or give --state-dir a directory on another disk)"],
    ["EIO", false, "cannot write state file /s/x/state.json: EIO (give --state-dir a directory you can write)"],
  ])("%s (root %s)", (code, isRoot, message) => {
    expect(stateDirError("write state file", "/s/x/state.json", errno(code), isRoot).message).toBe(message);
  });
});

// QA: a full state dir's refused end record was named "state.json.<pid>.tmp", a name that means nothing to an operator.
describe("stateDirError: an atomic write's temp file is named as the file it replaces", () => {
  const at = (refused: string) => Object.assign(errno("ENOSPC"), { path: refused });
  it.each([
    ["/s/x/state.json.4242.tmp", ""],
    ["/s/x/up.lock.4242.1a2b3c4d.tmp", ""],
    ["/s/x", " at /s/x"],
    ["/s/x/state.json.old", " at /s/x/state.json.old"],
  ])("refused at %s", (refused, said) => {
    const file = refused.includes("up.lock") ? "/s/x/up.lock" : "/s/x/state.json";
    expect(stateDirError("write state file", file, at(refused), true).message).toBe(
      `cannot write state file ${file}: ENOSPC${said} (no space left there: free some, or give --state-dir a directory on another disk)`,
    );
  });
});

describe("writeJsonDurably", () => {
  it("its temp file refused: names the file it writes, not the temp file", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "drill-durable-"));
    try {
      const file = path.join(dir, "state.json");
      mkdirSync(`${file}.${process.pid}.tmp`); // open(2) of a directory for writing: EISDIR
      expect(() => writeJsonDurably(file, { a: 1 })).toThrow(new RegExp(`^cannot write state file ${file}: EISDIR \\(`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a write refused half-way (the rename onto a directory) says so and leaves no temp file beside the state", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "drill-durable-"));
    try {
      const file = path.join(dir, "state.json");
      mkdirSync(file); // rename(2) of a file onto a directory: EISDIR
      expect(() => writeJsonDurably(file, { a: 1 })).toThrow(/cannot write state file .*state\.json: EISDIR/);
      expect(readdirSync(dir)).toEqual(["state.json"]);
      rmSync(file, { recursive: true });
      writeJsonDurably(file, { a: 1 });
      expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ a: 1 });
      expect(readdirSync(dir)).toEqual(["state.json"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
