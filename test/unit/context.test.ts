import { describe, expect, it } from "vitest";
import path from "node:path";
import { resolveGlobalOptions } from "../../src/context.js";
import { UsageError } from "../../src/errors.js";

describe("resolveGlobalOptions: the Redis URL", () => {
  it("takes redis://, rediss:// and a unix socket path", () => {
    for (const url of ["redis://127.0.0.1:6379", "rediss://user:pw@cache:6380/2", "/run/redis.sock"]) {
      expect(resolveGlobalOptions({ redis: url }, {}).redisUrl).toBe(url);
    }
  });
  it.each([
    ["redis://127.0.0.1:99999", "--redis"],
    ["127.0.0.1:6379", "--redis"],
    ["http://127.0.0.1:6379", "--redis"],
  ])("rejects %s as bad usage naming %s", (url, flag) => {
    expect(() => resolveGlobalOptions({ redis: url }, {})).toThrow(UsageError);
    expect(() => resolveGlobalOptions({ redis: url }, {})).toThrow(flag);
  });
  it("names DRILL_REDIS_URL when the bad URL came from the environment", () => {
    expect(() => resolveGlobalOptions({}, { DRILL_REDIS_URL: "redis://[::1" })).toThrow("DRILL_REDIS_URL");
  });
});

describe("resolveGlobalOptions: paths", () => {
  it("makes a relative --state-dir, --procfs, --sysfs absolute (up's children and a rollback from another directory read them)", () => {
    const g = resolveGlobalOptions({ stateDir: "state", procfs: "fake/proc", sysfs: "./fake/sys" }, {});
    expect(g.stateDir).toBe(path.join(process.cwd(), "state"));
    expect(g.procfs).toBe(path.join(process.cwd(), "fake/proc"));
    expect(g.sysfs).toBe(path.join(process.cwd(), "fake/sys"));
    expect(resolveGlobalOptions({}, { DRILL_STATE_DIR: "rel" }).stateDir).toBe(path.join(process.cwd(), "rel"));
    expect(resolveGlobalOptions({}, {}).stateDir).toBe("/var/lib/drill");
  });
  it("an empty path is bad usage naming where it came from", () => {
    expect(() => resolveGlobalOptions({ stateDir: "" }, {})).toThrow("--state-dir");
    expect(() => resolveGlobalOptions({}, { DRILL_SYSFS: "" })).toThrow("DRILL_SYSFS");
  });
});
