import { describe, expect, it } from "vitest";
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
