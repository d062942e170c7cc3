import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { lockBreakerFile, lockMarker, markerLockFile } from "../../src/cgroup/stateFiles.js";
import { acquireDrillLock, acquireRollbackLock } from "../../src/drill/lock.js";
import { RefusedError } from "../../src/errors.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { immutableSkipReason, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const roots = new HostRoots();

function ownStartTime(): number {
  const self = readProcessStat(roots, process.pid);
  if (!self.ok) throw new Error("cannot read own /proc stat");
  return self.value.startTime;
}

/** A lock record of a holder that is gone: this pid with another start time (the pid was reused since). */
const staleRecord = (what: string) => JSON.stringify({ pid: process.pid, startTime: ownStartTime() + 1, what });

function refusal(act: () => unknown): RefusedError {
  try {
    act();
  } catch (err) {
    if (err instanceof RefusedError) return err;
    throw err;
  }
  throw new Error("expected a refusal");
}

let dir: string;
let live: ChildProcess | null = null;
let host: FakeHost | null = null;

beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), "drill-lock-"));
});
afterEach(() => {
  live?.kill("SIGKILL");
  live = null;
  host?.cleanup();
  host = null;
  rmSync(dir, { recursive: true, force: true });
});

/** Another process, alive for the test, and its record as a lock holder. */
function liveRecord(what: string): { pid: number; text: string } {
  live = spawn("sleep", ["600"], { stdio: "ignore" });
  const pid = live.pid!;
  const stat = readProcessStat(roots, pid);
  if (!stat.ok) throw new Error(`cannot read /proc/${pid}/stat`);
  return { pid, text: JSON.stringify({ pid, startTime: stat.value.startTime, what }) };
}

