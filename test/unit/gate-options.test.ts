import { describe, expect, it } from "vitest";
import type { RawGateOptions } from "../../src/commands/gate.js";
import { resolveGateOptions } from "../../src/commands/gate.run.js";
import { UsageError } from "../../src/errors.js";

const raw: RawGateOptions = {
  queue: "jobs", name: "infer", psiLimit: "10", psiRateLimit: "10", slackLimit: "1500ms", packedTokenLimit: "32000", interval: "1s",
  pressureClear: "5s", retryHostClass: "dedicated", retryBudget: "3", gateId: "g1", dryRun: false,
};

describe("gate --psi-rate-limit <pct>", () => {
  it.each([
    ["10%", 10],
    ["12.5%", 12.5],
    ["10", 10],
  ])("%j is accepted", (text, pct) => {
    expect(resolveGateOptions({ ...raw, psiRateLimit: text }, false).options.config.psiRateLimit).toBe(pct);
  });

  it.each(["101%", "10%%", "abc"])("%j is exit 2 naming the flag", (text) => {
    expect(() => resolveGateOptions({ ...raw, psiRateLimit: text }, false)).toThrow(UsageError);
    expect(() => resolveGateOptions({ ...raw, psiRateLimit: text }, false)).toThrow(/^--psi-rate-limit: /);
  });
});

describe("gate --psi-limit (a PSI avg10: a share of time, 0-100)", () => {
  it.each([["10", 10], ["0", 0], ["100", 100], ["12.5", 12.5]])("%j is accepted", (text, limit) => {
    expect(resolveGateOptions({ ...raw, psiLimit: text }, false).options.config.psiLimit).toBe(limit);
  });

  // avg10 never exceeds 100: a limit over it would silently disable the pressure check.
  it.each(["101", "150", "-1", "abc"])("%j is exit 2 naming the flag", (text) => {
    expect(() => resolveGateOptions({ ...raw, psiLimit: text }, false)).toThrow(UsageError);
    expect(() => resolveGateOptions({ ...raw, psiLimit: text }, false)).toThrow(/^--psi-limit: /);
  });
});

// QA: a nack carries attempt + 1 and a job's attempt is at most 1000 (job.ts): a budget over it nacked attempt 1001, which any later gate sends to dead as invalid.
describe("gate --retry-budget (at most a job's largest attempt, 1000)", () => {
  it.each([["0", 0], ["3", 3], ["1000", 1000]])("%j is accepted", (text, budget) => {
    expect(resolveGateOptions({ ...raw, retryBudget: text }, false).options.retryBudget).toBe(budget);
  });

  it.each(["1001", "5000", "9007199254740991"])("%j is exit 2 naming the flag and the limit", (text) => {
    expect(() => resolveGateOptions({ ...raw, retryBudget: text }, false)).toThrow(UsageError);
    expect(() => resolveGateOptions({ ...raw, retryBudget: text }, false)).toThrow(`--retry-budget: "${text}" must be at most 1000`);
  });
});
