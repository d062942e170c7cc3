import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { servedNotClosed } from "../../src/commands/rollback.run.js";
import { workerRecovery } from "../../src/commands/worker.run.js";
import type { CgroupRollback, QueueRollback } from "../../src/drill/rollback.js";
import { environValues } from "../../src/host/process.js";
import { distinctQueues, maskedQueues, queueLeftOpenLine, queuesLeftOpenLines, readQueueLever, readServedQueues, type QueueLeftOpen, type ServedQueue } from "../../src/worker/served.js";
import { writeFakeDrill } from "../helpers/fakeState.js";

describe("environValues", () => {
  it("takes whole entries: a value may hold '=', a name set twice is the last, a longer name is another", () => {
    expect(environValues("A=1\0B=x=y\0A=2\0XA=3\0", ["A", "B", "C"])).toEqual({ A: "2", B: "x=y" });
  });
});

describe("the queues a rollback says are left open", () => {
  const q = (queue: string, url = "redis://127.0.0.1:7001"): ServedQueue => ({ queue, url });
  const cgroup = (queuesServed: ServedQueue[]): CgroupRollback => ({ name: "c", dirs: [], step: { step: "kill and remove cgroup", ok: true, detail: "" }, queuesServed });
  const closed = (queue: string, url: string): QueueRollback => ({ queue, url, steps: [], drainLength: 0, left: [] });

  it("each queue once, across the cgroups", () => {
    expect(distinctQueues([q("a"), q("a"), q("b"), q("a", "redis://127.0.0.1:7002")])).toEqual([q("a"), q("b"), q("a", "redis://127.0.0.1:7002")]);
    expect(servedNotClosed([cgroup([q("a"), q("a")]), cgroup([q("a"), q("b")])], [])).toEqual([q("a"), q("b")]);
  });

  it("not the queue this rollback's --queue closed on that Redis (its URL masked there); the same name on another Redis still is", () => {
    const served = [q("a", "redis://:pw@127.0.0.1:7001"), q("a", "redis://127.0.0.1:7002")];
    expect(servedNotClosed([cgroup(served)], [closed("a", "redis://:***@127.0.0.1:7001")])).toEqual([q("a", "redis://127.0.0.1:7002")]);
  });

  it("masks the password of every URL it prints", () => {
    expect(maskedQueues([q("a", "redis://:pw@127.0.0.1:7001")])).toEqual([q("a", "redis://:***@127.0.0.1:7001")]);
  });

  it("names the command that closes and drains it; a lever it could not read is said as such", () => {
    const open: QueueLeftOpen = { queue: "sbo", url: "redis://:***@127.0.0.1:7001", lever: "admit", command: "drill --state-dir /tmp/st --redis 'redis://:***@127.0.0.1:7001' rollback --queue sbo", alsoRollsBack: [], queueOnlyCommand: null };
    expect(queueLeftOpenLine(open)).toBe(
      "queue sbo on redis://:***@127.0.0.1:7001: its worker is gone (what it held is back in sbo:admitted if it stopped on the SIGTERM; if it was killed, still in " +
        "sbo:working:<its worker id>, which the queue's rollback re-drains), but its admission is still open: " +
        "what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: drill --state-dir /tmp/st --redis 'redis://:***@127.0.0.1:7001' rollback --queue sbo",
    );
    expect(queueLeftOpenLine({ ...open, lever: null })).toContain("and its admission may still be open (its Redis did not answer: the lever was not read): ");
  });

  // QA "paste every command drill prints": the command names --redis 'redis://:***@…', which does not paste.
  it("the note that *** does not paste follows the lines once, only when a queue left open had a password", () => {
    const open = (queue: string, url: string): QueueLeftOpen => ({ queue, url, lever: "admit", command: `drill --redis '${url}' rollback --queue ${queue}`, alsoRollsBack: [], queueOnlyCommand: null });
    const note = "(the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL)";
    const served = [q("a", "redis://:pw@127.0.0.1:7001"), q("b", "redis://:pw@127.0.0.1:7001"), q("c", "redis://127.0.0.1:7002")];
    const both = [open("a", "redis://:***@127.0.0.1:7001"), open("b", "redis://:***@127.0.0.1:7001")];
    expect(queuesLeftOpenLines(both, served)).toEqual([...both.map(queueLeftOpenLine), note]);
    // Only the queues left open count: a and b (their levers closed) are not among them here.
    const plain = [open("c", "redis://127.0.0.1:7002")];
    expect(queuesLeftOpenLines(plain, served)).toEqual([queueLeftOpenLine(plain[0]!)]);
    expect(queuesLeftOpenLines([], served)).toEqual([]);
  });

  it("not a queue on the embedded Redis a drill's rollback stopped (any db of it): no hint sends the operator there (QA); another silent Redis still is", async () => {
    const stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-served-"));
    try {
      const rollback = { at: new Date().toISOString(), exported: path.join(stateDir, "smoke", "final.jsonl"), left: [] };
      writeFakeDrill(stateDir, "smoke", "jobs", "redis://127.0.0.1:1", { phase: "complete", redis: { url: "redis://127.0.0.1:1", embedded: { dir: stateDir, port: 1 } }, rollback });
      const open = (await readServedQueues([q("jobs", "redis://localhost:1/2"), q("jobs", "redis://127.0.0.1:2")], { stateDir })).open;
      expect(open.map((o) => o.url)).toEqual(["redis://127.0.0.1:2"]);
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  });

  it("a Redis that answers nothing (a closed port) is read as an unknown lever within the bound, not a hang", async () => {
    const started = Date.now();
    expect((await readQueueLever(q("a", "redis://127.0.0.1:1"))).lever).toBeNull();
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe("what becomes of a killed worker's jobs, as its launcher says", () => {
  it("a worker drill up started: the rollback of that drill", () => {
    expect(workerRecovery({ stateDir: "/tmp/st" }, "redis://127.0.0.1:7001", "q", "w1", { DRILL_RUN_ID: "smoke-20261203000000-abcdef" })).toBe(
      "is given back by the next worker with --worker-id w1, or drained by the rollback of the drill up that started it",
    );
  });

  it("a worker run by hand: the queue's rollback, on its Redis and state dir, the password masked and how to run it so", () => {
    expect(workerRecovery({ stateDir: "/tmp/st" }, "redis://:pw@127.0.0.1:7001", "q", "w1", {})).toBe(
      "is given back by the next worker with --worker-id w1, or drained by `drill --state-dir /tmp/st --redis 'redis://:***@127.0.0.1:7001' rollback --queue q`" +
        " (the Redis password is shown as ***: put yours in its place, or leave --redis out with DRILL_REDIS_URL set to the whole URL)",
    );
  });
});
