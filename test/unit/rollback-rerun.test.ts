// The command an interrupted rollback names to finish it (QA: after
// `rollback --name X`, a stop past the drills named a plain rollback, which
// reaches every drill in the state dir).
import { describe, expect, it } from "vitest";
import { interruptedRerun } from "../../src/commands/rollback.run.js";

const drill = "drill --state-dir /tmp/s";

describe("interruptedRerun", () => {
  it.each([
    ["in a drill, plain rollback", { name: undefined, queue: undefined }, { name: "smoke" }, `${drill} rollback --name smoke`],
    ["in a drill, --queue kept", { name: undefined, queue: "q1" }, { name: "smoke" }, `${drill} rollback --name smoke --queue q1`],
    ["before the drills (--queue, ups still starting), as asked", { name: "smoke", queue: "q1" }, { name: "", before: true as const }, `${drill} rollback --name smoke --queue q1`],
    ["past the drills, plain rollback", { name: undefined, queue: undefined }, { name: "", cgroups: true as const }, `${drill} rollback`],
    ["past the drills, --name kept", { name: "smoke", queue: undefined }, { name: "", cgroups: true as const }, `${drill} rollback --name smoke`],
    ["past the drills, --name and --queue kept", { name: "smoke", queue: "q1" }, { name: "", cgroups: true as const }, `${drill} rollback --name smoke --queue q1`],
    // Without --queue-only the rerun is every drill in the state dir too.
    ["the queue alone, --queue-only kept", { name: undefined, queue: "q1", queueOnly: true }, { name: "", before: true as const }, `${drill} rollback --queue q1 --queue-only`],
  ])("%s", (_case, asked, current, expected) => {
    expect(interruptedRerun(drill, asked, current)).toBe(expected);
  });
});
