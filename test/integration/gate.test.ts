import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { runGate, type GateDeps, type GateOptions, type GateSummary } from "../../src/gate/loop.js";
import { defaultAdmissionConfig } from "../../src/gate/policy.js";
import { pressureFileProbe } from "../../src/gate/signals.js";
import { decodeJob, encodeJob } from "../../src/queue/job.js";
import { DrillQueue, pushScope, pushUntilTaken, unnumberedJob, type JobSpec } from "../../src/queue/queue.js";
import { closeRedis, connectRedis } from "../../src/queue/redis.js";
import { assertNoJobLost, collectJobIds } from "../helpers/invariants.js";
import { fuzzPayloads } from "../fuzzPayloads.js";
import { startRedisServer, untilBlockedInBlmove, untilClientGone, type RedisServer } from "../helpers/redisServer.js";
import { startReplyCutProxy } from "../helpers/replyCutProxy.js";
import { admitScript, rejectScript } from "../../src/queue/scripts.js";
import { formatRejectEvent } from "../../src/sampler/rejects.js";
import { CALM_PSI, HOT_PSI } from "../helpers/psiText.js";

let server: RedisServer;
let redis: Redis;
let tmp: string;
let n = 0;
const spec: JobSpec = { promptTokens: 24000, completionTokens: 256, files: 8, deadlineMs: 8000, hostClass: "shared-free" };

