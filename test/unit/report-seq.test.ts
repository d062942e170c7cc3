import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { parseSeq } from "../../src/queue/seq.js";
import { buildReport, NOT_FOUND_LISTED } from "../../src/report/build.js";
import { parseExport } from "../../src/report/exportFile.js";
import type { ReportInputs } from "../../src/report/inputs.js";
import { renderText } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { flat } from "../helpers/reportText.js";

/**
 * report read `<q>:seq` with /^\d+$/, so "007" counted 7 issued ids (and
 * called the ones on no list lost) although drill pack refuses to push on
 * such a seq: no id was issued from it. Now report reads it as pack does
 * (parseSeq): a seq pack would refuse is unreadable, null and said, never a count.
 */

const plain = new Chalk({ level: 0 });
const NOW = Date.parse("2025-11-30T12:00:00.000Z");
const keys = queueKeys("sqjobs");
const payload = (id: string) => JSON.stringify({ id, prompt_tokens: 1000, completion_tokens: 8, files: 1, enqueue_ts: NOW - 60_000, deadline_ms: 8000, attempt: 0, host_class: "shared-free" });
const exportWithSeq = (seq: string) =>
  [
    JSON.stringify({ key: keys.seq, type: "string", ttl_ms: null, value: { utf8: seq } }),
    JSON.stringify({ key: keys.ready, type: "list", ttl_ms: null, value: [{ utf8: payload("1") }] }),
  ].join("\n");

function inputs(over: Partial<ReportInputs>): ReportInputs {
  return reportInputs({
    queue: "sqjobs",
    source: { kind: "export", file: "/s/sq/final-x.jsonl", atMs: NOW },
    queueLen: 1,
    ...over,
  });
}

describe("parseSeq: <q>:seq as drill pack reads it", () => {
  it.each([
    ["0", 0],
    ["7", 7],
    ["9007199254740991", 2 ** 53 - 1],
  ])("%j is %d", (text, seq) => expect(parseSeq(text)).toBe(seq));

  it.each(["007", "00", "+5", " 5", "5 ", "-1", "1e3", "1.0", "", "abc", "9007199254740992", "99999999999999999999"])("%j is refused (null)", (text) => {
    expect(parseSeq(text)).toBeNull();
  });
});

describe("report: a <q>:seq drill pack would refuse", () => {
  it.each(["007", "+3", "9007199254740992"])("export with seq %j: ids issued null and said, no id called lost", (seq) => {
    const exported = parseExport(exportWithSeq(seq), keys);
    expect(exported.jobPlaces!.seq).toBeNull();
    const r = buildReport(inputs({ jobPlaces: exported.jobPlaces }), NOW, 600_000);
    expect(r.jobs_where).toMatchObject({ ids_issued: null, not_found: [] });
    expect(r.notes.join("\n")).toContain(`sqjobs:seq is "${seq}", not a job id (0, or digits with no leading zero, under 2^53: what drill pack pushes on): ids issued are n/a, lost ids not checked`);
    expect(renderText(r, plain)).toContain("ids issued by sqjobs:seq: n/a (unreadable, see notes); lost ids not checked.");
  });

  it("export with seq \"1\": read as before", () => {
    const exported = parseExport(exportWithSeq("1"), keys);
    expect(exported.jobPlaces!.seq).toBe(1);
    const r = buildReport(inputs({ jobPlaces: exported.jobPlaces }), NOW, 600_000);
    expect(r.jobs_where).toMatchObject({ ids_issued: 1, not_found: [] });
    expect(r.notes.join("\n")).not.toContain("sqjobs:seq is");
  });

  // QA: report walked 1..seq and listed every id on no list: a seq of 10^12 was a loop and an array of that many ids.
  it("export with seq 10^12 and one job: the count of ids on no list, the first NOT_FOUND_LISTED by id, at once", () => {
    const exported = parseExport(exportWithSeq("1000000000000"), keys);
    const r = buildReport(inputs({ jobPlaces: exported.jobPlaces }), NOW, 600_000);
    expect(r.jobs_where!.ids_issued).toBe(1e12);
    expect(r.jobs_where!.not_found_count).toBe(1e12 - 1);
    expect(r.jobs_where!.not_found).toHaveLength(NOT_FOUND_LISTED);
    expect(r.jobs_where!.not_found.slice(0, 3)).toEqual(["2", "3", "4"]);
    expect(r.notes.join("\n")).toContain("999999999999 job id(s) issued by sqjobs:seq are on no list of the queue");
    expect(flat(renderText(r, plain))).toContain("ids issued by sqjobs:seq: 1000000000000; distinct ids on the lists: 1; 999999999999 on no list: job=2 job=3");
    expect(flat(renderText(r, plain))).toContain("… 999999999979 more.");
  });

  it("export with seq 3 and ids 1 and 3 on the lists: id 2 on no list, counted and listed", () => {
    const text = [
      JSON.stringify({ key: keys.seq, type: "string", ttl_ms: null, value: { utf8: "3" } }),
      JSON.stringify({ key: keys.ready, type: "list", ttl_ms: null, value: [{ utf8: payload("1") }, { utf8: payload("3") }, { utf8: payload("07") }] }),
    ].join("\n");
    const r = buildReport(inputs({ jobPlaces: parseExport(text, keys).jobPlaces }), NOW, 600_000);
    expect(r.jobs_where).toMatchObject({ ids_issued: 3, not_found: ["2"], not_found_count: 1 });
  });

  it("export whose seq is no string: null and said", () => {
    const text = JSON.stringify({ key: keys.seq, type: "list", ttl_ms: null, value: [{ utf8: "7" }] });
    const exported = parseExport(text, keys);
    expect(exported.jobPlaces!.seq).toBeNull();
    const r = buildReport(inputs({ jobPlaces: exported.jobPlaces }), NOW, 600_000);
    expect(r.notes.join("\n")).toContain("sqjobs:seq is a list, not a string: ids issued are n/a, lost ids not checked");
  });
});
