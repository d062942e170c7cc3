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
  // QA AB 2: on a full state dir it exited on an AOF write error, and up said "killed by a signal (SIGKILL, or the OOM killer)".
  it("its own fatal exit (Exiting...) is quoted as its last words; an AOF write error says the disk", () => {
    const aof = "20481:M 04 Dec 2026 15:54:45.194 # Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting...";
    expect(redisGoneText(aof)).toBe(`its AOF could not be written (a full disk, most likely: df its dir), so it exited: ${aof}`);
    const load = "4242:M 03 Dec 2026 06:00:00.123 # Bad file format reading the append only file appendonly.aof.1.incr.aof: make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. Exiting...";
    expect(redisGoneText(load)).toBe(load);
  });
  it("no log line: nothing to say", () => {
    expect(redisGoneText(null)).toBeNull();
  });
});
