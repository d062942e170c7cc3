import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { closingLines, failedSummary, isOwnRun, refusedSummary, type ClosingFacts } from "../../src/commands/up.run.js";
import type { DrillState } from "../../src/drill/state.js";
import { DrillError, RefusedError } from "../../src/errors.js";
import { writeFakeDrill } from "../helpers/fakeState.js";

const facts: ClosingFacts = {
  name: "smoke",
  drillCmd: "drill",
  queue: "jobs",
  redisUrl: "redis://127.0.0.1:34455",
  embeddedRedis: true,
  pushed: 5,
  notPacked: 0,
  unansweredPushes: 0,
  stoppedEarly: false,
  redisGone: false,
  rollbackUnderWay: false,
  running: ["gate", "worker", "watch", "hog"],
  cgroup: true,
  fileDir: true,
  started: ["processes", "cgroup"],
};

// QA: after an early stop up named a dead Redis URL for deny-all, and told
// the operator to run the rollback that had just stopped it.
describe("up's closing lines say what to do next, as things stand", () => {
  it("a drill that ran: the report, the lever, the rollback and when the rest exits by itself", () => {
    expect(closingLines(facts)).toEqual([
      "drill smoke: packer stopped after 5 jobs; `drill report --name smoke --format md` for the incident note.",
      "Deny-all by hand: `drill --redis redis://127.0.0.1:34455 gate mode reject_all`.",
      "Run `drill rollback --name smoke` before walking away: gate, worker, watch and hog keep running until then (they exit by themselves 5 minutes after the drill's end, the embedded Redis 30 s later with every job in its AOF).",
    ]);
  });

  it("a given Redis with a password: the lever masked, and how to run it so (QA: `***` does not paste)", () => {
    const lines = closingLines({ ...facts, redisUrl: "redis://:s3cret@127.0.0.1:34455", embeddedRedis: false });
    expect(lines[1]).toBe(
      "Deny-all by hand: `drill --redis 'redis://:***@127.0.0.1:34455' gate mode reject_all` (the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL).",
    );
  });

  it("the embedded Redis died: no lever on its dead URL, and rollback starts it again on its AOF", () => {
    const lines = closingLines({ ...facts, redisGone: true, stoppedEarly: true, notPacked: 3 });
    expect(lines[0]).toContain("(3 not packed: the drill stopped first)");
    expect(lines.join("\n")).not.toMatch(/Deny-all|34455|30 s later/);
    expect(lines[1]).toMatch(/^Run `drill rollback --name smoke` before walking away: the embedded Redis is gone, .*rollback starts it again on its AOF/);
  });

  // QA: the report counted one id more than up's packed + not packed: a push whose reply was lost ran later.
  it("a push that got no reply as the drill stopped is named among those not packed", () => {
    const lines = closingLines({ ...facts, stoppedEarly: true, pushed: 11, notPacked: 22, unansweredPushes: 1 });
    expect(lines[0]).toBe(
      "drill smoke: packer stopped after 11 jobs (22 not packed: the drill stopped first; 1 of them got no reply: queued under the next id if Redis ran it); `drill report --name smoke --format md` for the incident note.",
    );
  });

  it("a rollback stopped up: it is not told to run one, nor to pull the lever the rollback pulled", () => {
    const lines = closingLines({ ...facts, rollbackUnderWay: true, stoppedEarly: true });
    expect(lines.join("\n")).not.toMatch(/Run `|Deny-all|keep running until then/);
    expect(lines[1]).toBe("A rollback of this drill is under way (it stopped this up): it stops its processes, removes its cgroup, drains and exports the queue; its own output says what it found.");
  });

  // QA: it said "it stops gate, worker, watch and hog" of a run whose rollback came before any child (or a hog) started.
  it("a rollback stopped up: it names only what this run started", () => {
    const under = (started: ClosingFacts["started"], redisUrl = facts.redisUrl) =>
      closingLines({ ...facts, rollbackUnderWay: true, stoppedEarly: true, running: [], started, redisUrl })[1];
    expect(under(["embedded Redis"])).toBe("A rollback of this drill is under way (it stopped this up): it drains and exports the queue, then stops its embedded Redis; its own output says what it found.");
    expect(under(["embedded Redis", "cgroup"])).toBe(
      "A rollback of this drill is under way (it stopped this up): it removes its cgroup, drains and exports the queue, then stops its embedded Redis; its own output says what it found.",
    );
    expect(under([])).toBe("A rollback of this drill is under way (it stopped this up): it drains and exports the queue; its own output says what it found.");
    expect(under([], "")).toBe("A rollback of this drill is under way (it stopped this up): it closes the run, which started nothing; its own output says what it found.");
    for (const started of [[], ["embedded Redis"], ["processes"]] as ClosingFacts["started"][]) expect(under(started)).not.toMatch(/gate|worker|watch|hog/);
  });

  // QA: after the gate was SIGKILLed (and the hog had exited), up still said "gate, worker, watch and hog keep running".
  it("names only what is still alive", () => {
    expect(closingLines({ ...facts, running: ["worker", "watch"], stoppedEarly: true }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: worker and watch keep running until then (they exit by themselves 5 minutes after the drill's end, the embedded Redis 30 s later with every job in its AOF).",
    );
    expect(closingLines({ ...facts, running: ["watch"], embeddedRedis: false }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: the watch keeps running until then (they exit by themselves 5 minutes after the drill's end).",
    );
    expect(closingLines({ ...facts, running: [], embeddedRedis: false }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: none of its processes runs any more, its cgroup and files stay until then.",
    );
    expect(closingLines({ ...facts, running: [], redisGone: true }).at(-1)).toMatch(/AOF \(every job it took is there\) to drain and export it\. None of its processes runs any more, its cgroup and files stay until then\.$/);
  });

  // QA: after a stop while setting up, before the cgroup was made, it still said "its cgroup and files stay until then".
  it("names only what the drill made: no cgroup or files after a stop before them", () => {
    expect(closingLines({ ...facts, running: [], embeddedRedis: false, cgroup: false, fileDir: false }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: none of its processes runs any more.",
    );
    expect(closingLines({ ...facts, running: [], cgroup: true, fileDir: false }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: none of its processes runs any more, its cgroup stays until then (the embedded Redis exits by itself 5.5 minutes after the drill's end, with every job in its AOF).",
    );
  });

  it("a given Redis: no embedded Redis to exit by itself", () => {
    expect(closingLines({ ...facts, embeddedRedis: false }).at(-1)).toBe(
      "Run `drill rollback --name smoke` before walking away: gate, worker, watch and hog keep running until then (they exit by themselves 5 minutes after the drill's end).",
    );
  });
});

describe("up --json when it refuses", () => {
  const root = mkdtempSync(path.join(tmpdir(), "drill-refused-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("is a document with the result's name and state, and verdict refused: state names the state file there is (the drill that is up)", () => {
    mkdirSync(path.join(root, "smoke"), { recursive: true });
    writeFileSync(path.join(root, "smoke", "state.json"), "{}");
    // The up holding the lock has not written it yet: it is the state file to read next.
    mkdirSync(path.join(root, "racing"), { recursive: true });
    writeFileSync(path.join(root, "racing", "up.lock"), "");
    expect(refusedSummary("racing", root, new RefusedError("drill racing is being started")).state).toBe(path.join(root, "racing", "state.json"));
    expect(refusedSummary("smoke", root, new RefusedError("drill smoke is already up"))).toEqual({
      name: "smoke",
      verdict: "refused",
      reason: "drill smoke is already up",
      run_id: null,
      state: path.join(root, "smoke", "state.json"),
    });
  });

  // QA: a refusal before the first write (the queue already holds keys) named <state-dir>/<drill>/state.json, which did not exist.
  it("state is null when the refusal came before any state file", () => {
    expect(refusedSummary("fresh", root, new RefusedError("queue jobs on redis://x already holds keys")).state).toBeNull();
    // QA: a drill dir with neither (emptied by hand, other files left) named a state.json that was not there.
    mkdirSync(path.join(root, "emptied"), { recursive: true });
    writeFileSync(path.join(root, "emptied", "notes.txt"), "");
    expect(refusedSummary("emptied", root, new RefusedError("queue jobs on redis://x already holds keys")).state).toBeNull();
  });
});

// QA AB 7: up --json printed nothing when the state dir refused a write (README: one document whatever happens).
describe("failedSummary: up's --json document for a failure before its summary", () => {
  const root = mkdtempSync(path.join(tmpdir(), "drill-failed-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("names the run this up started (there is something to roll back), never another's; null with no state file", () => {
    const err = new DrillError("cannot start redis-server: timeout (coreutils) not on PATH");
    expect(failedSummary("fresh", root, err)).toEqual({ name: "fresh", verdict: "failed", reason: err.message, run_id: null, state: null });
    writeFakeDrill(root, "ours", "jobs", "", { runId: "ours-r2", phase: "starting", owner: { pid: process.pid, startTime: 1 } });
    expect(failedSummary("ours", root, err)).toMatchObject({ run_id: "ours-r2", state: path.join(root, "ours", "state.json") });
    // The last run of another up, left as it was: not this one's to roll back.
    writeFakeDrill(root, "theirs", "jobs", "redis://127.0.0.1:1");
    expect(failedSummary("theirs", root, err)).toMatchObject({ run_id: null, state: path.join(root, "theirs", "state.json") });
  });
});

describe("isOwnRun: what up --detach takes for its background up running", () => {
  const state = (runId: string, pid: number, phase: DrillState["phase"] = "running") =>
    ({ runId, phase, owner: { pid, startTime: 1 }, scheduleStartedAt: phase === "starting" ? undefined : "2026-12-01T20:00:00.000Z" }) as DrillState;

  it("a new run owned by its own child, running or already stopped", () => {
    expect(isOwnRun(state("r2", 42), state("r1", 7, "complete"), 42)).toBe(true);
    expect(isOwnRun(state("r2", 42, "stopped"), null, 42)).toBe(true);
  });

  // It said "up in the background" for a drill that stopped while waiting for gate and worker.
  it("not a run that stopped before its schedule started", () => {
    expect(isOwnRun({ ...state("r2", 42, "stopped"), scheduleStartedAt: undefined }, null, 42)).toBe(false);
  });

  // QA: two --detach at once both said "detached" with the winner's run: the loser's child was refused and gone.
  it("not another up's run (the state is shared by name), nor the run that was there before, nor one still starting", () => {
    expect(isOwnRun(state("r2", 43), null, 42)).toBe(false);
    expect(isOwnRun(state("r1", 42), state("r1", 42, "complete"), 42)).toBe(false);
    expect(isOwnRun(state("r2", 42, "starting"), null, 42)).toBe(false);
    expect(isOwnRun(state("r2", 42), null, undefined)).toBe(false);
  });
});
