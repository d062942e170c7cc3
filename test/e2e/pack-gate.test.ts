import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa, type ResultPromise } from "execa";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueKeys } from "../../src/queue/keys.js";
import { DrillQueue } from "../../src/queue/queue.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { assertNoJobLost } from "../helpers/invariants.js";
import { freePort, startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { CALM_PSI, HOT_PSI } from "../helpers/psiText.js";

const root = path.resolve(import.meta.dirname, "../..");

let server: RedisServer;
let redis: Redis;
let tmp: string;
let n = 0;

beforeAll(async () => {
  // The binary runs dist/, built by test/globalSetup.ts.
  expect(existsSync(path.join(root, "dist", "commands", "gate.js"))).toBe(true);
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-e2e" });
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-e2e-"));
}, 120_000);
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function fakeProc(text: string | null): string {
  const procfs = path.join(tmp, `proc${++n}`);
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  if (text !== null) writeFileSync(path.join(procfs, "pressure", "memory"), text);
  return procfs;
}

function drill(args: string[], env: Record<string, string> = {}): ResultPromise<{ reject: false; timeout: number; env: Record<string, string>; cwd: string }> {
  return execa("node", ["bin/drill.js", ...args], {
    cwd: root,
    reject: false,
    timeout: 30_000,
    env: { FORCE_COLOR: "0", DRILL_REDIS_URL: server.url, ...env },
  });
}

const pairs = (flat: string[]) => Array.from({ length: flat.length / 2 }, (_, i) => [flat[2 * i], flat[2 * i + 1]] as const);
const lines = (stdout: unknown) => String(stdout).split("\n").filter((l) => l !== "");

/** Polls a condition every `everyMs` until it holds (0: back to back, for a state that lasts a millisecond). */
async function until(condition: () => Promise<boolean>, timeoutMs = 10_000, everyMs = 10): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !(await condition()); ) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms: ${condition.toString()}`);
    if (everyMs > 0) await new Promise((r) => setTimeout(r, everyMs));
  }
}

describe("drill pack + drill gate (built binary)", () => {
  it("a gate without the worker's own signals says so at its start: a --cgroup-pressure file that does not read, a cgroup not there (with the --parent self hint)", async () => {
    const procfs = fakeProc(CALM_PSI);
    const stateDir = path.join(tmp, `state${++n}`);
    const file = path.join(tmp, "no-such-memory.pressure");
    const byFile = await drill(["--state-dir", stateDir, "--procfs", procfs, "gate", "--queue", `e${++n}`, "--duration", "300ms", "--cgroup-pressure", file]);
    expect(byFile.exitCode, byFile.stderr).toBe(0);
    expect(byFile.stderr).toContain(`gate: --cgroup-pressure ${file}: missing; it decides on host signals alone until the file reads`);

    // The real /proc: `--parent self` is read from this process's own cgroup.
    const byName = await drill(["--state-dir", stateDir, "gate", "--queue", `e${++n}`, "--duration", "300ms", "--name", `nosuch${process.pid}`, "--parent", "self"]);
    expect(byName.exitCode, byName.stderr).toBe(0);
    expect(byName.stderr).toMatch(new RegExp(`^gate: no cgroup nosuch${process.pid} at .+ \\(yet\\): it decides on host signals alone until it appears; check --name and --parent`, "m"));
  });

  // QA: the gate was silent when the worker cgroup went mid-run, deciding on host signals alone from then on.
  it("a gate says when the worker cgroup's signals go mid-run, stop parsing, and when they are back", async () => {
    const procfs = fakeProc(CALM_PSI);
    const file = path.join(tmp, `cg${++n}.pressure`);
    // Whole or not at all (write, then rename): a half-written file would read as unparsable for a sample.
    const put = (text: string) => {
      writeFileSync(`${file}.tmp`, text);
      renameSync(`${file}.tmp`, file);
    };
    put(CALM_PSI);
    const queue = `e${++n}`;
    const gate = drill(["--procfs", procfs, "gate", "--queue", queue, "--interval", "100ms", "--duration", "20s", "--cgroup-pressure", file]);
    let stderr = "";
    gate.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      // Its heartbeat: the gate is in its loop, sampling the file.
      await until(async () => (await redis.hlen(queueKeys(queue).gates)) > 0);
      expect(stderr).not.toContain("worker cgroup signals");
      rmSync(file);
      await until(async () => stderr.includes("gate: worker cgroup signals gone"));
      expect(stderr).toContain("gate: worker cgroup signals gone (the cgroup, or its --cgroup-pressure file, is not there): it decides on host signals alone until they are back");
      put(CALM_PSI);
      await until(async () => stderr.includes("gate: worker cgroup signals read now"));
      expect(stderr).toContain("gate: worker cgroup signals read now: it decides on the cgroup's PSI and swap too");
      // QA: a file that stops parsing mid-run was not said either.
      expect(stderr).not.toContain("PSI unreadable");
      put("garbage\n");
      await until(async () => stderr.includes("gate: worker cgroup PSI unreadable"));
      expect(stderr).toContain("gate: worker cgroup PSI unreadable (its memory.pressure is there but does not parse): it decides on host PSI alone until it reads again");
      put(CALM_PSI);
      await until(async () => stderr.split("gate: worker cgroup signals read now").length === 3);
    } finally {
      gate.kill("SIGINT");
      await gate;
    }
  });

  it("pack 8 × 24000 then gate: admit one, reject_packed_tokens packed=48000 until tokens are released", async () => {
    const queue = `e${++n}`;
    const pack = await drill(["pack", "--jobs", "8", "--prompt-tokens", "24000", "--queue", queue]);
    expect(pack.exitCode).toBe(0);
    expect(lines(pack.stdout).at(-1)).toBe(`packed 8 job(s) onto ${queue} (job=1..8), 192000 prompt tokens`);
    const procfs = fakeProc(CALM_PSI);
    const gate = await drill(["--procfs", procfs, "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "4"]);
    expect(gate.exitCode).toBe(0);
    expect(lines(gate.stdout)).toEqual([
      "admit job=1 packed=24000 limit=32000",
      "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry",
      "reject_packed_tokens job=3 packed=48000 limit=32000 route=retry",
      "reject_packed_tokens job=4 packed=48000 limit=32000 route=retry",
    ]);
    // QA: the gate said nothing of what it ran with, nor that it stopped: its log now opens and closes with both.
    const said = lines(gate.stderr).filter((l) => l.startsWith("gate "));
    expect(said[0]).toMatch(new RegExp(`^gate \\S+: deciding jobs of queue ${queue} on redis://127\\.0\\.0\\.1:\\d+: packed_token_limit=32000 slack_limit_ms=1500 stall_margin_ms=500 psi_limit=10\\.00 psi_rate_limit=10\\.00 interval_ms=200$`));
    expect(said.at(-1)).toMatch(/^gate \S+ stopped \(max_jobs\): decided=4 admit=1 reject_packed_tokens=3 recovered=0 watchdog_fires=0$/);
    expect(await new DrillQueue(redis, queue).releaseTokens("1")).toBe(24000);
    const after = await drill(["--procfs", procfs, "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "4"]);
    expect(lines(after.stdout)[0]).toBe("admit job=5 packed=24000 limit=32000");
    expect(lines(after.stdout)[1]).toBe("reject_packed_tokens job=6 packed=48000 limit=32000 route=retry");
    await assertNoJobLost(redis, queue, ["1", "2", "3", "4", "5", "6", "7", "8"]);
  });

  it("gate --duration on an empty queue: says it stopped for its duration, not a signal, having decided nothing", async () => {
    const queue = `e${++n}`;
    const gate = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms", "--duration", "1s"]);
    expect(gate.exitCode, gate.stderr).toBe(0);
    expect(gate.stdout).toBe("");
    expect(lines(gate.stderr).at(-1)).toMatch(/^gate \S+ stopped \(duration\): decided=0 recovered=0 watchdog_fires=0$/);
  });

  it("host PSI 12.40: every job gets reject_host_pressure psi=12.40", async () => {
    const queue = `e${++n}`;
    await drill(["pack", "--jobs", "3", "--queue", queue]);
    const gate = await drill(["--procfs", fakeProc(HOT_PSI), "gate", "--queue", queue, "--interval", "200ms", "--idle-exit", "500ms"]);
    expect(gate.exitCode).toBe(0);
    expect(lines(gate.stdout)).toEqual(["1", "2", "3"].map((id) => `reject_host_pressure job=${id} psi=12.40 route=retry`));
    expect(lines(gate.stderr).at(-1)).toMatch(/^gate \S+ stopped \(idle\): decided=3 reject_host_pressure=3 recovered=0 watchdog_fires=0$/);
    await assertNoJobLost(redis, queue, ["1", "2", "3"]);
  });

  it("--upstream-age 7s with --deadline 8s: reject_deadline_slack; 60s (the deadline already past): a negative slack_ms", async () => {
    const queue = `e${++n}`;
    const inTime = await drill(["pack", "--jobs", "1", "--upstream-age", "7s", "--deadline", "8s", "--queue", queue]);
    expect(String(inTime.stderr)).not.toContain("deadline already passed");
    const late = await drill(["pack", "--jobs", "1", "--upstream-age", "60s", "--deadline", "8s", "--queue", queue]);
    expect(String(late.stderr)).toContain("pack: --upstream-age 60s is not under --deadline 8s: every job is pushed with its deadline already passed, and the gate rejects it on deadline slack");
    const gate = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "2"]);
    const decided = lines(gate.stdout);
    // Under 1 s left (negative on a host slow enough to eat the last second).
    expect(decided[0]).toMatch(/^reject_deadline_slack job=1 slack_ms=(\d{1,3}|-\d+) route=retry$/);
    // 52 s past, and the time since.
    expect(decided[1]).toMatch(/^reject_deadline_slack job=2 slack_ms=-5\d{4} route=retry$/);
    await assertNoJobLost(redis, queue, ["1", "2"]);
  });

  it("host PSI file missing: reject_host_pressure psi=missing", async () => {
    const queue = `e${++n}`;
    await drill(["pack", "--jobs", "2", "--queue", queue]);
    const gate = await drill(["--procfs", fakeProc(null), "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "2"]);
    expect(lines(gate.stdout)).toEqual(["reject_host_pressure job=1 psi=missing route=retry", "reject_host_pressure job=2 psi=missing route=retry"]);
    await assertNoJobLost(redis, queue, ["1", "2"]);
  });

  // QA: the gate held the job it took while <q>:stats was a string; when it
  // stopped, its give-back was refused on the same key: exit 0, the job left in
  // <q>:processing:<gate>, which nobody reads, until a rollback's re-drain.
  it("gate over a <q>:stats string: names the key, exits as before, and the job it held is back at the head of <q> once, attempt unchanged", async () => {
    const queue = `e${++n}`;
    const k = queueKeys(queue);
    expect((await drill(["pack", "--jobs", "2", "--queue", queue])).exitCode).toBe(0);
    const [first] = await redis.lrange(k.ready, 0, 0);
    await redis.set(k.stats, "hello");
    const gate = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--gate-id", `g${n}`, "--interval", "200ms", "--duration", "1500ms"]);
    expect(gate.exitCode, String(gate.stderr)).toBe(0);
    expect(lines(gate.stdout)).toEqual([]);
    expect(String(gate.stderr)).toContain(`gate: decision failed: redis answered ${k.stats} is a string, not a hash (drill never writes that there); retrying`);
    expect(String(gate.stderr)).toMatch(new RegExp(`^gate: gave 1 undecided job\\(s\\) back to the head of ${queue} as taken, unrecorded`, "m"));
    expect(await redis.llen(k.processing(`g${n}`))).toBe(0);
    const ready = await redis.lrange(k.ready, 0, -1);
    expect(ready).toHaveLength(2);
    expect(ready[0]).toBe(first);
    await redis.del(k.stats);
    await assertNoJobLost(redis, queue, ["1", "2"]);
  });

  it("redis-cli, a client nobody here wrote, enqueues jobs by hand in the documented format; LRANGE jobs 0 0 shows the oldest; the gate decides them", async () => {
    const queue = `e${++n}`;
    const now = Date.now();
    // DESIGN.md's payload, typed as an operator would.
    const job = (id: string, enqueueTs: number) =>
      `{"id":"${id}","prompt_tokens":24000,"completion_tokens":256,"files":8,"enqueue_ts":${enqueueTs},"deadline_ms":8000,"attempt":0,"host_class":"shared-free"}`;
    const cli = (...args: string[]) => execa("redis-cli", ["-p", String(server.port), ...args], { reject: false });
    expect((await cli("RPUSH", queue, job("h1", now))).stdout).toBe("1");
    expect((await cli("RPUSH", queue, job("h2", now - 7000))).stdout).toBe("2");
    expect((await cli("LRANGE", queue, "0", "0")).stdout).toBe(job("h1", now));
    const gate = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms", "--idle-exit", "500ms"]);
    expect(gate.exitCode).toBe(0);
    const decided = lines(gate.stdout);
    expect(decided[0]).toBe("admit job=h1 packed=24000 limit=32000");
    // h2 waited 7 s upstream of an 8 s deadline: the slack rule, before the token cap.
    expect(decided[1]).toMatch(/^reject_deadline_slack job=h2 slack_ms=-?\d+ route=retry$/); // negative on a host slow enough to eat the last second
    expect((await cli("LLEN", queue)).stdout).toBe("0");
    await assertNoJobLost(redis, queue, ["h1", "h2"]);
  });

  it("gate mode: reject_all flips the lever; re-admit under pressure is refused (exit 3) unless --force", async () => {
    const queue = `e${++n}`;
    const hot = fakeProc(HOT_PSI);
    const flip = await drill(["--procfs", hot, "gate", "mode", "reject_all", "--queue", queue]);
    expect(flip.exitCode, String(flip.stderr)).toBe(0);
    // <q>:mode was never set: the flip says so (the gate admitted on it), not an "admit" nobody set.
    expect(lines(flip.stdout)[0]).toMatch(new RegExp(`^mode reject_all queue=${queue} previous=unset \\(admit\\) psi avg10=12.40`));
    const figures = (await redis.xrange(`${queue}:events`, "-", "+")).map(([, fields]) => fields[fields.indexOf("figures") + 1]);
    expect(figures).toEqual([expect.stringMatching(/^mode=reject_all previous=unset psi=12\.40 by=gate_mode$/)]);
    const pack = await drill(["pack", "--jobs", "1", "--queue", queue]);
    expect(pack.exitCode, String(pack.stderr)).toBe(0);
    const gate = await drill(["--procfs", fakeProc("some avg10=0.40 avg60=0.20 avg300=0.00 total=0\n"), "gate", "--queue", queue, "--interval", "200ms", "--max-jobs", "1", "--idle-exit", "5s"]);
    expect(lines(gate.stdout), String(gate.stderr)).toEqual(["reject_host_pressure job=1 psi=0.40 mode=reject_all route=retry"]);
    const refused = await drill(["--procfs", hot, "gate", "mode", "admit", "--queue", queue]);
    expect(refused.exitCode).toBe(3);
    expect(refused.stderr).toMatch(/refusing to re-admit: host memory PSI avg10=12.40 avg60=3.10/);
    expect(await redis.get(`${queue}:mode`)).toBe("reject_all");
    const forced = await drill(["--procfs", hot, "gate", "mode", "admit", "--force", "--queue", queue]);
    expect(forced.exitCode).toBe(0);
    expect(forced.stderr).toMatch(/forced re-admit/);
    expect(lines(forced.stdout)[0]).toMatch(new RegExp(`^mode admit queue=${queue} previous=reject_all psi avg10=12.40 avg60=3.10 forced=1$`));
    expect(await redis.get(`${queue}:mode`)).toBe("admit");
    // The event keeps avg60 too: the refusal reads both, and a report of the flip says which was over.
    const forcedEvent = (await redis.xrevrange(`${queue}:events`, "+", "-", "COUNT", 1))[0]![1];
    expect(forcedEvent[forcedEvent.indexOf("figures") + 1]).toBe("mode=admit previous=reject_all psi=12.40 forced=1 psi_avg60=3.10 by=gate_mode");
    const calm = await drill(["--procfs", fakeProc(CALM_PSI), "gate", "mode", "admit", "--queue", queue]);
    expect(calm.exitCode).toBe(0);
    expect(lines(calm.stdout)[0]).toMatch(new RegExp(`^mode admit queue=${queue} previous=admit psi `));
  });

  // QA: with the lever already admit (after a --force), `gate mode admit` under pressure refused with exit 3, which read as admission closed.
  it("gate mode admit with the lever already admit under pressure: says it is already admit, exit 0, nothing written", async () => {
    const queue = `e${++n}`;
    const hot = fakeProc(HOT_PSI);
    const forced = await drill(["--procfs", hot, "gate", "mode", "admit", "--force", "--queue", queue]);
    expect(forced.exitCode, String(forced.stderr)).toBe(0);
    const events = await redis.xlen(`${queue}:events`);
    const again = await drill(["--procfs", hot, "gate", "mode", "admit", "--queue", queue]);
    expect(again.exitCode, String(again.stderr)).toBe(0);
    expect(lines(again.stdout)[0]).toMatch(new RegExp(`^mode admit queue=${queue} previous=admit unchanged: already admit; psi avg10=12.40 avg60=3.10`));
    expect(again.stderr).not.toMatch(/refusing/);
    const json = await drill(["--json", "--procfs", hot, "gate", "mode", "admit", "--queue", queue]);
    expect(json.exitCode, String(json.stderr)).toBe(0);
    expect(JSON.parse(String(json.stdout))).toMatchObject({ mode: "admit", queue, previous: "admit", unchanged: true, forced: false });
    expect(await redis.get(`${queue}:mode`)).toBe("admit");
    expect(await redis.xlen(`${queue}:events`)).toBe(events);
  });

  // QA: a <q>:mode hash made `gate mode reject_all` die with WRONGTYPE and a stack trace: the lever must always move.
  it("gate mode over a <q>:mode of another type: the lever moves, exit 0, and says what the key held", async () => {
    const queue = `e${++n}`;
    await redis.hset(`${queue}:mode`, "x", "1");
    const flip = await drill(["--procfs", fakeProc(HOT_PSI), "gate", "mode", "reject_all", "--queue", queue]);
    expect(flip.exitCode, String(flip.stderr)).toBe(0);
    expect(lines(flip.stdout)).toEqual([expect.stringMatching(new RegExp(`^mode reject_all queue=${queue} previous=reject_all previous_mode_type=hash psi avg10=12.40`))]);
    expect(lines(flip.stderr)).toEqual([`drill: ${queue}:mode is a hash, not a string: the gate read it as reject_all; overwritten`]);
    expect(await redis.get(`${queue}:mode`)).toBe("reject_all");
  });

  // QA: pack sent a push ten times into 'ERR value is not an integer' and never named the key.
  it("pack onto a <q>:seq that is not an id: exit 2 at once, naming the key and its value", async () => {
    const queue = `e${++n}`;
    await redis.set(`${queue}:seq`, "abc");
    const pack = await drill(["pack", "--jobs", "2", "--queue", queue]);
    expect(pack.exitCode, String(pack.stderr)).toBe(2);
    expect(String(pack.stderr)).toContain(`could not push the 1st of 2 jobs: ${queue}:seq is "abc", not a job id under 2^53`);
    expect(String(pack.stderr)).not.toMatch(/send\(s\)/);
    expect(await redis.llen(queue)).toBe(0);
  });

  // QA: a <q>:seq of "007" passed pack's check, INCR refused it ("not an integer") and pack sent the push 10 times.
  it("pack onto a <q>:seq with a leading zero, which INCR refuses: exit 2 at once, naming the key and its value, nothing pushed", async () => {
    const queue = `e${++n}`;
    await redis.set(`${queue}:seq`, "007");
    const pack = await drill(["pack", "--jobs", "2", "--queue", queue]);
    expect(pack.exitCode, String(pack.stderr)).toBe(2);
    expect(String(pack.stderr)).toContain(`could not push the 1st of 2 jobs: ${queue}:seq is "007", not a job id under 2^53`);
    expect(String(pack.stderr)).not.toMatch(/send\(s\)|not an integer/);
    expect(await redis.llen(queue)).toBe(0);
    expect(await redis.get(`${queue}:seq`)).toBe("007");
  });

  // QA: pack handed out job 9007199254740992 (2^53), which a double cannot tell from 2^53+1.
  it("pack past the last exact job id: job 2^53-1 is pushed, the next is refused naming the key, exit 2, nothing else pushed", async () => {
    const queue = `e${++n}`;
    await redis.set(`${queue}:seq`, String(2 ** 53 - 2));
    const pack = await drill(["pack", "--jobs", "3", "--queue", queue]);
    expect(pack.exitCode, String(pack.stderr)).toBe(2);
    expect(String(pack.stderr)).toContain(`could not push the 2nd of 3 jobs: ${queue}:seq is at 9007199254740991, the last exact job id (2^53-1)`);
    expect(String(pack.stderr)).not.toMatch(/send\(s\)/);
    // Given up, it still says what it packed before the refusal.
    expect(lines(pack.stdout).at(-1)).toBe(`packed 1 job(s) onto ${queue} (job=9007199254740991), 24000 prompt tokens; 2 of 3 not packed`);
    expect((await redis.lrange(queue, 0, -1)).map((p) => JSON.parse(p).id)).toEqual(["9007199254740991"]);
    expect(await redis.get(`${queue}:seq`)).toBe("9007199254740991");
  });

  // A script asked why `gate mode admit --json` refused with no JSON. The
  // project's rule (README): --json stdout carries a command's result; a
  // refusal to act or an error before any result is one `drill: ` line on
  // stderr and the exit code, stdout empty, as for inject or pack (doctor and
  // up, whose result is a verdict, print theirs: "verdict":"refused").
  it("gate mode --json: one JSON line when the lever moves; a refusal or an unreachable Redis leaves stdout empty, says why on stderr, exit 3 / 1", async () => {
    const queue = `e${++n}`;
    const hot = fakeProc(HOT_PSI);
    const flip = await drill(["--json", "--procfs", hot, "gate", "mode", "reject_all", "--queue", queue]);
    expect(flip.exitCode, String(flip.stderr)).toBe(0);
    // Never set: null, not the "admit" the gate would read it as.
    expect(JSON.parse(String(flip.stdout))).toMatchObject({ mode: "reject_all", queue, previous: null, forced: false, psi: { avg10: 12.4, avg60: 3.1 } });
    const again = await drill(["--json", "--procfs", hot, "gate", "mode", "reject_all", "--queue", queue]);
    expect(JSON.parse(String(again.stdout))).toMatchObject({ mode: "reject_all", queue, previous: "reject_all" });

    const refused = await drill(["--json", "--procfs", hot, "gate", "mode", "admit", "--queue", queue]);
    expect(refused.exitCode).toBe(3);
    expect(refused.stdout).toBe("");
    expect(lines(refused.stderr)).toEqual(["drill: refusing to re-admit: host memory PSI avg10=12.40 avg60=3.10; re-admit only after avg10 and avg60 stay under 1.00 (--force overrides)"]);
    expect(await redis.get(`${queue}:mode`)).toBe("reject_all");

    const nobody = `redis://127.0.0.1:${await freePort()}`; // nothing listens there
    const unreachable = await drill(["--json", "--redis", nobody, "--procfs", fakeProc(CALM_PSI), "gate", "mode", "admit", "--queue", queue]);
    expect(unreachable.exitCode).toBe(1);
    expect(unreachable.stdout).toBe("");
    expect(lines(unreachable.stderr)).toEqual([expect.stringMatching(new RegExp(`^drill: cannot connect to redis at ${nobody}: `))]);
    expect(await redis.get(`${queue}:mode`)).toBe("reject_all");
  });

  it("bad flags exit 2 naming the flag", async () => {
    for (const [args, flag] of [
      [["pack", "--deadline", "8"], "--deadline"],
      [["pack", "--rate", "fast"], "--rate"],
      [["pack", "--queue", "a*b"], "--queue"],
      [["gate", "--slack-limit", "1.5"], "--slack-limit"],
      [["gate", "--interval", "soon"], "--interval"],
      [["gate", "--gate-id", "../x"], "--gate-id"],
      // a typo must not leave the gate on host signals alone
      [["gate", "--name", "../x"], "--name"],
      [["gate", "--name", "cgroup.procs"], "--name"],
      [["gate", "--parent", "../../etc"], "--parent"],
      [["gate", "mode", "maybe"], "mode"],
    ] as const) {
      const result = await drill([...args]);
      expect({ args, code: result.exitCode }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain(flag);
    }
  });

  it("pack values the job schema refuses exit 2 naming the flag, and nothing is enqueued", async () => {
    for (const [args, flag] of [
      [["--prompt-tokens", "20000000"], "--prompt-tokens"],
      [["--deadline", "200h"], "--deadline"],
      // enqueue_ts = now - age would be negative
      [["--upstream-age", "1000000h"], "--upstream-age"],
    ] as const) {
      const queue = `e${++n}`;
      const result = await drill(["pack", "--jobs", "2", "--queue", queue, ...args]);
      expect({ args, code: result.exitCode }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain(flag);
      expect(await redis.keys(`${queue}*`)).toEqual([]);
    }
  });

  // QA: a push whose send timed out on a paused Redis was sent again as a new
  // INCR; the timed-out one ran when Redis woke, and its id was on no list.
  it("redis-server paused mid-pack past the command timeout (5 s): pack sends the push again, and every id issued is queued once", async () => {
    const queue = `e${++n}`;
    const pack = drill(["pack", "--jobs", "3", "--rate", "1/s", "--prompt-tokens", "1000", "--queue", queue]);
    await new Promise<void>((resolve) => pack.stdout!.on("data", (chunk: Buffer) => String(chunk).includes("push job=1 ") && resolve()));
    server.kill("SIGSTOP");
    try {
      // Longer than pack's 5 s command timeout: the second job's first send times out and is sent again.
      await new Promise((r) => setTimeout(r, 7000));
    } finally {
      server.kill("SIGCONT");
    }
    const result = await pack;
    expect(result.exitCode, result.stderr).toBe(0);
    expect(lines(result.stdout).at(-1)).toBe(`packed 3 job(s) onto ${queue} (job=1..3), 3000 prompt tokens`);
    expect(await redis.get(`${queue}:seq`)).toBe("3");
    await assertNoJobLost(redis, queue, ["1", "2", "3"]);
    // QA: the pushes stalled without a word. Said once when it failed and once when Redis took it.
    expect(lines(result.stderr)).toEqual([
      // Said once job=1 waits, before the pause.
      `pack: no gate decides ${queue} now (no live gate heartbeat ${queue}:gates:<id>): its jobs wait, their deadline slack running out, until \`drill gate --queue ${queue}\` runs (with the --name and --parent of its worker's cgroup)`,
      // The Redis it waited on, and what to check there, as every command timeout says it.
      `pack: push of the 2nd of 3 jobs failed: no reply from Redis (Redis at 127.0.0.1:${server.port} did not answer within 5s: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded); sending it again, up to 10 sends`,
      expect.stringMatching(/^pack: Redis answers again; job=2 pushed \d+\.\d s after its first send$/),
    ]);
  }, 40_000);

  // QA: a pack interrupted with Redis paused waited out the command timeout, then counted 1 job
  // while Redis queued 2 once it woke. The push in flight is given up a second after the stop, and said.
  it("SIGINT while redis-server is paused with a push in flight: exit 130 without waiting out the command timeout, the unanswered push named; once Redis wakes it is queued, nothing lost", async () => {
    const queue = `e${++n}`;
    const pack = drill(["pack", "--jobs", "3", "--rate", "1/s", "--prompt-tokens", "1000", "--queue", queue]);
    await new Promise<void>((resolve) => pack.stdout!.on("data", (chunk: Buffer) => String(chunk).includes("push job=1 ") && resolve()));
    server.kill("SIGSTOP");
    let result: Awaited<typeof pack>;
    try {
      // Past the second push's send at 1 s.
      await new Promise((r) => setTimeout(r, 1500));
      pack.kill("SIGINT");
      result = await pack;
    } finally {
      server.kill("SIGCONT");
    }
    expect(result.exitCode, result.stderr).toBe(130);
    expect(lines(result.stdout).at(-1)).toBe(`packed 1 job(s) onto ${queue} (job=1), 1000 prompt tokens; 2 of 3 not packed`);
    expect(result.stderr).toContain(
      "pack: interrupted with the push of the 2nd of 3 jobs unanswered (no reply within 1000 ms of the stop: redis paused (SIGSTOP?) or overloaded): if Redis runs it when it answers, that job is queued under the next id, though not counted below",
    );
    await assertNoJobLost(redis, queue, ["1", "2"]);
    expect(await redis.get(`${queue}:seq`)).toBe("2");
  }, 40_000);

  // QA: a pack onto a queue no gate decides looked like a stuck drill: its jobs waited without a word.
  it("pack onto a queue with no live gate says so on stderr; with a gate running it says nothing; --json says not_packed", async () => {
    const queue = `e${++n}`;
    const ungated = await drill(["--json", "pack", "--jobs", "1", "--prompt-tokens", "1000", "--queue", queue]);
    expect(ungated.exitCode, String(ungated.stderr)).toBe(0);
    // Its Redis came from DRILL_REDIS_URL (drill() exports it): the gate named is left to it, not a typed --redis.
    expect(lines(ungated.stderr)).toEqual([
      `pack: no gate decides ${queue} now (no live gate heartbeat ${queue}:gates:<id>): its jobs wait, their deadline slack running out, until \`drill gate --queue ${queue}\` runs (with the --name and --parent of its worker's cgroup)`,
    ]);
    expect(JSON.parse(lines(ungated.stdout).at(-1)!)).toMatchObject({ event: "packed", jobs: ["1"], not_packed: 0 });
    const gate = drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms", "--duration", "20s"]);
    try {
      await until(async () => (await redis.hlen(`${queue}:gates`)) > 0);
      const gated = await drill(["pack", "--jobs", "1", "--prompt-tokens", "1000", "--queue", queue]);
      expect(gated.exitCode, String(gated.stderr)).toBe(0);
      expect(String(gated.stderr)).toBe("");
    } finally {
      gate.kill("SIGINT");
      await gate;
    }
    await assertNoJobLost(redis, queue, ["1", "2"]);
  });

  // QA: said only after the last push, a paced pack (--rate) filled an ungated queue for minutes without a word, and one
  // interrupted (Ctrl-C) never said it at all.
  it("a paced pack onto a queue with no live gate says so once its first job waits, also when interrupted before its last", async () => {
    const queue = `e${++n}`;
    const pack = drill(["pack", "--jobs", "5", "--rate", "1/s", "--prompt-tokens", "1000", "--queue", queue]);
    await new Promise<void>((resolve) => pack.stdout!.on("data", (chunk: Buffer) => String(chunk).includes("push job=1 ") && resolve()));
    pack.kill("SIGINT");
    const result = await pack;
    expect(result.exitCode, String(result.stderr)).toBe(130);
    expect(lines(result.stdout).at(-1)).toBe(`packed 1 job(s) onto ${queue} (job=1), 1000 prompt tokens; 4 of 5 not packed`);
    expect(lines(result.stderr)).toEqual([
      `pack: no gate decides ${queue} now (no live gate heartbeat ${queue}:gates:<id>): its jobs wait, their deadline slack running out, until \`drill gate --queue ${queue}\` runs (with the --name and --parent of its worker's cgroup)`,
      "drill: interrupted by SIGINT",
    ]);
  });

  // SIGHUP: the gate's terminal closed; QA: node's default killed it holding a job, still registered.
  it("SIGINT, SIGTERM and SIGHUP stop the gate cleanly with 130, 143 and 129, unregistered", async () => {
    for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143], ["SIGHUP", 129]] as const) {
      const queue = `e${++n}`;
      const gate = drill(["--procfs", fakeProc(CALM_PSI), "gate", "--queue", queue, "--interval", "200ms"]);
      // Running once it has registered (its signal handlers are in place by then), not after a fixed sleep.
      for (let waited = 0; (await redis.hlen(`${queue}:gates`)) === 0; waited += 50) {
        if (waited > 20_000) throw new Error("the gate never registered");
        await new Promise((r) => setTimeout(r, 50));
      }
      gate.kill(signal);
      const result = await gate;
      expect(result.exitCode).toBe(code);
      // QA: both read "stopped (signal)".
      expect(String(result.stderr)).toMatch(new RegExp(`^gate \\S+ stopped \\(${signal}\\): decided=0 recovered=0 watchdog_fires=0$`, "m"));
      expect(await redis.hlen(`${queue}:gates`)).toBe(0);
    }
  });

  it("gate SIGKILLed between take and decision, many times: each job recovered from its processing list with its attempt counted exactly, none lost, in-flight tokens consistent (RELIABILITY 11)", async () => {
    const queue = `e${++n}`;
    const keys = queueKeys(queue);
    const procfs = fakeProc(CALM_PSI);
    // Every job fits under the cap and no count reaches the budget: each one is decided once, carrying
    // exactly the attempts its recoveries counted. A deadline the gate starts below cannot eat.
    const gate = (id: string, ...more: string[]) =>
      ["--procfs", procfs, "gate", "--queue", queue, "--interval", "200ms", "--packed-token-limit", "1000000", "--retry-budget", "1000", "--gate-id", id, ...more];
    const pack = await drill(["pack", "--jobs", "8", "--prompt-tokens", "100", "--deadline", "120s", "--queue", queue]);
    expect(pack.exitCode, String(pack.stderr)).toBe(0);
    const ids = ["1", "2", "3", "4", "5", "6", "7", "8"];
    // More of the same, so a gate killed at a random point is one still taking jobs.
    const topUp = async () => {
      const spec = { promptTokens: 100, completionTokens: 256, files: 8, deadlineMs: 120_000, hostClass: "shared-free" };
      while ((await redis.llen(keys.ready)) < 200) ids.push((await new DrillQueue(redis, queue).push(spec)).id);
    };
    const attemptOf = (payload: string) => (JSON.parse(payload) as { attempt: number }).attempt;
    // id → how many gates died holding it between take and decision.
    const held = new Map<string, number>();
    // What a SIGKILLed gate holds, once Redis has closed its connections: a take it sent before dying has run by then.
    const heldBy = async (gateId: string): Promise<{ id: string; attempt: number }[]> => {
      await until(async () => !(String(await redis.client("LIST")).split("\n").some((c) => c.includes(`name=drill-gate:${gateId} `) || c.includes(`name=drill-gate-take:${gateId} `))));
      const jobsHeld = (await redis.lrange(keys.processing(gateId), 0, -1)).map((p) => ({ id: (JSON.parse(p) as { id: string }).id, attempt: attemptOf(p) }));
      for (const { id } of jobsHeld) held.set(id, (held.get(id) ?? 0) + 1);
      await assertNoJobLost(redis, queue, ids);
      return jobsHeld;
    };

    // Deterministic: DRILL_CRASH_AT kills the gate right after BLMOVE. Each next gate starts once the
    // dead one's heartbeat has expired, so it recovers job 1 (attempt + 1, to the head) and takes it again.
    for (let i = 0; i < 4; i++) {
      if (i > 0) await until(async () => (await redis.exists(keys.gateHeartbeat(`crash${i - 1}`))) === 0);
      const crash = await drill(gate(`crash${i}`), { DRILL_CRASH_AT: "gate:after-take" });
      expect(crash.signal).toBe("SIGKILL");
      expect(await heldBy(`crash${i}`)).toEqual([{ id: "1", attempt: i }]);
    }

    // Random: gates churning through the queue, each SIGKILLed at a random point after its first take
    // while it holds a job: stopped (SIGSTOP) at a random moment, looked at, and killed if it holds one,
    // else let go on (SIGCONT) and stopped again a moment later.
    const pause = () => new Promise((r) => setTimeout(r, Math.floor(Math.random() * 6)));
    for (let i = 0; i < 12; i++) {
      const gateId = `rand${i}`;
      await topUp();
      const running = drill(gate(gateId));
      await until(async () => (await redis.llen(keys.processing(gateId))) > 0, 20_000, 0);
      // A random point of its run: after it has decided 0 to 20 more jobs.
      const target = (await redis.llen(keys.admitted)) + Math.floor(Math.random() * 21);
      await until(async () => (await redis.llen(keys.admitted)) >= target, 20_000, 0);
      for (let tries = 0; ; tries++) {
        expect(tries, `${gateId} never stopped holding a job`).toBeLessThan(200);
        await pause();
        running.kill("SIGSTOP");
        // Two round trips: whatever the gate sent before it stopped has run.
        await redis.ping();
        await redis.ping();
        if ((await redis.llen(keys.processing(gateId))) > 0) break;
        running.kill("SIGCONT");
      }
      running.kill("SIGKILL");
      expect((await running).signal).toBe("SIGKILL");
      expect(await heldBy(gateId)).toHaveLength(1);
    }

    // The last gate decides every job not yet decided, recovering what the dead gates held.
    const decided = async () => (await redis.llen(keys.admitted)) + (await redis.llen(keys.retry("dedicated")));
    const undecided = ids.length - (await decided());
    const final = await drill(gate("final", "--max-jobs", String(undecided), "--idle-exit", "5s"));
    expect(final.exitCode, String(final.stderr)).toBe(0);
    expect(await decided()).toBe(ids.length);

    // Per job: one recovery per gate that died holding it, attempts 1, 2, 3… in order.
    const recovered = new Map<string, number[]>();
    for (const [, fields] of await redis.xrange(keys.events, "-", "+")) {
      const e = Object.fromEntries(pairs(fields));
      if (e.reason !== "recovered") continue;
      expect(e.figures).toMatch(/ route=ready$/);
      recovered.set(e.job ?? "", [...(recovered.get(e.job ?? "") ?? []), Number(e.attempt)]);
    }
    expect(held.get("1")).toBeGreaterThanOrEqual(4);
    const counted = (id: string) => Array.from({ length: held.get(id) ?? 0 }, (_, k) => k + 1);
    expect(Object.fromEntries(ids.map((id) => [id, recovered.get(id) ?? []]))).toEqual(Object.fromEntries(ids.map((id) => [id, counted(id)])));
    // Then decided once, with that count: admitted, or nacked (attempt + 1) if a gate stopped long on a
    // loaded host found its PSI sample stale (psi=missing, fail closed).
    const parse = (p: string) => JSON.parse(p) as { id: string; attempt: number; reason?: string };
    const admitted = (await redis.lrange(keys.admitted, 0, -1)).map(parse);
    const nacked = (await redis.lrange(keys.retry("dedicated"), 0, -1)).map(parse);
    expect(nacked.filter((j) => j.reason !== "host_pressure")).toEqual([]);
    expect([...admitted, ...nacked].map((j) => j.id).sort()).toEqual([...ids].sort());
    expect(Object.fromEntries([...admitted.map((j) => [j.id, j.attempt]), ...nacked.map((j) => [j.id, j.attempt - 1])])).toEqual(
      Object.fromEntries(ids.map((id) => [id, held.get(id) ?? 0])),
    );
    expect(nacked.length, "most jobs admitted").toBeLessThan(ids.length / 10);

    // None lost, none left behind; in flight: exactly the admitted jobs, each with its own tokens.
    expect((await assertNoJobLost(redis, queue, ids)).duplicates).toEqual([]);
    expect(await redis.llen(keys.ready)).toBe(0);
    expect(await redis.keys(keys.processingPattern)).toEqual([]);
    expect(await redis.llen(keys.dead)).toBe(0);
    expect(await redis.hgetall(keys.inflight)).toEqual(Object.fromEntries(admitted.map((j) => [j.id, "100"])));
  });
});