describe("acquireDrillLock", () => {
  it("a lock held by a live process is refused (exit 3), naming the command and its pid, and left as it is", () => {
    const file = path.join(dir, "rollback.lock");
    const holder = liveRecord("report");
    writeFileSync(file, holder.text);
    const refused = refusal(() => acquireDrillLock(dir, "rollback"));
    expect(refused.exitCode).toBe(3);
    expect(refused.message).toBe(`another drill report (pid ${holder.pid}) holds ${file}; one at a time per drill name: wait for it to end, then run this again`);
    expect(readFileSync(file, "utf8")).toBe(holder.text);
  });

  // drill links its locks into place whole (and fsynced): it never leaves one
  // empty or cut short, not even at a power cut. One that does not parse is
  // another program's file, or an older drill's whose writer may still be
  // writing it: taking it for stale would run two at once. Refused, naming it.
  it.each([
    ["empty", ""],
    ["cut short", '{"pid":12'],
    ["no pid", '{"what":"up"}'],
  ])("a lock that does not parse (%s) is refused naming the file, not taken over", (_label, text) => {
    const file = path.join(dir, "up.lock");
    writeFileSync(file, text);
    const refused = refusal(() => acquireDrillLock(dir, "up"));
    expect(refused.exitCode).toBe(3);
    expect(refused.message).toContain(`${file} is not a lock drill wrote`);
    expect(readFileSync(file, "utf8")).toBe(text);
    expect(readdirSync(dir)).toEqual(["up.lock"]);
  });

  it("a stale lock is taken over, the new one names this process, and release leaves nothing", () => {
    const file = path.join(dir, "up.lock");
    writeFileSync(file, staleRecord("up"));
    const lock = acquireDrillLock(dir, "up");
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ pid: process.pid, startTime: ownStartTime(), what: "up" });
    expect(readdirSync(dir)).toEqual(["up.lock"]);
    lock.release();
    expect(readdirSync(dir)).toEqual([]);
  });

  // up --detach holds up.lock while its background up starts (two --detach at
  // once: the loser is refused there), then hands it over: never a moment without.
  it("a live holder's lock is taken over only by the process it hands it to (takeFrom); the holder's release then leaves it", () => {
    const file = path.join(dir, "up.lock");
    const parent = acquireDrillLock(dir, "up", "up --detach");
    expect(refusal(() => acquireDrillLock(dir, "up")).message).toMatch(/another drill up --detach \(pid \d+\) holds/);
    expect(refusal(() => acquireDrillLock(dir, "up", "up", undefined, process.pid + 1)).exitCode).toBe(3);
    const background = acquireDrillLock(dir, "up", "up", undefined, process.pid);
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ pid: process.pid, startTime: ownStartTime(), what: "up" });
    parent.release();
    expect(readdirSync(dir)).toEqual(["up.lock"]);
    background.release();
    expect(readdirSync(dir)).toEqual([]);
  });

  // QA: `up` refused ("refusing to share it with drill smoke") left an empty
  // <state-dir>/smoke2/, and `report --name smoke2` took it for a drill.
  it("a drill dir the lock made is removed at release when nothing else went in (an up refused before its state)", () => {
    const drillDir = path.join(dir, "state", "smoke2");
    acquireDrillLock(drillDir, "up").release();
    expect(existsSync(drillDir)).toBe(false);
    // QA: the state dir it also made (and its parents) stayed, empty, after `up --parent /nonexistent` (exit 2).
    expect(readdirSync(dir)).toEqual([]);
    const deeper = path.join(dir, "a", "b", "state", "smoke2");
    acquireDrillLock(deeper, "up").release();
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a state dir the lock made that holds another drill's dir at release stays, and that drill's dir with it", () => {
    const stateDir = path.join(dir, "state");
    const mine = acquireDrillLock(path.join(stateDir, "mine"), "up");
    const theirs = acquireDrillLock(path.join(stateDir, "theirs"), "up");
    mine.release();
    expect(readdirSync(stateDir)).toEqual(["theirs"]);
    writeFileSync(path.join(stateDir, "theirs", "state.json"), "{}");
    theirs.release();
    expect(readdirSync(path.join(stateDir, "theirs"))).toEqual(["state.json"]);
  });

  it("a drill dir the lock made that holds anything at release (state.json) stays; one that was there before stays even empty", () => {
    const drillDir = path.join(dir, "smoke");
    const lock = acquireDrillLock(drillDir, "up");
    writeFileSync(path.join(drillDir, "state.json"), "{}");
    lock.release();
    expect(readdirSync(drillDir)).toEqual(["state.json"]);
    const existing = path.join(dir, "existing");
    mkdirSync(existing);
    acquireDrillLock(existing, "rollback").release();
    expect(readdirSync(existing)).toEqual([]);
  });

  it("of two takers that both found one stale lock, exactly one gets it; the other is refused naming it", () => {
    const file = path.join(dir, "up.lock");
    writeFileSync(file, staleRecord("up"));
    let second: ReturnType<typeof acquireDrillLock> | null = null;
    // The first taker has judged the lock stale; the second runs its whole takeover before the first goes on.
    const refused = refusal(() =>
      acquireDrillLock(dir, "up", "first-taker", {
        foundStale: () => {
          second = acquireDrillLock(dir, "up", "second-taker");
        },
      }),
    );
    expect(second).not.toBeNull();
    expect(refused.message).toBe(`another drill second-taker (pid ${process.pid}) holds ${file}; one at a time per drill name: wait for it to end, then run this again`);
    expect(JSON.parse(readFileSync(file, "utf8"))).toMatchObject({ what: "second-taker" });
    expect(readdirSync(dir)).toEqual(["up.lock"]);
  });

  it("a taker that found a lock stale and resumes after it changed hands (taken over, released, taken afresh) leaves the new holder alone", () => {
    const file = path.join(dir, "up.lock");
    writeFileSync(file, staleRecord("up"));
    let third: ReturnType<typeof acquireDrillLock> | null = null;
    const refused = refusal(() =>
      acquireDrillLock(dir, "up", "first-taker", {
        foundStale: () => {
          acquireDrillLock(dir, "up", "second-taker").release();
          third = acquireDrillLock(dir, "up", "third-taker");
        },
      }),
    );
    expect(third).not.toBeNull();
    expect(refused.message).toContain("another drill third-taker");
    expect(JSON.parse(readFileSync(file, "utf8"))).toMatchObject({ what: "third-taker" });
    expect(readdirSync(dir)).toEqual(["up.lock"]);
  });

  it("while another live taker is taking a stale lock over, the lock is refused and left to it", () => {
    const file = path.join(dir, "up.lock");
    const stale = staleRecord("up");
    writeFileSync(file, stale);
    writeFileSync(lockBreakerFile(file, stale), liveRecord("up").text);
    const refused = refusal(() => acquireDrillLock(dir, "up"));
    expect(refused.message).toBe(`another drill up with the same name is starting (${file})`);
    expect(readFileSync(file, "utf8")).toBe(stale);
  });

  it("a taker that died in the middle of a takeover does not block the next one", () => {
    const file = path.join(dir, "up.lock");
    const stale = staleRecord("up");
    writeFileSync(file, stale);
    writeFileSync(lockBreakerFile(file, stale), staleRecord("up"));
    acquireDrillLock(dir, "up");
    expect(JSON.parse(readFileSync(file, "utf8"))).toMatchObject({ pid: process.pid, startTime: ownStartTime() });
    expect(readdirSync(dir)).toEqual(["up.lock"]);
  });
});

