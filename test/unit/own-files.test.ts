import { execFileSync } from "node:child_process";
import { chmodSync, closeSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { writeJsonDurably } from "../../src/cgroup/stateFiles.js";
import { nothingToRollBackLine } from "../../src/commands/rollback.run.js";
import { makeDirs } from "../../src/util/makeDirs.js";
import { ForeignRecordError, openOwnFile, readOwnRecord, recordDistrust, recordReadError } from "../../src/util/ownFiles.js";

// QA AB 3: under umask 000 drill's state dirs and logs were world-writable, and
// a marker another user wrote there made root's rollback kill an unrelated
// cgroup's tasks. QA AB 5: a non-root rollback said "no process of a drill up
// on this host" while root's drills ran: it cannot read their environment.

const mode = (file: string) => statSync(file).mode & 0o7777;

let root = "";
let umask = 0;
beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), "drill-own-files-"));
  umask = process.umask(0o022);
  process.umask(umask);
});
afterEach(() => {
  process.umask(umask);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("drill's own dirs and files: explicit modes, whatever the umask", () => {
  it("makeDirs makes every dir 0700 under umask 000", () => {
    process.umask(0);
    const dir = path.join(root, "um0", "state", "cgroups");
    makeDirs(dir);
    expect([mode(path.join(root, "um0")), mode(path.join(root, "um0", "state")), mode(dir)]).toEqual([0o700, 0o700, 0o700]);
  });

  it("a record (writeJsonDurably) is 0600 in 0700 dirs under umask 000", () => {
    process.umask(0);
    const file = path.join(root, "records", "served", "x-0123456789-01234567.json");
    writeJsonDurably(file, { kind: "x" });
    expect([mode(path.join(root, "records")), mode(path.dirname(file)), mode(file)]).toEqual([0o700, 0o700, 0o600]);
  });

  it("openOwnFile: a log made under umask 000 is 0600, and one an older drill left 0666 becomes 0600", () => {
    process.umask(0);
    const fresh = path.join(root, "fresh.log");
    closeSync(openOwnFile(fresh, "a"));
    const old = path.join(root, "old.log");
    writeFileSync(old, "earlier run\n", { mode: 0o666 });
    expect(mode(old)).toBe(0o666);
    closeSync(openOwnFile(old, "a"));
    expect([mode(fresh), mode(old)]).toEqual([0o600, 0o600]);
  });
});

describe("recordDistrust: drill acts only on a record it can have written", () => {
  const file = "/s/cgroups/victim-0123456789.json";
  const rootOwn = { uid: 0, mode: 0o100600 };
  const rootDir = { uid: 0, mode: 0o40700 };
  const reasons = (written: { uid: number; mode: number }, dir: { uid: number; mode: number }, euid: number) => recordDistrust(file, written, dir, euid).map((d) => d.reason);

  it.each([
    ["root's record in root's 0700 dir, root runs drill", rootOwn, rootDir, 0],
    ["root's 0644 record in a 0755 dir", { uid: 0, mode: 0o100644 }, { uid: 0, mode: 0o40755 }, 0],
    ["the user's own record, the user runs drill", { uid: 1000, mode: 0o100600 }, { uid: 1000, mode: 0o40700 }, 1000],
    ["root's record read by a user (a non-root rollback of root's drill)", rootOwn, rootDir, 1000],
  ])("trusted: %s", (_what, written, dir, euid) => {
    expect(reasons(written, dir, euid)).toEqual([]);
  });

  it("the QA case: another user's 0644 record in a 0777 dir (umask 000), root runs drill: both said, each with its fix", () => {
    const distrust = recordDistrust(file, { uid: 1000, mode: 0o100644 }, { uid: 0, mode: 0o40777 }, 0);
    expect(distrust).toEqual([
      { reason: "it is owned by uid 1000, not root, who runs drill", fix: `chown 0 ${file}` },
      { reason: "other users can write its dir /s/cgroups (mode 0777)", fix: "chmod go-w /s/cgroups" },
    ]);
  });

  it.each([
    ["a record others can write", { uid: 0, mode: 0o100666 }, rootDir, 0, ["other users can write it (mode 0666)"]],
    ["a group-writable record", { uid: 0, mode: 0o100620 }, rootDir, 0, ["other users can write it (mode 0620)"]],
    ["a dir another user owns", rootOwn, { uid: 1000, mode: 0o40700 }, 0, ["its dir /s/cgroups is owned by uid 1000, not root, who runs drill"]],
    ["a third user's record, a user runs drill", { uid: 1001, mode: 0o100600 }, { uid: 1000, mode: 0o40700 }, 1000, ["it is owned by uid 1001, neither root nor the user running drill (uid 1000)"]],
  ])("refused: %s", (_what, written, dir, euid, expected) => {
    expect(reasons(written, dir, euid)).toEqual(expected);
  });
});

describe("readOwnRecord", () => {
  it("reads drill's record; null when there is none", () => {
    const dir = mkdtempSync(path.join(root, "read-"));
    writeFileSync(path.join(dir, "a.json"), "{}", { mode: 0o600 });
    expect(readOwnRecord(path.join(dir, "a.json"))).toBe("{}");
    expect(readOwnRecord(path.join(dir, "none.json"))).toBeNull();
  });

  it("refuses, naming the file and what to do (exit 4): one in a dir others can write, a link, a FIFO", () => {
    const open = mkdtempSync(path.join(root, "open-"));
    chmodSync(open, 0o777);
    writeFileSync(path.join(open, "a.json"), "{}", { mode: 0o600 });
    const closed = mkdtempSync(path.join(root, "closed-"));
    writeFileSync(path.join(closed, "target.json"), "{}", { mode: 0o600 });
    symlinkSync(path.join(closed, "target.json"), path.join(closed, "link.json"));
    execFileSync("mkfifo", [path.join(closed, "fifo.json")]);
    const refusal = (file: string) => {
      try {
        readOwnRecord(file);
      } catch (err) {
        expect(err).toBeInstanceOf(ForeignRecordError);
        expect((err as ForeignRecordError).exitCode).toBe(4);
        return (err as Error).message;
      }
      throw new Error(`${file} was read`);
    };
    expect(refusal(path.join(open, "a.json"))).toBe(
      `${path.join(open, "a.json")} is not a record drill wrote: other users can write its dir ${open} (mode 0777). Nothing is done on its word: ` +
        `check what it names and who put it there; remove it if it is not drill's, or if it is, chmod go-w ${open}; then run drill again`,
    );
    expect(refusal(path.join(closed, "link.json"))).toMatch(/link\.json is not a record drill wrote: it is a symbolic link \(drill writes none\)/);
    expect(refusal(path.join(closed, "fifo.json"))).toMatch(/fifo\.json is not a record drill wrote: it is not a plain file/);
  });
});

describe("nothingToRollBackLine: a scan that could not read other users' processes does not claim none", () => {
  it.each([
    [0, undefined, "nothing to roll back: no drill in /tmp/empty, and no process of a drill up on this host"],
    [0, "smoke", "nothing to roll back: no drill in /tmp/empty, and no process of drill smoke on this host"],
    [
      57,
      undefined,
      "nothing to roll back: no drill in /tmp/empty, and no process of a drill up among the processes this user can look at; could not look at 57 processes of other users (only root may read their environment, where a drill's run id is): run as root to see drills of other users",
    ],
    [
      1,
      "smoke",
      "nothing to roll back: no drill in /tmp/empty, and no process of drill smoke among the processes this user can look at; could not look at 1 process of other users (only root may read their environment, where a drill's run id is): run as root to see drills of other users",
    ],
  ])("%i unreadable, --name %s", (unreadable, named, line) => {
    expect(nothingToRollBackLine("no drill in /tmp/empty", named, unreadable)).toBe(line);
  });
});

// QA: a non-root watch of root's state dir said "cannot read state file …:
// EACCES: permission denied, open '…'" behind the wrong file. The error of a
// record that did not read: the file, the errno and its meaning, whose the
// file (or its dir) is and what to do, and `orElse` for a command that can go on.
describe("recordReadError", () => {
  const errno = (code: string) => Object.assign(new Error(`${code}: raw`), { code });
  it.each([
    ["EACCES", false, null, "EACCES (permission denied: {dir} is {whose}'s, mode 0700: run as {who})"],
    ["EPERM", false, "pass --x", "EPERM (operation not permitted: {dir} is {whose}'s, mode 0700: run as {who}, or pass --x)"],
    ["EACCES", true, "pass --x", "EACCES (permission denied: {dir} is {whose}'s, mode 0700: refused to root too: a restricted mount or a security policy)"],
    ["EIO", false, "pass --x", "EIO: raw"],
  ] as const)("%s (root %s, orElse %s)", (code, isRoot, orElse, reason) => {
    const dir = path.join(root, `unread-${code}-${isRoot}`);
    makeDirs(dir);
    const file = path.join(dir, "x.json"); // not there: the dir's owner is said
    const uid = statSync(dir).uid;
    const who = uid === 0 ? "root" : `uid ${uid} or root`;
    const expected = reason.replace("{dir}", dir).replace("{whose}", uid === 0 ? "root" : `uid ${uid}`).replace("{who}", who);
    const err = recordReadError(file, errno(code), orElse, isRoot);
    expect([err.file, err.reason, err.message, err.exitCode]).toEqual([file, expected, `cannot read ${file}: ${expected}`, 1]);
  });
});
