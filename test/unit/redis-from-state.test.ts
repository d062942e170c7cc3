import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { commandRedisUrl, DEFAULT_REDIS_URL, leverCommand } from "../../src/context.js";
import { chooseDrillRedis, writeState, type DrillState, type StateEntry } from "../../src/drill/state.js";
import { UsageError } from "../../src/errors.js";

/** A drill as `up` records it once running; override what the case is about. */
function drill(name: string, over: Partial<DrillState> = {}): DrillState {
  return {
    version: 1,
    name,
    runId: `${name}-run`,
    drillFile: "drills/smoke.yaml",
    createdAt: "2026-01-01T00:00:00.000Z",
    phase: "running",
    queue: "jobs",
    redis: { url: `redis://127.0.0.1:4${name.length}${name.charCodeAt(0)}`, embedded: { dir: `/var/lib/drill/${name}/redis`, port: 1 } },
    cgroup: { name: "infer", parent: "/", dirs: [] },
    processes: [],
    fileDir: null,
    owner: { pid: 1, startTime: null },
    ...over,
  };
}

const entries = (...states: DrillState[]): StateEntry[] => states.map((state) => ({ name: state.name, state }));
const STATE_DIR = "/var/lib/drill";

describe("chooseDrillRedis: which drill's Redis a command given no --redis means", () => {
  it("the one drill up on the queue: its recorded URL", () => {
    const smoke = drill("smoke", { redis: { url: "redis://127.0.0.1:41234", embedded: { dir: "/x", port: 41234 } } });
    expect(chooseDrillRedis(entries(smoke), { queue: "jobs" }, STATE_DIR)).toEqual({ names: ["smoke"], url: "redis://127.0.0.1:41234" });
    expect(chooseDrillRedis(entries(smoke), { queue: "jobs", cgroupName: "infer" }, STATE_DIR)?.url).toBe("redis://127.0.0.1:41234");
  });

  it("every phase short of complete is up: starting, running, stopped (foreground up ended), rolling_back (a rollback died)", () => {
    for (const phase of ["starting", "running", "stopped", "rolling_back"] as const) {
      expect(chooseDrillRedis(entries(drill("smoke", { phase })), { queue: "jobs" }, STATE_DIR)?.names).toEqual(["smoke"]);
    }
  });

  it("no drill up at all (none, or only rolled-back ones): null, the caller keeps its default", () => {
    expect(chooseDrillRedis([], { queue: "jobs" }, STATE_DIR)).toBeNull();
    expect(chooseDrillRedis(entries(drill("done", { phase: "complete" }), drill("old", { phase: "complete", queue: "batch" })), { queue: "jobs", cgroupName: "infer" }, STATE_DIR)).toBeNull();
  });

  // QA: `gate mode reject_all` with no --queue while drill qa-a ran on queue qq
  // flipped jobs:mode on 127.0.0.1:6379 (exit 0) and the drill's gate kept admitting.
  it("a drill up on another queue: bad usage naming it, its queue and Redis, and the flag that reaches it", () => {
    const qa = drill("qa-a", { queue: "qq", redis: { url: "redis://127.0.0.1:41234", embedded: null }, cgroup: { name: "qa-a", parent: "self", dirs: [] } });
    const choose = () => chooseDrillRedis(entries(qa, drill("done", { phase: "complete" })), { queue: "jobs" }, STATE_DIR);
    expect(choose).toThrow(UsageError);
    expect(choose).toThrow(
      "drill qa-a is up in /var/lib/drill on queue qq (redis redis://127.0.0.1:41234), not on queue jobs: give --queue qq for its Redis, or --redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose",
    );
  });

  it("a drill up on the queue but another cgroup (watch, gate, worker --name left at infer): names --name", () => {
    const qa = drill("qa-a", { queue: "qq", redis: { url: "redis://:pw@127.0.0.1:41234", embedded: null }, cgroup: { name: "qa-a", parent: "self", dirs: [] } });
    expect(() => chooseDrillRedis(entries(qa), { queue: "qq", cgroupName: "infer" }, STATE_DIR)).toThrow(
      "drill qa-a is up in /var/lib/drill on queue qq and cgroup qa-a (redis redis://:***@127.0.0.1:41234), not on queue qq and cgroup infer: give --name qa-a for its Redis, or --redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose",
    );
    expect(() => chooseDrillRedis(entries(qa), { queue: "jobs", cgroupName: "infer" }, STATE_DIR)).toThrow("give --queue qq --name qa-a for its Redis");
  });

  it("several drills up, none on the queue: each named with the flags that reach it", () => {
    const a = drill("a", { queue: "qa", redis: { url: "redis://127.0.0.1:41001", embedded: null } });
    const b = drill("b", { queue: "jobs", redis: { url: "redis://127.0.0.1:41002", embedded: null }, cgroup: { name: "infer2", parent: "/", dirs: [] } });
    expect(() => chooseDrillRedis(entries(a, b), { queue: "jobs", cgroupName: "infer" }, STATE_DIR)).toThrow(
      "drills are up in /var/lib/drill, none on queue jobs and cgroup infer: a on queue qa and cgroup infer (redis redis://127.0.0.1:41001): --queue qa; b on queue jobs and cgroup infer2 (redis redis://127.0.0.1:41002): --name infer2. Give those flags for that drill's Redis, or --redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose",
    );
  });

  it("a drill up that records no Redis yet (up stopped before it had one): still up, so bad usage, never the default", () => {
    const early = drill("early", { phase: "starting", redis: { url: "", embedded: null } });
    expect(() => chooseDrillRedis(entries(early), { queue: "jobs" }, STATE_DIR)).toThrow(
      "drill early is up in /var/lib/drill on queue jobs but records no Redis yet: give --redis <url> (or DRILL_REDIS_URL)",
    );
    expect(() => chooseDrillRedis(entries(early), { queue: "batch" }, STATE_DIR)).toThrow(
      "drill early is up in /var/lib/drill on queue jobs (no Redis recorded yet), not on queue batch: give --redis <url> (or DRILL_REDIS_URL) to mean another Redis on purpose",
    );
  });

  it("pack and gate mode (no --name) do not filter on the cgroup; a drill that recorded no cgroup yet cannot be ruled out by --name", () => {
    const other = drill("smoke", { cgroup: { name: "infer2", parent: "/", dirs: [] } });
    expect(chooseDrillRedis(entries(other), { queue: "jobs" }, STATE_DIR)?.names).toEqual(["smoke"]);
    expect(chooseDrillRedis(entries(drill("early", { cgroup: null })), { queue: "jobs", cgroupName: "infer" }, STATE_DIR)?.names).toEqual(["early"]);
  });

  it("several drills with different Redis: bad usage naming each and asking for --redis", () => {
    const a = drill("a", { redis: { url: "redis://127.0.0.1:41001", embedded: null } });
    const b = drill("b", { redis: { url: "redis://:secret@127.0.0.1:41002", embedded: null } });
    const choose = () => chooseDrillRedis(entries(a, b), { queue: "jobs", cgroupName: "infer" }, STATE_DIR);
    expect(choose).toThrow(UsageError);
    expect(choose).toThrow(/several drills in \/var\/lib\/drill are up on queue jobs and cgroup infer: a \(redis:\/\/127\.0\.0\.1:41001\), b \(redis:\/\/:\*\*\*@127\.0\.0\.1:41002\); pick one with --redis <url>/);
    // only those that match count
    expect(chooseDrillRedis(entries(a, { ...b, queue: "other" }), { queue: "jobs" }, STATE_DIR)?.names).toEqual(["a"]);
  });

  it("several drills on one Redis (and queue): that Redis, naming them all", () => {
    const url = "redis://10.0.0.5:6379";
    const a = drill("a", { redis: { url, embedded: null } });
    const b = drill("b", { redis: { url, embedded: null }, cgroup: { name: "infer2", parent: "/", dirs: [] } });
    expect(chooseDrillRedis(entries(a, b), { queue: "jobs" }, STATE_DIR)).toEqual({ names: ["a", "b"], url });
  });

  it("a state file that cannot be read might be the drill: bad usage naming it, asking for --redis", () => {
    const unreadable = "/var/lib/drill/broken/state.json is not a drill state file (Unexpected end of JSON input); move it aside to continue";
    const bad: StateEntry = { name: "broken", unreadable, error: new Error(unreadable) };
    const choose = () => chooseDrillRedis([bad, ...entries(drill("smoke"))], { queue: "jobs" }, STATE_DIR);
    expect(choose).toThrow(UsageError);
    expect(choose).toThrow(/broken\/state\.json is not a drill state file.*give --redis <url>/);
  });
});