describe("lockMarker (the same lock file as the drill's)", () => {
  it("refuses a lock that does not parse, naming it, and leaves it; refuses a live holder naming its pid", () => {
    host = makeFakeHost("hybrid");
    const cg = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "t1", { kind: "self" });
    const file = markerLockFile(host.stateDir, cg);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, "");
    expect(refusal(() => lockMarker(host!.stateDir, cg)).message).toContain(`${file} is not a lock drill wrote`);
    expect(readFileSync(file, "utf8")).toBe("");

    const holder = liveRecord("setup");
    writeFileSync(file, holder.text);
    expect(refusal(() => lockMarker(host!.stateDir, cg)).message).toMatch(new RegExp(`\\(pid ${holder.pid}\\) is running right now`));
  });
});

// A host /proc mounted into a container, or a test's fake tree, has none of
// this machine's drill processes: judged there, every live holder looked gone
// and its lock was taken over, so two `drill up` of one name both ran.
describe("lock holders are judged in this machine's /proc, whatever --procfs says", () => {
  it("drill --procfs <a tree without the holder> up refuses a lock a live process holds, and leaves it", async () => {
    const stateDir = path.join(dir, "state");
    mkdirSync(path.join(stateDir, "lockproc"), { recursive: true });
    const file = path.join(stateDir, "lockproc", "up.lock");
    const holder = liveRecord("up");
    writeFileSync(file, holder.text);
    const drillFile = path.join(dir, "lockproc.yaml");
    writeFileSync(drillFile, tinyDrill("lockproc", { phases: [["0s", pack(1)]] }));
    const emptyProc = path.join(dir, "proc");
    mkdirSync(emptyProc);
    const result = await runDrill(["--procfs", emptyProc, "--state-dir", stateDir, "up", "--drill", drillFile, "--name", "lockproc", "--parent", "self"]);
    expect(result.stderr).toContain(`another drill up (pid ${holder.pid}) holds ${file}`);
    expect(result.exitCode).toBe(3);
    expect(readFileSync(file, "utf8")).toBe(holder.text);
  });
});

// QA AB 2: a rollback whose state dir refused its lock file (ENOSPC, EPERM on an immutable dir) did nothing at all.
describe("acquireRollbackLock on a drill dir that refuses the lock file (chattr +i, as a full disk refuses it)", () => {
  const immutable = (drillDir: string, on: boolean) => spawnSync("chattr", [on ? "+i" : "-i", drillDir]).status === 0;
  const chattrSkip = immutableSkipReason();
  if (chattrSkip) console.warn(`skipping acquireRollbackLock on an immutable drill dir: ${chattrSkip}`);
  const chattrWorks = chattrSkip === null;

  it.skipIf(!chattrWorks)("no lock held: goes on without one, saying why and what frees it (never another --state-dir); a stale one too", () => {
    const drillDir = path.join(dir, "smoke");
    mkdirSync(drillDir);
    writeFileSync(path.join(drillDir, "rollback.lock"), staleRecord("rollback"));
    expect(immutable(drillDir, true)).toBe(true);
    try {
      const taken = acquireRollbackLock(drillDir);
      expect(taken.lock).toBeNull();
      expect(taken.refused?.text).toMatch(/^cannot create the lock .*\/smoke\/rollback\.lock: EPERM \(refused \(an immutable directory, chattr \+i, .*\): make it writable\)$/);
      // Not another user's dir: the same user reruns it once the dir is freed, not "as root".
      expect(taken.refused?.as).toBeNull();
    } finally {
      immutable(drillDir, false);
    }
  });

  it.skipIf(!chattrWorks)("a live rollback holds it: refused as ever (exit 3), naming its pid", () => {
    const drillDir = path.join(dir, "smoke");
    mkdirSync(drillDir);
    const holder = liveRecord("rollback");
    writeFileSync(path.join(drillDir, "rollback.lock"), holder.text);
    expect(immutable(drillDir, true)).toBe(true);
    try {
      expect(refusal(() => acquireRollbackLock(drillDir)).message).toContain(`another drill rollback (pid ${holder.pid}) holds`);
    } finally {
      immutable(drillDir, false);
    }
  });
});