beforeAll(async () => {
  server = await startRedisServer();
  redis = await connectRedis(server.url, { name: "test-gate" });
  tmp = mkdtempSync(path.join(os.tmpdir(), "drill-gate-"));
});
afterAll(async () => {
  await closeRedis(redis);
  await server?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** pressure/memory as a directory: there, but unreadable. */
const UNREADABLE = Symbol("unreadable");
/** pressure/memory as a FIFO nobody writes: a blocking open would freeze the gate past SIGTERM (QA). */
const FIFO = Symbol("fifo");

/** A fake procfs with pressure/memory holding `text` (null: no file). */
function fakeProc(text: string | null): { roots: HostRoots; file: string; write: (t: string | null | typeof UNREADABLE | typeof FIFO) => void } {
  const procfs = path.join(tmp, `proc${++n}`);
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  const file = path.join(procfs, "pressure", "memory");
  const write = (t: string | null | typeof UNREADABLE | typeof FIFO) => {
    rmSync(file, { recursive: true, force: true });
    if (t === UNREADABLE) mkdirSync(file);
    else if (t === FIFO) execFileSync("mkfifo", [file]);
    else if (t !== null) writeFileSync(file, t);
  };
  write(text);
  return { roots: new HostRoots(procfs, path.join(tmp, "sys")), file, write };
}

interface RunningGate {
  lines: string[];
  gateIdForTest: string;
  errors: string[];
  done: Promise<GateSummary>;
  stop: () => Promise<GateSummary>;
  waitFor: (pattern: RegExp, count?: number, timeoutMs?: number) => Promise<string[]>;
  /** The same on its stderr lines. */
  waitForError: (pattern: RegExp, count?: number, timeoutMs?: number) => Promise<string[]>;
}

function startGate(
  queue: string,
  roots: HostRoots,
  overrides: Partial<GateOptions> = {},
  probe: ReturnType<typeof pressureFileProbe> | null = null,
  redisUrl = server.url,
  deps: Pick<GateDeps, "monoNow"> = {},
): RunningGate {
  const lines: string[] = [];
  const errors: string[] = [];
  const controller = new AbortController();
  const options: GateOptions = {
    queue,
    gateId: `gate${++n}`,
    config: { ...defaultAdmissionConfig, intervalMs: 200 },
    retryHostClass: "dedicated",
    retryBudget: 3,
    dryRun: false,
    maxJobs: null,
    idleExitMs: null,
    json: false,
    blockMs: 300,
    watchdogMarginMs: 400,
    ...overrides,
  };
  const done = runGate(options, { redisUrl, roots, workerCgroup: probe, out: (l) => lines.push(l), err: (l) => errors.push(l), signal: controller.signal, ...deps });
  const waitIn = (seen: string[]) => async (pattern: RegExp, count = 1, timeoutMs = 10_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const matched = seen.filter((l) => pattern.test(l));
      if (matched.length >= count) return matched;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${count}× ${pattern}; lines: ${lines.join(" | ")}; errors: ${errors.join(" | ")}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  return { lines, errors, done, gateIdForTest: options.gateId, waitFor: waitIn(lines), waitForError: waitIn(errors), stop: () => (controller.abort(), done) };
}

/** `text` matched as it is in a RegExp. */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

async function pushJobs(queue: DrillQueue, count: number, extra: Partial<JobSpec> = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) ids.push((await queue.push({ ...spec, ...extra })).id);
  return ids;
}

describe("gate against a real redis-server and a fake procfs", () => {
  it("a stop while it waits for a job does not wait out the take's block (CLIENT UNBLOCK): it returns at once, nothing taken", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const { roots } = fakeProc(CALM_PSI);
    // A 30 s block: without the unblock the gate would outlive this test's timeout.
    const gate = startGate(queue.keys.queue, roots, { blockMs: 30_000 });
    await untilBlockedInBlmove(redis, "the gate", { name: `drill-gate-take:${gate.gateIdForTest}` });
    const started = Date.now();
    expect(await gate.stop()).toMatchObject({ decided: 0, stoppedBy: "signal" });
    expect(Date.now() - started, "the stop waited out the block").toBeLessThan(5000);
    const ids = await pushJobs(queue, 1);
    expect(await redis.llen(queue.keys.processing(gate.gateIdForTest))).toBe(0);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // QA: with Redis paused the take waited for its watchdog (block + 2 s), then
  // said "redis unavailable … retrying" after the stop, before the give-back.
  // The take's watchdog (32 s) and the command timeout (set to 120 s here, past the test's 60 s)
  // would each outlast the test: the stop ends on the take's grace and the stop's reply time (1 s).
  it("a stop while redis-server stays paused: the take ends within its grace, nothing is retried, the give-back waits only the stop's reply time and says what the list may hold", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { blockMs: 30_000, commandTimeoutMs: 120_000 });
    await untilBlockedInBlmove(redis, "the gate", { name: `drill-gate-take:${gate.gateIdForTest}` });
    server.kill("SIGSTOP");
    try {
      expect(await gate.stop()).toMatchObject({ decided: 0, stoppedBy: "signal" });
    } finally {
      server.kill("SIGCONT");
    }
    expect(gate.errors.filter((e) => /retrying|watchdog|not retried/.test(e)), gate.errors.join("\n")).toEqual([]);
    expect(gate.errors).toContainEqual(
      `gate: could not give back ${queue.keys.processing(gate.gateIdForTest)} (Redis at 127.0.0.1:${server.port} did not answer within 1s: check whether it is paused (CLIENT PAUSE, SIGSTOP) or overloaded); it holds a job only if the take the stop cut short moved one: another gate recovers it once the heartbeat expires, or rollback drains it`,
    );
    // Once it answers, nothing was taken: the stop closed the take's connection (the server drops it,
    // and its BLMOVE, as it wakes; under load a push could otherwise reach it first), and a job pushed now stays ready.
    await untilClientGone(redis, "the stopped gate", `drill-gate-take:${gate.gateIdForTest}`);
    const ids = await pushJobs(queue, 1);
    expect(await redis.llen(queue.keys.processing(gate.gateIdForTest))).toBe(0);
    await assertNoJobLost(redis, queue.keys.queue, ids);
    expect(await redis.lrange(queue.keys.ready, 0, -1)).toHaveLength(1);
  });

  it("low pressure: admits the first job, rejects the next with packed=48000 until tokens are released", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 8);
    const { roots } = fakeProc(CALM_PSI);
    const first = startGate(queue.keys.queue, roots, { maxJobs: 4 });
    await first.done;
    expect(first.lines).toEqual([
      "admit job=1 packed=24000 limit=32000",
      "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry",
      "reject_packed_tokens job=3 packed=48000 limit=32000 route=retry",
      "reject_packed_tokens job=4 packed=48000 limit=32000 route=retry",
    ]);
    expect(await queue.releaseTokens("1")).toBe(24_000);
    const second = startGate(queue.keys.queue, roots, { maxJobs: 2 });
    await second.done;
    expect(second.lines).toEqual(["admit job=5 packed=24000 limit=32000", "reject_packed_tokens job=6 packed=48000 limit=32000 route=retry"]);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // An in-flight entry that is not a token count fails each admit closed (the cap cannot be checked):
  // the gate said "redis unavailable" for a Redis that answered every call.
  it("a corrupt in-flight entry: nothing admitted, the job kept, and the gate says Redis answered with the refusal", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 1);
    await redis.hset(queue.keys.inflight, "42", "lots");
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots);
    try {
      await gate.waitForError(/^gate: decision failed: redis answered .*42.* not a token count/);
      // Said once, not once per retry, and never "redis back" while every decision still fails.
      await new Promise((r) => setTimeout(r, 1000));
      expect(gate.errors.filter((e) => e.startsWith("gate: ")), gate.errors.join("\n")).toEqual([expect.stringMatching(/^gate: decision failed: redis answered .*42.* not a token count/)]);
      expect(gate.lines).toEqual([]);
      await redis.hset(queue.keys.inflight, "42", "100");
      await gate.waitFor(/^admit job=/);
      expect(gate.errors.at(-1)).toMatch(/^gate: deciding again after \d+\.\d s$/);
    } finally {
      await gate.stop();
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("host PSI avg10 12.40: every job gets reject_host_pressure psi=12.40", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 4);
    const gate = startGate(queue.keys.queue, fakeProc(HOT_PSI).roots, { maxJobs: 4 });
    await gate.done;
    expect(gate.lines).toEqual(ids.map((id) => `reject_host_pressure job=${id} psi=12.40 route=retry`));
    const retried = (await redis.lrange(queue.keys.retry("dedicated"), 0, -1)).map((p) => JSON.parse(p) as { reason: string; attempt: number });
    expect(retried.every((j) => j.reason === "host_pressure" && j.attempt === 1)).toBe(true);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a job that already waited 7 s upstream (deadline 8 s) gets reject_deadline_slack", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 2, { upstreamAgeMs: 7000 });
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 2 });
    await gate.done;
    expect(gate.lines).toHaveLength(2);
    for (const line of gate.lines) {
      const slack = Number(/^reject_deadline_slack job=\d+ slack_ms=(-?\d+) route=retry$/.exec(line)?.[1]);
      expect(slack).toBeLessThanOrEqual(1000);
      expect(slack).toBeGreaterThan(-1000);
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a deadline already past is not malformed: reject_deadline_slack with a negative slack_ms, nacked to retry, not dead (RELIABILITY 12)", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    // Waited 60 s upstream of an 8 s deadline: 52 s past it.
    const ids = await pushJobs(queue, 1, { upstreamAgeMs: 60_000 });
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 1 });
    await gate.done;
    expect(gate.lines).toEqual([expect.stringMatching(new RegExp(`^reject_deadline_slack job=${ids[0]} slack_ms=-\\d+ route=retry$`))]);
    const slack = Number(/slack_ms=(-?\d+)/.exec(gate.lines[0] ?? "")?.[1]);
    expect(slack).toBeLessThanOrEqual(-52_000);
    expect(slack).toBeGreaterThan(-62_000);
    expect(await redis.llen(queue.keys.dead)).toBe(0);
    const retried = (await redis.lrange(queue.keys.retry("dedicated"), 0, -1)).map((p) => JSON.parse(p) as { id: string; reason: string; attempt: number });
    expect(retried).toEqual([expect.objectContaining({ id: ids[0], reason: "deadline_slack", attempt: 1 })]);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("no worker cgroup: decides on host signals; a hot worker cgroup rejects on its own PSI", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 2);
    const { roots } = fakeProc(CALM_PSI);
    const cgFile = path.join(tmp, `cg${++n}.pressure`);
    const absent = startGate(queue.keys.queue, roots, { maxJobs: 1 }, pressureFileProbe(cgFile));
    await absent.done;
    expect(absent.lines).toEqual(["admit job=1 packed=24000 limit=32000"]);
    await queue.releaseTokens("1");
    writeFileSync(cgFile, "some avg10=15.00 avg60=5.00 avg300=1.00 total=999\nfull avg10=9.00 avg60=2.00 avg300=1.00 total=99\n");
    const hot = startGate(queue.keys.queue, roots, { maxJobs: 1 }, pressureFileProbe(cgFile));
    await hot.done;
    expect(hot.lines).toEqual(["reject_host_pressure job=2 psi=0.00 cg_psi=15.00 route=retry"]);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("host PSI missing, empty, garbage or unreadable fails closed with psi=missing and recovers each time the file returns; a some line without full is decided on some (RELIABILITY 16)", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const { roots, file, write } = fakeProc(null);
    const gate = startGate(queue.keys.queue, roots);
    const ids: string[] = [];
    // One small job, decided: only PSI can reject it; an admitted one gives its tokens back.
    const decided = async (line: (id: string) => string) => {
      const { id } = await queue.push({ ...spec, promptTokens: 1000 });
      ids.push(id);
      await gate.waitFor(new RegExp(`^${line(id)}$`));
      await queue.releaseTokens(id);
    };
    const someOnly = (avg10: string) => `some avg10=${avg10} avg60=0.00 avg300=0.00 total=0\n`; // no full line: valid
    try {
      const broken: [string | null | typeof UNREADABLE | typeof FIFO, string][] = [
        [null, "missing"],
        ["", "empty"],
        ["garbage\n", "no some line"],
        ["some avg10=0.22=55 avg60=0 avg300=0 total=1\n", 'bad field "avg10=0.22=55" in some line'],
        [UNREADABLE, "a directory, not a file"],
        [FIFO, "a FIFO, not a file"],
      ];
      for (const [i, [text, reason]] of broken.entries()) {
        // Each state is in once the gate says so (its sampler has read it), not after a guessed sleep.
        write(text);
        await gate.waitForError(new RegExp(`^gate: host memory PSI unreadable \\(${literal(`${file}: ${reason}`)}\\): rejecting with psi=missing$`));
        await decided((id) => `reject_host_pressure job=${id} psi=missing route=retry`);
        // The file returns: the next job is decided on it again.
        write(i < broken.length - 1 ? someOnly("0.00") : someOnly("12.40"));
        await gate.waitForError(/^gate: host memory PSI readable again$/, i + 1);
        if (i < broken.length - 1) await decided((id) => `admit job=${id} packed=1000 limit=32000`);
      }
      // Hot with no full line: rejected on some (a missing full read as 0 and decided on would admit).
      await decided((id) => `reject_host_pressure job=${id} psi=12.40 route=retry`);
    } finally {
      await gate.stop();
    }
    expect(gate.errors.filter((e) => e.includes("unreadable"))).toHaveLength(6);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a re-sent copy of an admitted job, recovered from a dead gate with attempt+1, is a redelivery, not a second admit", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    // Small enough that two copies fit under the cap: only the decision record can stop the second.
    const job = await queue.push({ ...spec, promptTokens: 10_000 });
    await queue.pushRaw(encodeJob(job)); // an identical second copy (a producer without push tokens re-sending after a lost reply)
    const { roots } = fakeProc(CALM_PSI);
    const first = startGate(queue.keys.queue, roots, { maxJobs: 1 });
    await first.done;
    expect(first.lines).toEqual([`admit job=${job.id} packed=10000 limit=32000`]);
    // Another gate took the second copy and died without a heartbeat.
    await redis.lmove(queue.keys.ready, queue.keys.processing("dead-gate"), "LEFT", "RIGHT");
    const second = startGate(queue.keys.queue, roots, { maxJobs: 1 });
    await second.done;
    expect(second.lines).toEqual([
      `recovered job=${job.id} from_gate=dead-gate attempt=1 route=ready`,
      // attempt=1, as a fresh decision line of this copy has it (and its JSON's attempt): it was missing from the stored one.
      `admit job=${job.id} packed=10000 limit=32000 attempt=1 redelivery=1`,
    ]);
    expect(await redis.llen(queue.keys.admitted)).toBe(1);
    expect(await redis.hgetall(queue.keys.inflight)).toEqual({ [job.id]: "10000" });
    expect((await assertNoJobLost(redis, queue.keys.queue, [job.id])).duplicates).toEqual([]);
  });

  it("malformed payloads go to dead with a reason; the gate stays up; in-flight tokens unchanged", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await redis.hset(queue.keys.inflight, "outside", "1000");
    const good = await pushJobs(queue, 1);
    const now = Date.now();
    const base = { id: "x1", prompt_tokens: 1, completion_tokens: 1, files: 1, enqueue_ts: now, deadline_ms: 8000, attempt: 0, host_class: "shared-free" };
    const job = (fields: Record<string, unknown>) => JSON.stringify({ ...base, ...fields });
    // Not JSON at all: the bare text takes the place of a count.
    const withText = (id: string, field: string, text: string) => job({ id }).replace(`"${field}":1`, `"${field}":${text}`);
    // Each payload, the start of the dead entry's reason (naming the field), and the id it carries
    // (one that does not parse: read from its start when it comes first).
    const bad: [Buffer, string, string | null][] = [
      [Buffer.from("not json"), "not_json", null],
      [Buffer.alloc(10 * 1024 * 1024, 0x5b), "too_large", null],
      [Buffer.from(`${"[".repeat(100)}${"]".repeat(100)}`), "too_deep", null],
      [Buffer.from(`{"__proto__":{"x":1},"id":"x2"}`), "forbidden_key __proto__", "x2"],
      [Buffer.from(withText("x3", "prompt_tokens", "NaN")), "not_json", "x3"],
      [Buffer.from(job({ id: "x4", prompt_tokens: -1 })), "invalid_field prompt_tokens:", "x4"],
      [Buffer.from(withText("x5", "prompt_tokens", "1e309")), "invalid_field prompt_tokens:", "x5"],
      [Buffer.from(withText("x9", "completion_tokens", "NaN")), "not_json", "x9"],
      [Buffer.from(job({ id: "x10", completion_tokens: -1 })), "invalid_field completion_tokens:", "x10"],
      [Buffer.from(withText("x11", "completion_tokens", "1e309")), "invalid_field completion_tokens:", "x11"],
      [Buffer.from(job({ id: "x6", deadline_ms: 0 })), "invalid_field deadline_ms:", "x6"],
      [Buffer.from(job({ id: "x12", deadline_ms: -8000 })), "invalid_field deadline_ms:", "x12"],
      [Buffer.from(job({ id: "x7", enqueue_ts: now + 3_600_000 })), "enqueue_ts_in_future", "x7"],
      [Buffer.from(job({ id: undefined })), "invalid_field id:", null],
      [Buffer.from(job({ id: good[0], prompt_tokens: 5 })), "id_reused_with_different_payload", good[0] ?? ""], // same id, different payload
      [Buffer.concat([Buffer.from('{"id":"x8","p":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]), "invalid_utf8", "x8"],
    ];
    for (const [payload] of bad) await queue.pushRaw(payload);
    const later = await pushJobs(queue, 1);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: bad.length + 2 });
    const summary = await gate.done;
    expect(summary.decided).toBe(bad.length + 2);
    expect(gate.lines[0]).toBe(`admit job=${good[0]} packed=25000 limit=32000`);
    // One line per payload, in order, naming its id (or -) and the cause.
    expect(gate.lines.slice(1, -1)).toEqual(bad.map(([, reason, id]) => expect.stringMatching(new RegExp(`^dead job=${id ?? "-"} reason=${reason.split(" ")[0]}( |$)`))));
    expect(gate.lines.at(-1)).toBe(`reject_packed_tokens job=${later[0]} packed=49000 limit=32000 route=retry`);
    const dead = (await redis.lrange(queue.keys.dead, 0, -1)).map((e) => JSON.parse(e) as { reason: string; id: string | null });
    expect(dead.map((d) => [d.reason, d.id])).toEqual(bad.map(([, reason, id]) => [expect.stringMatching(new RegExp(`^${literal(reason)}( |$)`)), id]));
    expect(await redis.hgetall(queue.keys.inflight)).toEqual({ outside: "1000", [good[0] ?? ""]: "24000" });
    await assertNoJobLost(redis, queue.keys.queue, [...good, ...later], {
      extraIds: bad.flatMap(([, , id]) => (id === null ? [] : [id])),
      allowDuplicate: (id, places) => id === good[0] && places.includes(queue.keys.dead),
    });
  });

  it("a fuzz run of 400 generated payloads through the gate: each one dead with its reason or decided, in order; the gate stays up; in-flight tokens only from admits (RELIABILITY 12)", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await redis.hset(queue.keys.inflight, "outside", "1000");
    const now = Date.now();
    // A long deadline and no cap to speak of: a good payload is admitted unless its fields were bent.
    const good = { id: "7", prompt_tokens: 2400, completion_tokens: 256, files: 8, enqueue_ts: now, deadline_ms: 600_000, attempt: 0, host_class: "shared-free" };
    const payloads = fuzzPayloads(20251201, 400, good);
    const push = redis.pipeline();
    for (const payload of payloads) push.rpush(queue.keys.ready, payload);
    await push.exec();
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { config: { ...defaultAdmissionConfig, intervalMs: 200, packedTokenLimit: 1_000_000_000 } });
    let after = "";
    try {
      await gate.waitFor(/./, payloads.length, 30_000);
      // Still up: a good job pushed after the fuzz is decided.
      after = (await queue.push({ ...spec, deadlineMs: 600_000 })).id;
      await gate.waitFor(new RegExp(`^admit job=${after} `));
    } finally {
      await gate.stop();
    }
    expect(gate.errors.filter((e) => !e.startsWith("gate: gave "))).toEqual([]);
    const lines = gate.lines.slice(0, payloads.length);
    // Payload i → line i: one refused by decodeJob is dead with its cause and its id (or -); a job is decided.
    const decoded = payloads.map((payload) => decodeJob(payload, Date.now()));
    expect(lines).toEqual(
      decoded.map((d) =>
        expect.stringMatching(d.ok ? new RegExp(`^[a-z_]+ job=${literal(d.job.id)} `) : new RegExp(`^dead job=${literal(d.id ?? "-")} reason=${literal(d.reason.split(" ")[0] ?? "")}( |$)`)),
      ),
    );
    // Every payload is accounted for: dead (with a reason), nacked to retry, admitted, or a dropped redelivery.
    const deadLines = lines.filter((l) => l.startsWith("dead ") || l.endsWith(" route=dead"));
    const retried = lines.filter((l) => l.startsWith("reject_") && l.endsWith(" route=retry"));
    const admitted = lines.filter((l) => l.startsWith("admit ") && !l.endsWith(" redelivery=1"));
    const redelivered = lines.filter((l) => l.endsWith(" redelivery=1"));
    expect(deadLines.length + retried.length + admitted.length + redelivered.length).toBe(payloads.length);
    expect(decoded.filter((d) => !d.ok).length).toBeGreaterThan(100);
    expect(admitted.length).toBeGreaterThan(20);
    const dead = (await redis.lrange(queue.keys.dead, 0, -1)).map((e) => JSON.parse(e) as { reason: string });
    expect(dead).toHaveLength(deadLines.length);
    expect(dead.every((d) => d.reason.length > 0)).toBe(true);
    expect(await redis.llen(queue.keys.retry("dedicated"))).toBe(retried.length);
    // In flight: what was there before, plus each admitted job's own tokens; nothing from the dead ones.
    const admittedJobs = (await redis.lrangeBuffer(queue.keys.admitted, 0, -1)).map((p) => decodeJob(p, Date.now()));
    expect(admittedJobs).toHaveLength(admitted.length + 1);
    const tokens = Object.fromEntries(admittedJobs.map((d) => (d.ok ? [d.job.id, String(d.job.prompt_tokens)] : ["undecodable", "?"])));
    expect(await redis.hgetall(queue.keys.inflight)).toEqual({ outside: "1000", ...tokens });
    // None lost: every job that decoded is somewhere, one live copy at most; the dead list holds the rest.
    const { places } = await collectJobIds(redis, queue.keys.queue);
    await assertNoJobLost(redis, queue.keys.queue, [...decoded.flatMap((d) => (d.ok ? [d.job.id] : [])), after], {
      extraIds: [...places].filter(([, where]) => where.every((w) => w === queue.keys.dead)).map(([id]) => id),
      allowDuplicate: (_id, where) => where.filter((w) => w !== queue.keys.dead).length <= 1,
    });
  });

  it("--json prints one JSON line per decision; --dry-run moves nothing", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 2);
    const { roots } = fakeProc(CALM_PSI);
    const dry = startGate(queue.keys.queue, roots, { dryRun: true });
    await dry.done;
    expect(dry.lines).toEqual(["admit job=1 packed=24000 limit=32000 dry_run=1", "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry dry_run=1"]);
    expect(await redis.llen(queue.keys.ready)).toBe(2);
    const json = startGate(queue.keys.queue, roots, { json: true, maxJobs: 2 });
    await json.done;
    const decisions = json.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(decisions.map((d) => [d.decision, d.job, d.packed, d.limit])).toEqual([
      ["admit", "1", 24000, 32000],
      ["reject_packed_tokens", "2", 48000, 32000],
    ]);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("redis-server SIGKILLed and restarted on its AOF dir mid-admission: the gate reconnects and resumes, nothing lost", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { config: { ...defaultAdmissionConfig, intervalMs: 200, packedTokenLimit: 10_000_000 } });
    const ids: string[] = [];
    // A producer that keeps pushing through the outage, re-sending a push whose reply was lost (pack's and up's push).
    const scope = pushScope("test");
    const producer = (async () => {
      for (let i = 0; i < 30; i++) {
        const outcome = await pushUntilTaken(queue, unnumberedJob(spec), `${scope}.${i}`, { signal: new AbortController().signal, delayMs: () => 100, sendAgain: () => true });
        if (!outcome.ok) throw new Error("unreachable: sendAgain never gives up");
        ids.push(outcome.job.id);
        await new Promise((r) => setTimeout(r, 40));
      }
    })();
    try {
      await gate.waitFor(/^admit /, 5);
      server.kill("SIGKILL");
      await new Promise((r) => setTimeout(r, 500));
      await server.restart();
      const resumedAt = Date.now();
      await producer;
      const unique = new Set(ids).size;
      // A kill between the admit script's write (fsynced) and its reply still
      // gets its line, from the record (reply_lost=1): every job, one line each.
      await gate.waitFor(/^admit /, unique, 15_000);
      const admitted = gate.lines.map((l) => /^admit job=(\d+) /.exec(l)?.[1]).filter((id) => id !== undefined);
      expect(new Set(admitted).size, "no job admitted twice").toBe(admitted.length);
      expect(new Set(admitted)).toEqual(new Set(ids));
      expect(Date.now() - resumedAt).toBeLessThan(15_000);
      expect(gate.errors.some((e) => e.includes("redis unavailable"))).toBe(true);
      expect(gate.errors.some((e) => e.includes("redis back"))).toBe(true);
    } finally {
      await gate.stop();
    }
    // A re-sent push finds its token: no second copy, no id burnt.
    const report = await assertNoJobLost(redis, queue.keys.queue, ids);
    expect(report.duplicates).toEqual([]);
    expect(await redis.get(queue.keys.seq)).toBe("30");
    expect(await redis.llen(queue.keys.admitted)).toBe(30);
  });

  it.each([
    ["admit", admitScript, CALM_PSI, /^admit job=1 packed=24000 limit=32000 reply_lost=1$/],
    // Its route too, as a fresh reject's line says it (QA: only fresh rejects said route=retry).
    ["reject", rejectScript, HOT_PSI, /^reject_host_pressure job=1 psi=12\.40\b.* route=retry reply_lost=1$/],
  ] as const)("the connection lost between the %s script's write and its reply: the gate prints the decision the script applied (reply_lost=1), once, and decides the rest", async (_kind, script, psi, line) => {
    const queue = new DrillQueue(redis, `g${++n}`);
    // Loaded, so the cut EVALSHA is the run, not a NOSCRIPT.
    await redis.script("LOAD", script.source);
    const proxy = await startReplyCutProxy(server.port);
    try {
      const cut = proxy.cutReplyTo(script.sha1);
      const gate = startGate(queue.keys.queue, fakeProc(psi).roots, {}, null, proxy.url);
      try {
        const ids = await pushJobs(queue, 3);
        await cut;
        await gate.waitFor(/ job=3 /);
        const job1 = gate.lines.filter((l) => / job=1 /.test(l));
        expect(job1, gate.lines.join("\n")).toHaveLength(1);
        expect(job1[0]).toMatch(line);
        for (const id of ["2", "3"]) expect(gate.lines.filter((l) => new RegExp(` job=${id} `).test(l) && !/reply_lost/.test(l))).toHaveLength(1);
        // Failed as lost when the connection closed, not after the 5 s command timeout (ioredis#2193).
        expect(gate.errors).toContain(`gate: redis unavailable at ${proxy.url} (connection to redis lost before its reply); retrying`);
        expect(gate.errors.some((e) => e.includes("redis back"))).toBe(true);
        const summary = await gate.stop();
        expect(summary.decided).toBe(3);
        const report = await assertNoJobLost(redis, queue.keys.queue, ids);
        expect(report.duplicates).toEqual([]);
      } finally {
        await gate.stop();
      }
    } finally {
      await proxy.close();
    }
  });

  // A stop with a decision's reply outstanding (the server ran it, then stalled): the stop gives
  // the reply up after the stop's reply time, not the command timeout (120 s here, past the test's
  // 60 s), and says the decision may stand; once the server answers, the job is on one list.
  it("a stop while its decision's reply is held: said with the job, given up within the stop's reply time, and the job is on one list", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await redis.script("LOAD", admitScript.source);
    const proxy = await startReplyCutProxy(server.port);
    try {
      const holding = proxy.holdRepliesFrom(admitScript.sha1);
      const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { commandTimeoutMs: 120_000 }, null, proxy.url);
      const ids = await pushJobs(queue, 1);
      const release = await holding;
      const summary = await gate.stop();
      release();
      expect(summary.decided).toBe(0);
      expect(gate.lines).toEqual([]);
      expect(gate.errors).toContainEqual(
        `gate: stopping with job=${ids[0]}'s decision unanswered (no reply within 1000 ms of the stop: redis paused (SIGSTOP?) or overloaded): if redis ran it or runs it when it answers, the decision stands (see ${queue.keys.decisions}); else the job goes back with the give-back`,
      );
      expect(gate.errors).toContainEqual(expect.stringMatching(/^gate: could not give back \S+ \(Redis at 127\.0\.0\.1:\d+ did not answer within .*\); another gate recovers it once the heartbeat expires, or rollback drains it$/));
      // The script ran (Redis had it): admitted, recorded, nowhere else.
      const report = await assertNoJobLost(redis, queue.keys.queue, ids);
      expect(report.duplicates).toEqual([]);
      expect(await redis.llen(queue.keys.admitted)).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it("--json: the decision whose reply was lost has a fresh decision's typed fields, plus reply_lost, and its text line", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await redis.script("LOAD", admitScript.source);
    const proxy = await startReplyCutProxy(server.port);
    try {
      const cut = proxy.cutReplyTo(admitScript.sha1);
      const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { json: true }, null, proxy.url);
      try {
        await pushJobs(queue, 2);
        await cut;
        await gate.waitFor(/"job":"2"/);
        const [lost, fresh] = gate.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
        expect(lost).toMatchObject({ event: "decision", decision: "admit", job: "1", packed: 24000, limit: 32000, reply_lost: true, line: "admit job=1 packed=24000 limit=32000 reply_lost=1" });
        // `route` is a fresh reject's own (the record holds no route); the lost one is an admit.
        expect(Object.keys(fresh!).filter((k) => k !== "reply_lost" && k !== "route").sort()).toEqual(Object.keys(lost!).filter((k) => k !== "reply_lost").sort());
      } finally {
        await gate.stop();
      }
    } finally {
      await proxy.close();
    }
  });

  it("a paused (SIGSTOPped) redis-server does not hang the gate: the watchdog fires, it resumes after SIGCONT", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots);
    const ids: string[] = [];
    try {
      // Paused while the gate is blocked in BLMOVE (the watchdog's case), not before it got there.
      const blocked = Date.now() + 10_000;
      while (!/ cmd=blmove /.test(String(await redis.client("LIST"))) && Date.now() < blocked) await new Promise((r) => setTimeout(r, 20));
      expect(String(await redis.client("LIST")), "the gate never blocked in BLMOVE").toMatch(/ cmd=blmove /);
      server.kill("SIGSTOP");
      await new Promise((r) => setTimeout(r, 2000));
      server.kill("SIGCONT");
      ids.push(...(await pushJobs(queue, 1)));
      await gate.waitFor(new RegExp(`^admit job=${ids[0]} `), 1, 10_000);
      // One line when it went (the watchdog's words in it), one when it came back (QA: the watchdog had a line of its own).
      expect(gate.errors.filter((e) => /watchdog|unavailable|back after/.test(e)), gate.errors.join("\n")).toEqual([
        expect.stringMatching(/^gate: redis unavailable at \S+ \(watchdog: no reply to BLMOVE within 700 ms \(server paused or connection half-open\)\); retrying$/),
        expect.stringMatching(/^gate: redis back after \d+\.\d s$/),
      ]);
      // Counted from the BLMOVE that got no reply, not from the watchdog giving up on it (QA: 2.0 s said for a 5 s pause).
      const back = gate.errors.find((e) => e.startsWith("gate: redis back after "))!;
      expect(Number(/after (\d+\.\d) s/.exec(back)![1]), back).toBeGreaterThanOrEqual(2.0);
    } finally {
      server.kill("SIGCONT");
      const summary = await gate.stop();
      expect(summary.watchdogFires).toBeGreaterThanOrEqual(1);
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });
  // QA: the admit and reject scripts moved the job and wrote its decision, then
  // failed on HINCRBY <q>:stats (a string): Redis keeps a script's writes, so
  // every job was admitted with no line, and --max-jobs never counted one.
  it.each([
    ["admit", CALM_PSI, /^admit job=1 /],
    ["reject", HOT_PSI, /^reject_host_pressure job=1 /],
  ] as const)("<q>:stats a string on the %s path: nothing moves, nothing is decided, the gate names the key once", async (_path, psi, decided) => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 3);
    await redis.set(queue.keys.stats, "hello");
    const gate = startGate(queue.keys.queue, fakeProc(psi).roots, { maxJobs: 1 });
    const said = new RegExp(`^gate: decision failed: redis answered ${literal(queue.keys.stats)} is a string, not a hash`);
    try {
      await gate.waitForError(said);
      expect(gate.lines).toEqual([]);
      const k = queue.keys;
      expect(await redis.llen(k.admitted)).toBe(0);
      expect(await redis.exists(k.inflight, k.decisions, k.events, k.retry("dedicated"), k.dead)).toBe(0);
      expect(await redis.llen(k.ready)).toBe(2);
      expect(await redis.llen(k.processing(gate.gateIdForTest))).toBe(1);
      expect(gate.errors.filter((e) => e.startsWith("gate: ")), gate.errors.join("\n")).toEqual([expect.stringMatching(said)]);
      await redis.del(queue.keys.stats);
      await gate.waitFor(decided);
      expect(await gate.done).toMatchObject({ decided: 1, stoppedBy: "max_jobs" });
    } finally {
      await gate.stop();
    }
    expect(gate.lines).toHaveLength(1);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // The gate holds the job it took while a key it writes is of the wrong type; it
  // stopped (here: its signal) and its give-back, the recover script, refused the
  // same key: the job waited in <q>:processing:<gate>, a list nobody reads, until
  // a rollback's re-drain. Now it goes back to the head of <q> as it was taken.
  it.each([
    ["stats", "string", (k: DrillQueue["keys"]) => redis.set(k.stats, "hello")],
    ["events", "string", (k: DrillQueue["keys"]) => redis.set(k.events, "hello")],
    ["dead", "hash", (k: DrillQueue["keys"]) => redis.hset(k.dead, "x", "1")],
    ["admitted", "string", (k: DrillQueue["keys"]) => redis.set(k.admitted, "hello")],
  ] as const)("<q>:%s a %s: the gate stops naming it, and the job it held is back at the head of <q>, attempt unchanged, once", async (name, type, corrupt) => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const k = queue.keys;
    const ids = await pushJobs(queue, 2);
    const [first] = await redis.lrange(k.ready, 0, 0);
    await corrupt(k);
    const gate = startGate(k.queue, fakeProc(CALM_PSI).roots);
    const key = `${k.queue}:${name}`;
    try {
      await gate.waitForError(new RegExp(`^gate: decision failed: redis answered ${literal(key)} is a ${type}, not a`));
      expect(await redis.llen(k.processing(gate.gateIdForTest))).toBe(1);
    } finally {
      await gate.stop();
    }
    expect(gate.lines).toEqual([]);
    expect(await redis.llen(k.processing(gate.gateIdForTest))).toBe(0);
    const ready = await redis.lrange(k.ready, 0, -1);
    expect(ready).toHaveLength(2);
    expect(ready[0]).toBe(first); // the same bytes: attempt 0, at the head
    expect(ready.filter((p) => p === first)).toHaveLength(1);
    expect(gate.errors.filter((e) => !e.startsWith("gate: decision failed: ")), gate.errors.join("\n")).toEqual([expect.stringMatching(new RegExp(`^gate: gave 1 undecided job\\(s\\) back to the head of ${literal(k.ready)}`))]);
    // A gate started next recovers nothing and decides each job once.
    await redis.del(key);
    const next = startGate(k.queue, fakeProc(CALM_PSI).roots, { maxJobs: 2 });
    expect(await next.done).toMatchObject({ decided: 2, recovered: 0 });
    expect(next.lines).toEqual(["admit job=1 packed=24000 limit=32000", "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry"]);
    await assertNoJobLost(redis, k.queue, ids);
  });

  // QA: a <q>:gates of another type failed every pass (the dead gates' recovery
  // refused): 'decision failed' and 'deciding again' every poll, and a dead gate's
  // list stayed where nobody reads it. Now: named once, dead gates are found by
  // their lists, their jobs come back, and the gate decides as usual.
  it("<q>:gates a string: named once, not as a failure; a dead gate's list still comes back, and the gate decides", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const k = queue.keys;
    const ids = await pushJobs(queue, 2);
    await redis.lmove(k.ready, k.processing("gone"), "LEFT", "RIGHT");
    await redis.set(k.gates, "hello");
    const refusal = `${k.gates} is a string, not a hash (drill never writes that there)`;
    const gate = startGate(k.queue, fakeProc(CALM_PSI).roots);
    try {
      await gate.waitFor(/^reject_packed_tokens job=2 /);
      await new Promise((r) => setTimeout(r, 1000)); // several polls
    } finally {
      expect(await gate.stop()).toMatchObject({ decided: 2, recovered: 1 });
    }
    expect(gate.lines).toEqual(["recovered job=1 from_gate=gone attempt=1 route=ready", "admit job=1 packed=24000 limit=32000 attempt=1", "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry"]);
    expect(gate.errors, gate.errors.join("\n")).toEqual([
      `gate: ${refusal}: dead gates are found by their processing lists alone until that key is fixed`,
      `gate: recovered 1 job(s) of dead gate gone (${k.processing("gone")}) to the head of ${k.ready}, unrecorded (${refusal})`,
    ]);
    expect(await redis.exists(k.processing("gone"))).toBe(0);
    await redis.del(k.gates);
    await assertNoJobLost(redis, k.queue, ids);
  });

  // The same recovery refused by <q>:stats of another type: said as a failed decision
  // every poll, the dead gate's jobs stranded in its list.
  it("<q>:stats a string: a dead gate's list comes back to the head of <q>, named unrecorded once; only the gate's own decision is said failed, once", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const k = queue.keys;
    const ids = await pushJobs(queue, 3);
    for (let i = 0; i < 2; i++) await redis.lmove(k.ready, k.processing("gone"), "LEFT", "RIGHT");
    await redis.set(k.stats, "hello");
    const refusal = `${k.stats} is a string, not a hash (drill never writes that there)`;
    const gate = startGate(k.queue, fakeProc(CALM_PSI).roots);
    try {
      await gate.waitFor(/^recovered job=2 /);
      // Several polls: each would refuse the recovery again.
      await new Promise((r) => setTimeout(r, 1000));
      expect(await redis.exists(k.processing("gone"))).toBe(0);
    } finally {
      await gate.stop();
    }
    expect(gate.lines).toEqual(["recovered job=1 from_gate=gone attempt=1 route=ready", "recovered job=2 from_gate=gone attempt=1 route=ready"]);
    expect(gate.errors.filter((e) => !e.startsWith("gate: gave ")), gate.errors.join("\n")).toEqual([
      `gate: recovered 2 job(s) of dead gate gone (${k.processing("gone")}) to the head of ${k.ready}, unrecorded (${refusal})`,
      `gate: decision failed: redis answered ${refusal}; retrying`,
    ]);
    const ready = (await redis.lrange(k.ready, 0, -1)).map((p) => JSON.parse(p) as { id: string; attempt: number });
    expect(ready.map((j) => `${j.id}@${j.attempt}`)).toEqual(["1@1", "2@1", "3@0"]);
    await redis.del(k.stats);
    await assertNoJobLost(redis, k.queue, ids);
  });

  it("a dead gate's processing list of another type: named once, not as a failure, and the gate decides", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const k = queue.keys;
    const ids = await pushJobs(queue, 1);
    await redis.set(k.processing("gone"), "hello");
    const gate = startGate(k.queue, fakeProc(CALM_PSI).roots);
    try {
      await gate.waitFor(/^admit job=1 /);
      await new Promise((r) => setTimeout(r, 1000)); // several polls
    } finally {
      expect(await gate.stop()).toMatchObject({ decided: 1 });
    }
    expect(gate.lines).toEqual(["admit job=1 packed=24000 limit=32000"]);
    expect(gate.errors, gate.errors.join("\n")).toEqual([
      `gate: could not recover ${k.processing("gone")} of dead gate gone (${k.processing("gone")} is a string, not a list (drill never writes that there)); its jobs stay there until that key is fixed`,
    ]);
    await redis.del(k.processing("gone"));
    await assertNoJobLost(redis, k.queue, ids);
  });

  // QA: anything but exactly reject_all admitted, so a mistyped deny-all admitted everything in silence.
  it.each([
    ["reject-all", "mode_value=reject-all", 'holds "reject-all", not admit or reject_all'],
    ["REJECT_ALL", "mode_value=REJECT_ALL", 'holds "REJECT_ALL", not admit or reject_all'],
    ["banana", "mode_value=banana", 'holds "banana", not admit or reject_all'],
    [{ hash: "1" }, "mode_type=hash", "is a hash, not a string"],
  ] as const)("<q>:mode %j is no mode: every job rejected as reject_all (fail closed), the line says what the key held, stderr once", async (stored, field, what) => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 2);
    if (typeof stored === "string") await redis.set(queue.keys.mode, stored);
    else await redis.hset(queue.keys.mode, stored);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 2 });
    await gate.done;
    expect(gate.lines).toEqual([`reject_host_pressure job=1 psi=0.00 mode=reject_all ${field} route=retry`, `reject_host_pressure job=2 psi=0.00 mode=reject_all ${field} route=retry`]);
    const warnings = gate.errors.filter((e) => e.includes(queue.keys.mode));
    expect(warnings).toEqual([`gate: ${queue.keys.mode} ${what}: the gate reads it as reject_all and rejects every job (set admit or reject_all with \`drill gate mode\`)`]);
    expect(await redis.llen(queue.keys.admitted)).toBe(0);
    expect(await redis.llen(queue.keys.retry("dedicated"))).toBe(2);
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // A stored line had attempt= after mode_value= (the record's figures end with the lever's note), a fresh one before it:
  // a reader diffing the two saw the fields move, not only redelivery=1 added.
  it("a redelivered reject under a lever that is not a mode: its line is the fresh line's fields in the fresh line's order, flagged; watch and report rebuild the gate's line", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const payload = encodeJob({ ...unnumberedJob(spec), id: "5", attempt: 1 });
    await queue.pushRaw(payload);
    await queue.pushRaw(payload); // the same copy again: a redelivery of the stored reject
    await redis.set(queue.keys.mode, "banana");
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 2 });
    await gate.done;
    const fresh = "reject_host_pressure job=5 psi=0.00 mode=reject_all attempt=1 mode_value=banana route=retry";
    expect(gate.lines).toEqual([fresh, "reject_host_pressure job=5 psi=0.00 mode=reject_all attempt=1 mode_value=banana redelivery=1"]);
    // What drill watch and drill report print of the gate's <q>:events entry is the gate's own line.
    const entries = await redis.xrange(queue.keys.events, "-", "+");
    const rejects = entries.map(([, kv]) => Object.fromEntries(kv.flatMap((v, i) => (i % 2 === 0 ? [[v, kv[i + 1]]] : [])))).filter((f) => f.reason === "reject_host_pressure");
    expect(rejects.map((f) => formatRejectEvent(f))).toEqual([fresh]);
  });

  it("a decision record a previous drill stored (figures ending with the lever's note) still reads: its line has this copy's attempt before the note", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const payload = encodeJob({ ...unnumberedJob(spec), id: "6", attempt: 2 });
    const decoded = decodeJob(payload);
    if (!decoded.ok) throw new Error(decoded.reason);
    // As drill before this change wrote it: fingerprint, attempt, kind, figures (decisionFigures + the mode note), tab-separated.
    await redis.hset(queue.keys.decisions, "6", `${decoded.fingerprint}\t2\treject_host_pressure\tpsi=0.00 mode=reject_all mode_value="reject all"`);
    await queue.pushRaw(payload);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 1 });
    await gate.done;
    expect(gate.lines).toEqual(['reject_host_pressure job=6 psi=0.00 mode=reject_all attempt=2 mode_value="reject all" redelivery=1']);
    expect(gate.errors).toEqual([]);
  });

  // figuresJson split a stored record's figures on spaces: a quoted lever value came out as `"reject` (QA).
  it("--json: a lever value with a space reads the same in a fresh decision and in its redelivered copy", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const payload = encodeJob({ ...unnumberedJob(spec), id: "7", attempt: 1 });
    await queue.pushRaw(payload);
    await queue.pushRaw(payload);
    await redis.set(queue.keys.mode, "reject all");
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { json: true, maxJobs: 2 });
    await gate.done;
    const [fresh, stored] = gate.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(fresh).toMatchObject({ decision: "reject_host_pressure", job: "7", psi: 0, mode_value: "reject all" });
    expect(stored).toMatchObject({ decision: "reject_host_pressure", job: "7", psi: 0, mode_value: "reject all", redelivery: true });
  });

  it("exactly admit, or no key, admits", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await pushJobs(queue, 2);
    const first = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 1 });
    await first.done;
    await redis.set(queue.keys.mode, "admit");
    const second = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { maxJobs: 1 });
    await second.done;
    expect([...first.lines, ...second.lines]).toEqual(["admit job=1 packed=24000 limit=32000", "reject_packed_tokens job=2 packed=48000 limit=32000 route=retry"]);
    expect([...first.errors, ...second.errors].filter((e) => e.includes(":mode"))).toEqual([]);
  });

  // QA: GET on a hash there made the dry run die with a WRONGTYPE stack trace.
  it("--dry-run over a <q>:mode hash: names the key and its type, and shows the rejects the gate would make", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    await pushJobs(queue, 1);
    await redis.hset(queue.keys.mode, "x", "1");
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { dryRun: true });
    expect(await gate.done).toMatchObject({ stoppedBy: "dry_run" });
    expect(gate.lines).toEqual(["reject_host_pressure job=1 psi=0.00 mode=reject_all mode_type=hash route=retry dry_run=1"]);
    expect(gate.errors).toContainEqual(expect.stringMatching(new RegExp(`^gate: ${literal(queue.keys.mode)} is a hash, not a string`)));
  });

  it("<q>:inflight a string: the gate and its dry run name the key and its type, not a bare WRONGTYPE", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const ids = await pushJobs(queue, 1);
    await redis.set(queue.keys.inflight, "x");
    const said = `${queue.keys.inflight} is a string, not a hash`;
    const dry = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { dryRun: true });
    await expect(dry.done).rejects.toThrow(`gate --dry-run: redis answered ${said}`);
    const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots);
    try {
      await gate.waitForError(new RegExp(`^gate: decision failed: redis answered ${literal(said)}`));
      expect(gate.lines).toEqual([]);
    } finally {
      await gate.stop();
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  // QA: a take refused by the ready list (or the gate's processing list) of another type was said as a
  // bare "WRONGTYPE Operation against a key holding the wrong kind of value": which of the two, not said.
  for (const which of ["ready", "processing"] as const) {
    it(`the ${which} list a hash: the take's refusal names the key and its type, once, and the gate takes jobs once it is fixed`, async () => {
      const queue = new DrillQueue(redis, `g${++n}`);
      const gateId = `gate-wt-${which}-${n}`;
      const key = which === "ready" ? queue.keys.queue : queue.keys.processing(gateId);
      await redis.hset(key, "x", "1");
      if (which === "ready") {
        const dry = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { dryRun: true });
        await expect(dry.done).rejects.toThrow(`gate --dry-run: redis answered ${key} is a hash, not a list`);
      }
      const gate = startGate(queue.keys.queue, fakeProc(CALM_PSI).roots, { gateId });
      try {
        await gate.waitForError(new RegExp(`^gate: could not take a job: redis answered ${literal(`${key} is a hash, not a list`)}`));
        await new Promise((resolve) => setTimeout(resolve, 600)); // a few retries
        expect(gate.errors.filter((e) => e.startsWith("gate: could not take a job"))).toHaveLength(1);
        expect(gate.errors.filter((e) => e.includes("WRONGTYPE"))).toEqual([]);
        await redis.del(key);
        const ids = await pushJobs(queue, 1);
        await gate.waitFor(/^admit job=/);
        await assertNoJobLost(redis, queue.keys.queue, ids);
      } finally {
        await gate.stop();
      }
    });
  }
});

