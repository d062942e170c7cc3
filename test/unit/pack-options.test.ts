import { describe, expect, it } from "vitest";
import { ordinal, packedSummary, resolvePackOptions } from "../../src/commands/pack.run.js";
import type { RawPackOptions } from "../../src/commands/pack.js";
import { UsageError } from "../../src/errors.js";

// pack.ts's defaults, as commander hands them over.
const defaults: RawPackOptions = {
  queue: "jobs",
  jobs: "8",
  files: "8",
  promptTokens: "24000",
  completionTokens: "256",
  deadline: "8s",
  upstreamAge: "0s",
  hostClass: "shared-free",
};
const NOW = 1_764_480_000_123;

function usageMessage(overrides: Partial<RawPackOptions>): string {
  try {
    resolvePackOptions({ ...defaults, ...overrides }, NOW);
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as UsageError).message;
  }
  throw new Error(`accepted ${JSON.stringify(overrides)}`);
}

describe("resolvePackOptions against the job schema", () => {
  it("--jobs stops at a million: a typo of a few zeros would push for hours", () => {
    expect(resolvePackOptions({ ...defaults, jobs: "1000000" }, NOW).jobs).toBe(1_000_000);
    expect(usageMessage({ jobs: "100000000" })).toBe("--jobs: 100000000 is more than one pack pushes (at most 1000000)");
  });

  it("accepts the defaults and the schema's own edges", () => {
    expect(resolvePackOptions(defaults, NOW).promptTokens).toBe(24000);
    expect(resolvePackOptions({ ...defaults, promptTokens: "10000000", deadline: "168h", files: "1000000" }, NOW).deadlineMs).toBe(168 * 3_600_000);
    // enqueue_ts = 1, the oldest the schema takes
    expect(resolvePackOptions({ ...defaults, upstreamAge: `${NOW - 1}ms` }, NOW).upstreamAgeMs).toBe(NOW - 1);
  });

  it.each([
    [{ promptTokens: "20000000" }, "--prompt-tokens", "prompt_tokens=20000000"],
    [{ completionTokens: "10000001" }, "--completion-tokens", "completion_tokens=10000001"],
    [{ files: "1000001" }, "--files", "files=1000001"],
    [{ deadline: "200h" }, "--deadline", "deadline_ms=720000000"],
    [{ upstreamAge: "1000000h" }, "--upstream-age", `enqueue_ts=${NOW - 3_600_000_000_000}`],
    [{ upstreamAge: `${NOW}ms` }, "--upstream-age", "enqueue_ts=0"],
  ] as const)("%j is a usage error naming %s", (overrides, flag, field) => {
    const message = usageMessage(overrides);
    expect(message.startsWith(`${flag}: `)).toBe(true);
    expect(message).toContain(field);
  });

  it("names every offending flag at once", () => {
    const message = usageMessage({ promptTokens: "20000000", deadline: "200h" });
    expect(message).toContain("--prompt-tokens");
    expect(message).toContain("--deadline");
  });
});

describe("pack's summary line", () => {
  it("names one job as job=N, not the range N..N", () => {
    expect(packedSummary("jobs", ["8"], 24000)).toBe("packed 1 job(s) onto jobs (job=8), 24000 prompt tokens");
  });
  it("names several jobs as a range", () => {
    expect(packedSummary("jobs", ["1", "2", "3"], 72000)).toBe("packed 3 job(s) onto jobs (job=1..3), 72000 prompt tokens");
  });
  it("names no job when none was pushed (interrupted at once)", () => {
    expect(packedSummary("jobs", [], 0)).toBe("packed 0 job(s) onto jobs, 0 prompt tokens");
  });
  // QA: an interrupted pack's summary read as if every job asked for was packed.
  it("an interrupted pack says how many of those asked for were not packed", () => {
    expect(packedSummary("jobs", ["1", "2", "3"], 72000, 5)).toBe("packed 3 job(s) onto jobs (job=1..3), 72000 prompt tokens; 5 of 8 not packed");
    expect(packedSummary("jobs", [], 0, 2)).toBe("packed 0 job(s) onto jobs, 0 prompt tokens; 2 of 2 not packed");
  });
});

describe("ordinal", () => {
  it("names a job's place in the pack, which has no id before it is pushed", () => {
    expect([1, 2, 3, 4, 10, 11, 12, 13, 21, 22, 23, 101, 111, 112].map(ordinal)).toEqual(["1st", "2nd", "3rd", "4th", "10th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]);
  });
});
