import { describe, expect, it } from "vitest";
import { redisArgMovedOut } from "../../src/commands/up.run.js";

// The background up lives as long as the drill: its --redis (a password, maybe) goes to its environment, not argv.
describe("redisArgMovedOut", () => {
  it.each([
    [["bin/drill.js", "--redis", "redis://:pw@h:1", "up", "--detach"], ["bin/drill.js", "up", "--detach"], "redis://:pw@h:1"],
    [["bin/drill.js", "--redis=redis://:pw@h:1", "up", "--detach"], ["bin/drill.js", "up", "--detach"], "redis://:pw@h:1"],
    [["bin/drill.js", "up", "--detach"], ["bin/drill.js", "up", "--detach"], undefined],
  ])("%j", (argv, args, redisUrl) => {
    expect(redisArgMovedOut(argv)).toEqual({ args, redisUrl });
  });
});
