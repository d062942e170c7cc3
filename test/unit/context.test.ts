import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redactUrl, redisDatabase, resolveGlobalOptions } from "../../src/context.js";
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
  // QA W 10: read as database "tmp/r.sock", "not a whole number".
  it("redis:///path is no socket URL: the message gives the path itself", () => {
    expect(() => resolveGlobalOptions({ redis: "redis:///tmp/r.sock" }, {})).toThrow(/^--redis: "redis:\/\/\/tmp\/r\.sock" names no host: for a unix socket give its path itself \(\/tmp\/r\.sock, with \?db=N for a database\)$/);
    expect(resolveGlobalOptions({ redis: "redis://127.0.0.1:6379/3" }, {}).redisUrl).toBe("redis://127.0.0.1:6379/3");
  });
  it("names DRILL_REDIS_URL when the bad URL came from the environment", () => {
    expect(() => resolveGlobalOptions({}, { DRILL_REDIS_URL: "redis://[::1" })).toThrow("DRILL_REDIS_URL");
  });
  // QA: commander's .env() puts DRILL_REDIS_URL into the flag; the message said --redis.
  it("names DRILL_REDIS_URL when commander read it into --redis from the environment", () => {
    expect(() => resolveGlobalOptions({ redis: "notaurl", redisSource: "env" }, {})).toThrow(/^DRILL_REDIS_URL: not a URL: "notaurl"/);
    expect(() => resolveGlobalOptions({ redis: "notaurl", redisSource: "cli" }, {})).toThrow(/^--redis: not a URL/);
  });
  it("keeps a password out of the message", () => {
    expect(() => resolveGlobalOptions({ redis: "redis://:hunter2@h:1:2" }, {})).toThrow(/^--redis: not a URL: "redis:\/\/:\*\*\*@h:1:2"/);
  });
});

describe("redisDatabase: the database a Redis URL selects", () => {
  it.each([
    ["redis://127.0.0.1:6379", 0],
    ["redis://127.0.0.1:6379/", 0],
    ["redis://127.0.0.1:6379/3", 3],
    ["rediss://user:pw@cache:6380/15", 15],
    ["redis://127.0.0.1:6379/?db=4", 4],
    ["redis://127.0.0.1:6379/5?db=4", 5],
    ["/run/redis.sock", 0],
    ["/run/redis.sock?db=2", 2],
  ])("%s is db %d", (url, db) => {
    expect(redisDatabase(url)).toBe(db);
  });
  // ioredis parseInt()s it: /abc was SELECT NaN, /1.5 db 1, /1/2 db 1.
  it.each(["abc", "1.5", "-1", "1/2", "1e3", "0x1", "99999999999999999999"])("/%s is exit 2 naming the flag, before any connection", (db) => {
    expect(() => resolveGlobalOptions({ redis: `redis://:hunter2@127.0.0.1:6379/${db}` }, {})).toThrow(UsageError);
    expect(() => resolveGlobalOptions({ redis: `redis://:hunter2@127.0.0.1:6379/${db}` }, {})).toThrow(
      `--redis: database "${db}" in redis://:***@127.0.0.1:6379/${db} is not a whole number`,
    );
    expect(() => resolveGlobalOptions({}, { DRILL_REDIS_URL: `redis://127.0.0.1:6379/${db}` })).toThrow(/^DRILL_REDIS_URL: database/);
  });
  it("checks ?db= of a socket path too", () => {
    expect(() => resolveGlobalOptions({ redis: "/run/redis.sock?db=x" }, {})).toThrow(/^--redis: database "x"/);
  });
});

describe("resolveGlobalOptions: paths", () => {
  it("makes a relative --state-dir, --procfs, --sysfs absolute (up's children and a rollback from another directory read them)", () => {
    // procfs and sysfs roots must exist: two dirs of the project, relative to the tests' cwd (its root).
    const g = resolveGlobalOptions({ stateDir: "state", procfs: "test/unit", sysfs: "./src" }, {});
    expect(g.stateDir).toBe(path.join(process.cwd(), "state"));
    expect(g.procfs).toBe(path.join(process.cwd(), "test/unit"));
    expect(g.sysfs).toBe(path.join(process.cwd(), "src"));
    expect(resolveGlobalOptions({}, { DRILL_STATE_DIR: "rel" }).stateDir).toBe(path.join(process.cwd(), "rel"));
    expect(resolveGlobalOptions({}, {}).stateDir).toBe("/var/lib/drill");
  });
  it("an empty path is bad usage naming where it came from", () => {
    expect(() => resolveGlobalOptions({ stateDir: "" }, {})).toThrow("--state-dir");
    expect(() => resolveGlobalOptions({}, { DRILL_SYSFS: "" })).toThrow("DRILL_SYSFS");
  });
});

