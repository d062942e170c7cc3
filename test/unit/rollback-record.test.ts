import { describe, expect, it } from "vitest";
import { rollbackRecord, unrecordedLeft } from "../../src/drill/rollback.js";
import { otherUsersDir } from "../../src/util/ownFiles.js";

/**
 * QA: a second rollback (after an exit 4, or a re-drain of jobs pushed after a
 * complete one) rewrote state.json's rollback.at, and the report's "rolled
 * back 14 s into the drill" became 33 s. The first rollback's time stays.
 */
describe("the rollback record across rollbacks", () => {
  const first = "2025-11-30T12:00:14.000Z";
  const later = "2025-11-30T12:00:33.000Z";

  it("the first rollback records its time as at", () => {
    expect(rollbackRecord(undefined, first, { exported: "/s/final-1.jsonl", drained: 3, left: [] })).toEqual({ at: first, exported: "/s/final-1.jsonl", drained: 3, left: [] });
  });

  it("a later one keeps at, records lastAt and its own export, drain and what it left", () => {
    const before = { at: first, drained: 3, left: ["drain pending: redis unreachable"], redrains: [{ at: "2025-11-30T12:00:20.000Z", drained: 3, exported: "/s/final-0.jsonl" }] };
    expect(rollbackRecord(before, later, { exported: "/s/final-2.jsonl", drained: 6, left: [] })).toEqual({
      at: first,
      lastAt: later,
      exported: "/s/final-2.jsonl",
      drained: 6,
      left: [],
      redrains: before.redrains,
    });
  });

  // QA: a rollback SIGTERMed after its drain recorded nothing; the one that finished it became the run's end (17 s, not 9 s).
  it("the first record after an interrupted rollback: at is the interrupted one's start (it took the drill over), lastAt this one's", () => {
    const takeover = "2025-11-30T12:00:09.000Z";
    expect(rollbackRecord(undefined, later, { exported: "/s/final-1.jsonl", drained: 4, left: [] }, takeover)).toEqual({ at: takeover, lastAt: later, exported: "/s/final-1.jsonl", drained: 4, left: [] });
  });
});

// QA: a user's rollback in root's drill dir was told to run again "once the state dir has space (or is writable) again": it never is, to that user.
describe("the left line of a state.json a rollback could not write", () => {
  const again = "drill --state-dir /s rollback --name smoke";

  it("another user's drill dir (root's, the rollback not root): run it as root, not once the dir has space", () => {
    const other = otherUsersDir("/", "EACCES", 65534);
    expect(other).toEqual({ text: expect.stringMatching(/^EACCES \(permission denied: \/ is root's, mode \d{4}: not writable by this user \(uid 65534\); run as root to finish it\)$/) as string, as: "root" });
    const line = unrecordedLeft("/s", "smoke", { text: `cannot create the lock /s/smoke/rollback.lock: ${other!.text}`, as: other!.as }, again);
    expect(line).toBe(
      `/s/smoke/state.json not written (could not create the lock /s/smoke/rollback.lock: ${other!.text}): the drill is not marked rolled back, nor what this rollback did; ` +
        `as root, run ${again}: it finishes what is left and records it`,
    );
    expect(line).not.toContain("has space");
  });

  it("a full or refusing state dir of this user's: once it has space (or is writable) again", () => {
    expect(otherUsersDir("/", "EACCES", 0)).toBeNull();
    const line = unrecordedLeft("/s", "smoke", { text: "cannot write state file /s/smoke/state.json: ENOSPC (no space left on its disk: free some there)", as: null }, again);
    expect(line).toContain(`; once the state dir has space (or is writable) again, run ${again}: it finishes what is left and records it`);
  });
});
