import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readUpEnded, upEndedPath, type DrillEnded } from "../../src/drill/state.js";

/**
 * runs/<id>/up-ended.json that is not up's end record: the reason names each
 * field refused and what was found there (QA: "no verdict and at" for a
 * verdict up never writes, "pushed is not a count" for no `pushed` at all).
 */

const ENDED: DrillEnded = { verdict: "interrupted", at: "2025-11-30T12:00:00.000Z", reason: "a rollback took it over", pushed: 7, notPacked: 2 };
const root = mkdtempSync(path.join(tmpdir(), "drill-up-ended-unit-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function reasonFor(record: Record<string, unknown>): string | null {
  const dir = mkdtempSync(path.join(root, "run-"));
  writeFileSync(upEndedPath(dir), JSON.stringify(record), { mode: 0o600 });
  const read = readUpEnded(dir);
  return read.ok ? null : read.reason;
}

const without = (field: keyof DrillEnded): Record<string, unknown> => Object.fromEntries(Object.entries(ENDED).filter(([k]) => k !== field));

describe("up-ended.json: each field refused is named, with what was found", () => {
  it.each([
    ["a verdict up never writes", { ...ENDED, verdict: "weird" }, '`verdict` is "weird", not one up writes (ran, stopped_early, interrupted, up_gone)'],
    ["no verdict", without("verdict"), "`verdict` is missing"],
    ["no at", without("at"), "`at` is missing"],
    ["an at that is no time", { ...ENDED, at: "yesterday" }, '`at` is "yesterday", not a time'],
    ["no pushed", without("pushed"), "`pushed` is missing"],
    ["counts that are not counts", { ...ENDED, pushed: "lots", notPacked: -3 }, '`pushed` is "lots", not a count; `notPacked` is -3, not a count'],
    ["a skipped count that is not one", { ...ENDED, skippedJobs: 1.5 }, "`skippedJobs` is 1.5, not a count"],
    ["a reason that is not text", { ...ENDED, reason: 5 }, "`reason` is 5, not text"],
    ["ids that are not ids", { ...ENDED, pushedIds: "x" }, '`pushedIds` is "x", not a list of ids'],
  ])("%s", (_what, record, why) => {
    expect(reasonFor(record)).toContain(`is not up's end record (${why}); move it aside`);
  });

  it("up's own record, and one of an older up (no optional counts, null counts), are taken", () => {
    expect(reasonFor({ ...ENDED })).toBeNull();
    expect(reasonFor({ ...ENDED, pushed: null, notPacked: null, reason: null })).toBeNull();
  });
});