describe("resolveGlobalOptions: --state-dir, --procfs, --sysfs are directories", () => {
  let tmp = "";
  beforeAll(() => {
    tmp = mkdtempSync(path.join(tmpdir(), "drill-context-"));
    writeFileSync(path.join(tmp, "file"), "");
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it("a regular file is exit 2 naming the flag (rollback said nothing to roll back; up and setup failed with ENOTDIR)", () => {
    const file = path.join(tmp, "file");
    expect(() => resolveGlobalOptions({ stateDir: file }, {})).toThrow(new UsageError(`--state-dir: ${file} is not a directory`));
    expect(() => resolveGlobalOptions({}, { DRILL_STATE_DIR: file })).toThrow(`DRILL_STATE_DIR: ${file} is not a directory`);
    expect(() => resolveGlobalOptions({ procfs: file }, {})).toThrow(`--procfs: ${file} is not a directory`);
    // QA: a --procfs or --sysfs that is not there read every signal as missing, exit 0; a state dir not there yet is made.
    expect(() => resolveGlobalOptions({ procfs: "/nonexist" }, {})).toThrow(new UsageError("--procfs: /nonexist is not a directory (the /proc tree every kernel file is read under)"));
    expect(() => resolveGlobalOptions({}, { DRILL_SYSFS: "/nonexist" })).toThrow("DRILL_SYSFS: /nonexist is not a directory (the /sys tree every kernel file is read under)");
    // As the CLI passes it: commander read the variable into the flag, and says so (QA: blamed on --sysfs).
    expect(() => resolveGlobalOptions({ sysfs: "/nonexist", sysfsSource: "env" }, { DRILL_SYSFS: "/nonexist" })).toThrow("DRILL_SYSFS: /nonexist is not a directory");
    expect(() => resolveGlobalOptions({ sysfs: "/nonexist", sysfsSource: "cli" }, { DRILL_SYSFS: "/other" })).toThrow("--sysfs: /nonexist is not a directory");
    expect(resolveGlobalOptions({ stateDir: "/nonexist/state" }, {}).stateDir).toBe("/nonexist/state");
    expect(() => resolveGlobalOptions({ stateDir: path.join(file, "below") }, {})).toThrow(`--state-dir: ${path.join(file, "below")} is not a directory`);
  });

  it("a dir not there yet is fine: the state dir is made on first use", () => {
    expect(resolveGlobalOptions({ stateDir: path.join(tmp, "new", "state") }, {}).stateDir).toBe(path.join(tmp, "new", "state"));
    expect(resolveGlobalOptions({ stateDir: tmp }, {}).stateDir).toBe(tmp);
  });
});

describe("redactUrl", () => {
  it("hides the password whole, also one typed with an @ or a / in it", () => {
    expect(redactUrl("redis://:secret@127.0.0.1:6379/2")).toBe("redis://:***@127.0.0.1:6379/2");
    expect(redactUrl("rediss://user:pw@cache:6380")).toBe("rediss://user:***@cache:6380");
    expect(redactUrl("redis://u:p@ss@127.0.0.1:6379")).toBe("redis://u:***@127.0.0.1:6379");
    expect(redactUrl("redis://:se/cret@127.0.0.1:6379")).toBe("redis://:***@127.0.0.1:6379");
    expect(redactUrl("redis://token@127.0.0.1")).toBe("redis://***@127.0.0.1");
  });

  // ioredis authenticates with a query's password too (QA: shown in clear in up's output, its log and every hint).
  it("hides a password given in the query, of a URL or a socket path", () => {
    expect(redactUrl("redis://127.0.0.1:7472/6?password=s3cret")).toBe("redis://127.0.0.1:7472/6?password=***");
    expect(redactUrl("redis://127.0.0.1:7472?db=2&password=s3cret&x=1")).toBe("redis://127.0.0.1:7472?db=2&password=***&x=1");
    expect(redactUrl("/run/redis.sock?password=s3cret")).toBe("/run/redis.sock?password=***");
    expect(redactUrl("redis://u:pw@127.0.0.1?password=s3cret")).toBe("redis://u:***@127.0.0.1?password=***");
  });

  it("leaves a URL without credentials as it is", () => {
    for (const url of ["redis://127.0.0.1:6379", "redis://127.0.0.1:6379/3", "/run/redis.sock", "not a url"]) expect(redactUrl(url)).toBe(url);
  });
});
