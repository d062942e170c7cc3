import { describe, expect, it } from "vitest";
import { refusalHint, refusalText } from "../../src/queue/refusal.js";

// Redis 7.0's own words for each refusal (QA R), and what an operator is told to do about it.
describe("refusalHint", () => {
  it.each([
    ["OOM command not allowed when used memory > 'maxmemory'.", /^redis is full: .*CONFIG SET maxmemory/],
    ["READONLY You can't write against a read only replica.", /^this redis is a read-only replica: point --redis at its primary$/],
    ["NOPERM this user has no permissions to run the 'evalsha' command", /\(ACL\): grant it \(ACL SETUSER/],
    ["ERR The user executing the script can't run this command or subcommand script: f084a1b2, on @user_script:41.", /\(ACL\): grant it/],
    ["NOPERM this redis user may not run XADD on q:events, which this step writes: nothing done", /\(ACL\)/],
    ["BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", /another client's long script/],
    ["LOADING Redis is loading the dataset in memory", /loading its data from disk/],
    ["MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", /lost its link to its primary/],
    ["MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", /cannot save to disk/],
    ["ERR max number of clients reached", /maxclients/],
    ["WRONGPASS invalid username-password pair or user is disabled.", /refuses this user or password: fix the one in --redis/],
    ["NOAUTH Authentication required.", /asks for a password: give it in --redis/],
    ["UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)", /just became a replica: point --redis at its primary/],
  ])("%s", (message, hint) => {
    expect(refusalHint(message)).toMatch(hint);
  });

  it("is null for what is no refusal: an outage, a wrong type, a bad URL", () => {
    for (const message of ["connect ECONNREFUSED 127.0.0.1:6379", "WRONGTYPE Operation against a key holding the wrong kind of value", "Connection is closed.", "ERR unknown command 'FOO'"]) {
      expect(refusalHint(message)).toBeNull();
    }
  });
});

describe("refusalText", () => {
  it("says Redis's words without drill's script sha and line, then the fix", () => {
    const err = Object.assign(new Error("OOM command not allowed when used memory > 'maxmemory'. script: 14c2c54d1f2176b93d05e2c63d2c6030c5899099, on @user_script:94."), { name: "ReplyError" });
    expect(refusalText(err)).toBe("OOM command not allowed when used memory > 'maxmemory'. (redis is full: used_memory is over its maxmemory and its policy evicts nothing, so it refuses writes until maxmemory is raised (CONFIG SET maxmemory) or memory is freed)");
  });

  it("an EXECABORT names the refusal inside the transaction (ioredis's previousErrors)", () => {
    const err = Object.assign(new Error("EXECABORT Transaction discarded because of previous errors."), { name: "ReplyError", previousErrors: [new Error("READONLY You can't write against a read only replica.")] });
    expect(refusalText(err)).toBe("EXECABORT Transaction discarded because of previous errors: READONLY You can't write against a read only replica. (this redis is a read-only replica: point --redis at its primary)");
  });

  it("any other error as it is", () => {
    expect(refusalText(new Error("connect ECONNREFUSED 127.0.0.1:7"))).toBe("connect ECONNREFUSED 127.0.0.1:7");
  });
});