// QA: the fast stall rate needs two samples of `total`. At start the gate waits
// for the second; but when its window started over mid-run (host PSI back after
// it was missing, or a gap: the gate stopped or its loop stalled past two
// intervals) it decided the next interval's jobs on avg10 alone, which lags: a
// gate resumed after SIGSTOP admitted its whole backlog at a 47 % stall rate.
describe("gate whose fast stall window started over", () => {
  /** One more small job, rejected on the stall rate of about 50 % the fake PSI shows, not admitted on its avg10 of 1.00. */
  async function expectRejectedOnRate(gate: RunningGate, queue: DrillQueue, ids: string[]): Promise<void> {
    const { id } = await queue.push({ ...spec, promptTokens: 1000 });
    ids.push(id);
    const [line] = await gate.waitFor(new RegExp(`^(admit|reject_\\w+) job=${id} `));
    expect(line).toMatch(new RegExp(`^reject_host_pressure job=${id} psi=1\\.00 stall_rate=[45]\\d\\.\\d\\d route=retry$`));
  }

  it("host PSI back after missing, stalling 50 % with avg10 still low: the next job is rejected on the stall rate, not admitted on avg10", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const { roots, write } = fakeProc(CALM_PSI);
    const ids: string[] = [];
    // A second interval: the job below is decided well before the sample after the return.
    const gate = startGate(queue.keys.queue, roots, { config: { ...defaultAdmissionConfig, intervalMs: 1000 } });
    let stalling: NodeJS.Timeout | undefined;
    try {
      ids.push((await queue.push({ ...spec, promptTokens: 1000 })).id);
      await gate.waitFor(/^admit job=1 /);
      write(null);
      await gate.waitForError(/^gate: host memory PSI unreadable/);
      // Back, with `total` growing 500 ms a second while avg10 has not caught up.
      const started = Date.now();
      const hot = () => `some avg10=1.00 avg60=0.50 avg300=0.10 total=${(Date.now() - started) * 500}\n`;
      write(hot());
      stalling = setInterval(() => write(hot()), 20);
      await gate.waitForError(/^gate: host memory PSI readable again$/);
      await expectRejectedOnRate(gate, queue, ids);
    } finally {
      clearInterval(stalling);
      await gate.stop();
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });

  it("a gap of 10 s on its clock (the gate stopped, SIGSTOP): the job it takes next is decided on a fresh stall rate, not avg10 alone nor rejected as stale", async () => {
    const queue = new DrillQueue(redis, `g${++n}`);
    const { roots, write } = fakeProc(CALM_PSI);
    let stalledAt: number | null = null;
    // Calm (`total` still) until the gap, then 500 ms of stall a second.
    const psi = () => `some avg10=1.00 avg60=0.50 avg300=0.10 total=${stalledAt === null ? 0 : (Date.now() - stalledAt) * 500}\n`;
    const writing = setInterval(() => write(psi()), 20);
    let skippedMs = 0;
    const gate = startGate(queue.keys.queue, roots, { config: { ...defaultAdmissionConfig, intervalMs: 1000 } }, null, server.url, { monoNow: () => performance.now() + skippedMs });
    const ids: string[] = [];
    try {
      ids.push((await queue.push({ ...spec, promptTokens: 1000 })).id);
      await gate.waitFor(/^admit job=1 /);
      stalledAt = Date.now();
      skippedMs = 10_000;
      await expectRejectedOnRate(gate, queue, ids);
    } finally {
      clearInterval(writing);
      await gate.stop();
    }
    await assertNoJobLost(redis, queue.keys.queue, ids);
  });
});