describe("commandRedisUrl: flag, env, the drill up in the state dir, default", () => {
  let dir = "";
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = "";
  });
  const stateDir = (...states: DrillState[]) => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-unit-rfs-"));
    for (const state of states) {
      mkdirSync(path.join(dir, state.name), { recursive: true });
      writeState(dir, state);
    }
    return dir;
  };

  it("an explicit --redis (or DRILL_REDIS_URL) wins over a drill up, silently", async () => {
    const notes: string[] = [];
    const url = await commandRedisUrl({ redisUrl: "redis://127.0.0.1:5555", stateDir: stateDir(drill("smoke")) }, { queue: "jobs" }, (l) => notes.push(l));
    expect(url).toBe("redis://127.0.0.1:5555");
    expect(notes).toEqual([]);
  });

  it("the drill up: its URL, said once with the state file it came from", async () => {
    const smoke = drill("smoke", { redis: { url: "redis://127.0.0.1:41234", embedded: { dir: "/x", port: 41234 } } });
    const notes: string[] = [];
    const sd = stateDir(smoke, drill("old", { phase: "complete" }));
    expect(await commandRedisUrl({ redisUrl: undefined, stateDir: sd }, { queue: "jobs" }, (l) => notes.push(l))).toBe("redis://127.0.0.1:41234");
    expect(notes).toEqual([`redis: drill smoke's redis at redis://127.0.0.1:41234 (from ${path.join(sd, "smoke", "state.json")})`]);
  });

  // QA: `drill pack` with no drill up pushed 8 jobs onto the host's own Redis without a word of where.
  it("no drill up (only a rolled-back one, or no state dir at all): the default, said with the state dir looked in", async () => {
    const notes: string[] = [];
    const sd = stateDir(drill("old", { phase: "complete" }));
    expect(await commandRedisUrl({ redisUrl: undefined, stateDir: sd }, { queue: "jobs" }, (l) => notes.push(l))).toBe(DEFAULT_REDIS_URL);
    const none = path.join(os.tmpdir(), "drill-no-such-dir-rfs");
    expect(await commandRedisUrl({ redisUrl: undefined, stateDir: none }, { queue: "jobs" }, (l) => notes.push(l))).toBe(DEFAULT_REDIS_URL);
    expect(notes).toEqual([sd, none].map((dir) => `redis: no drill is up in ${dir}: ${DEFAULT_REDIS_URL}, the default (--redis or DRILL_REDIS_URL for another)`));
  });

  it("a drill up on another queue: exit 2 (UsageError) before any connection, nothing said as if chosen", async () => {
    const notes: string[] = [];
    const sd = stateDir(drill("qa-a", { queue: "qq" }));
    const choose = commandRedisUrl({ redisUrl: undefined, stateDir: sd }, { queue: "jobs" }, (l) => notes.push(l));
    await expect(choose).rejects.toThrow(UsageError);
    await expect(choose).rejects.toThrow(`drill qa-a is up in ${sd} on queue qq`);
    expect(notes).toEqual([]);
  });

  it("a corrupt state.json: exit 2 naming it", async () => {
    const sd = stateDir(drill("smoke"));
    mkdirSync(path.join(sd, "broken"));
    writeFileSync(path.join(sd, "broken", "state.json"), "{");
    await expect(commandRedisUrl({ redisUrl: undefined, stateDir: sd }, { queue: "jobs" })).rejects.toThrow(UsageError);
    await expect(commandRedisUrl({ redisUrl: undefined, stateDir: sd }, { queue: "jobs" })).rejects.toThrow(path.join(sd, "broken", "state.json"));
  });
});

describe("leverCommand", () => {
  it("names the Redis (password hidden) and a queue other than jobs", () => {
    expect(leverCommand("redis://127.0.0.1:41234", "jobs", "reject_all")).toBe("drill --redis redis://127.0.0.1:41234 gate mode reject_all");
    expect(leverCommand("redis://:pw@10.0.0.5:6379", "batch", "admit")).toBe("drill --redis 'redis://:***@10.0.0.5:6379' gate mode admit --queue batch");
    // Where the command was run with other trees: they go with it (admit reads host PSI there).
    expect(leverCommand("redis://127.0.0.1:41234", "jobs", "admit", { stateDir: "/tmp/st", procfs: "/tmp/fake/proc" })).toBe(
      "drill --state-dir /tmp/st --procfs /tmp/fake/proc --redis redis://127.0.0.1:41234 gate mode admit",
    );
  });
});
