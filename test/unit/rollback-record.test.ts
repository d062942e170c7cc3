import { describe, expect, it } from "vitest";
import { rollbackRecord } from "../../src/drill/rollback.js";

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
