import { describe, expect, it } from "vitest";
import { stoppedByFailure, workerOomKill } from "../../src/drill/up.js";

describe("up: the worker OOM-killed in its cgroup (RELIABILITY 4)", () => {
  const line = (what: string) => `drill: worker pid 7 was killed by SIGKILL${what}; its working list is given back by the next worker`;
  it.each([
    ["the OOM killer, counted", line(": the OOM killer (cgroup oom_kill 0 → 1)"), { before: 0, after: 1 }],
    ["a kill -9 (count unchanged)", line(": not the OOM killer (oom_kill unchanged): a teardown, rollback or kill -9 (cgroup oom_kill 1 → 1)"), null],
    ["likely, count unreadable", line(": likely the OOM killer, or someone's kill -9"), null],
    ["another error", "drill: cannot connect to redis", null],
    ["no line", null, null],
  ])("%s", (_n, text, expected) => {
    expect(workerOomKill(text)).toEqual(expected);
  });

  it("an OOM kill stops the drill but is no failure of up; anything else gone is", () => {
    expect(stoppedByFailure([])).toBe(false);
    expect(stoppedByFailure([{ cause: "oom_killed" }])).toBe(false);
    expect(stoppedByFailure([{ cause: "oom_killed" }, { cause: "exited" }])).toBe(true);
    expect(stoppedByFailure([{ cause: "gone" }])).toBe(true);
  });
});
