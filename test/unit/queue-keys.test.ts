import { describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { UsageError } from "../../src/errors.js";

describe("queueKeys", () => {
  it("derives every key from the queue's name (DESIGN's table)", () => {
    const keys = queueKeys("q2");
    expect([keys.ready, keys.seq, keys.admitted, keys.drain, keys.mode, keys.inflight, keys.events, keys.stats]).toEqual(["q2", "q2:seq", "q2:admitted", "q2_drain", "q2:mode", "q2:inflight", "q2:events", "q2:stats"]);
  });

  // QA: `gate --queue jobs_drain` admitted the jobs rollback had drained from queue jobs.
  it("refuses a name that is another queue's rollback drain, naming that queue", () => {
    expect(() => queueKeys("jobs_drain")).toThrow(UsageError);
    expect(() => queueKeys("jobs_drain")).toThrow(/^--queue: "jobs_drain" is the rollback drain of queue "jobs"/);
    expect(queueKeys("drain").ready).toBe("drain");
    expect(queueKeys("jobs_drained").ready).toBe("jobs_drained");
  });
});
