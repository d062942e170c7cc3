import { describe, expect, it } from "vitest";
import { redisGoneText } from "../../src/drill/up.js";

// QA: after a kill -9 of the embedded redis-server, up quoted its last log line, a normal start-up line, as if it were the cause.
describe("up: what the embedded redis-server's log says of its end", () => {
  const startup = "4242:M 03 Dec 2026 06:00:00.123 * Ready to accept connections tcp";
  it("a log that ends mid-run (SIGKILL, the OOM killer) is said to have no exit message, its last line quoted as such", () => {
    expect(redisGoneText(startup)).toBe(`no exit message in its log: killed by a signal (SIGKILL, or the OOM killer); its last line: ${startup}`);
  });
  it.each([
    ["a shutdown", "4242:M 03 Dec 2026 06:00:09.001 # Redis is now ready to exit, bye bye..."],
    ["a crash report's end", "  Some other issues could be detected by redis-server --check-system"],
    ["a crash report's header", "=== REDIS BUG REPORT END. Make sure to include from START to END. ==="],
  ])("%s is quoted as it is: its own last words", (_n, line) => {
    expect(redisGoneText(line)).toBe(line);
  });
  it("no log line: nothing to say", () => {
    expect(redisGoneText(null)).toBeNull();
  });
});
