import { describe, expect, it } from "vitest";
import { checkDecisionRecord, checkUnheardDecision, parseDecisionRecord, type DecisionRecord } from "../../src/queue/decisionRecord.js";

const FP = "a".repeat(40);
const OTHER_FP = "b".repeat(40);
const admitted: DecisionRecord = { fingerprint: FP, attempt: "0", kind: "admit", figures: "packed=100 limit=32000" };
const rejected: DecisionRecord = { fingerprint: FP, attempt: "0", kind: "reject_packed_tokens", figures: "packed=48000 limit=32000" };

describe("parseDecisionRecord (parse_record)", () => {
  it("splits the four tab-separated fields the scripts write", () => {
    expect(parseDecisionRecord(`${FP}\t0\tadmit\tpacked=100 limit=32000`)).toEqual(admitted);
  });

  it("figures keep any tab after the third one; empty fields are fields", () => {
    expect(parseDecisionRecord(`${FP}\t1\treject_host_pressure\tpsi=12.40\tx=1`)).toEqual({ fingerprint: FP, attempt: "1", kind: "reject_host_pressure", figures: "psi=12.40\tx=1" });
    expect(parseDecisionRecord("\t\t\t")).toEqual({ fingerprint: "", attempt: "", kind: "", figures: "" });
  });

  it("no field, or text without four fields, is no record", () => {
    expect(parseDecisionRecord(null)).toBeNull();
    expect(parseDecisionRecord("")).toBeNull();
    expect(parseDecisionRecord(`${FP}\t0\tadmit`)).toBeNull();
  });
});

describe("checkDecisionRecord (check_record)", () => {
  it("no record: decided afresh", () => {
    expect(checkDecisionRecord(null, FP, 0)).toEqual({ kind: "fresh" });
  });

  it("a different payload under the id: conflict, naming the first decision", () => {
    expect(checkDecisionRecord(admitted, OTHER_FP, 0)).toEqual({ kind: "conflict", storedKind: "admit", storedFigures: "packed=100 limit=32000" });
    // Whatever the attempt, and whatever the first decision was.
    expect(checkDecisionRecord(rejected, OTHER_FP, 3)).toEqual({ kind: "conflict", storedKind: "reject_packed_tokens", storedFigures: "packed=48000 limit=32000" });
  });

  it("the same job, same attempt: redelivery of the stored decision, admit or reject", () => {
    expect(checkDecisionRecord(admitted, FP, 0)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=100 limit=32000" });
    expect(checkDecisionRecord(rejected, FP, 0)).toEqual({ kind: "redelivery", storedKind: "reject_packed_tokens", storedFigures: "packed=48000 limit=32000" });
  });

  it("the same job admitted before, at another attempt (gate recovery bumped it): still the stored admit", () => {
    expect(checkDecisionRecord(admitted, FP, 2)).toEqual({ kind: "redelivery", storedKind: "admit", storedFigures: "packed=100 limit=32000" });
  });

  it("a new attempt of a rejected job: decided afresh", () => {
    expect(checkDecisionRecord(rejected, FP, 1)).toEqual({ kind: "fresh" });
  });

  it("attempts compare as the hash's text, as in Lua", () => {
    expect(checkDecisionRecord({ ...rejected, attempt: "01" }, FP, 1)).toEqual({ kind: "fresh" });
  });
});

describe("checkUnheardDecision (a decision sent, its reply lost, the job gone from the gate's list)", () => {
  it("a record of this payload at this attempt: the script ran, its decision is the gate's, admit or reject", () => {
    expect(checkUnheardDecision(admitted, FP, 0)).toEqual({ kind: "applied", storedKind: "admit", storedFigures: "packed=100 limit=32000" });
    expect(checkUnheardDecision(rejected, FP, 0)).toEqual({ kind: "applied", storedKind: "reject_packed_tokens", storedFigures: "packed=48000 limit=32000" });
  });

  it("no record, another attempt's (a recovered copy is decided at attempt+1), or another payload's: not this gate's decision", () => {
    expect(checkUnheardDecision(null, FP, 0)).toEqual({ kind: "not_ours", stored: null });
    expect(checkUnheardDecision({ ...admitted, attempt: "1" }, FP, 0)).toEqual({ kind: "not_ours", stored: { ...admitted, attempt: "1" } });
    expect(checkUnheardDecision(rejected, OTHER_FP, 0)).toEqual({ kind: "not_ours", stored: rejected });
  });
});
