import { describe, expect, it } from "vitest";
import { queuesLeftOpen } from "../../src/commands/rollback.run.js";
import { workerRecovery } from "../../src/commands/worker.run.js";
import type { CgroupRollback, QueueRollback } from "../../src/drill/rollback.js";
import { environValues } from "../../src/host/process.js";
import { distinctQueues, queueLeftOpenLine, servedQueueFromEnviron, type ServedQueue } from "../../src/worker/served.js";

describe("the queue a worker serves, read back from its environ", () => {
  it("takes DRILL_WORKER_QUEUE and DRILL_REDIS_URL whole, the password masked", () => {
    const environ = ["PATH=/usr/bin", "DRILL_REDIS_URL=redis://:s3cret@127.0.0.1:7001/2", "XDRILL_WORKER_QUEUE=no", "DRILL_WORKER_QUEUE=q1", ""].join("\0");
    expect(servedQueueFromEnviron(environ)).toEqual({ queue: "q1", redis: "redis://:***@127.0.0.1:7001/2" });
  });

  it("is null for a process that is not a launched worker (either variable missing or empty)", () => {
    expect(servedQueueFromEnviron("DRILL_WORKER_QUEUE=q1\0PATH=/bin")).toBeNull();
    expect(servedQueueFromEnviron("DRILL_REDIS_URL=redis://127.0.0.1:7001\0DRILL_WORKER_QUEUE=")).toBeNull();
    expect(servedQueueFromEnviron("")).toBeNull();
  });

  it("environValues: a value may hold '=', a name set twice is the last", () => {
    expect(environValues("A=1\0B=x=y\0A=2", ["A", "B", "C"])).toEqual({ A: "2", B: "x=y" });
  });
});

describe("the queues a rollback says are left open", () => {
  const q = (queue: string, redis = "redis://127.0.0.1:7001"): ServedQueue => ({ queue, redis });
  const cgroup = (queuesServed: ServedQueue[]): CgroupRollback => ({ name: "c", dirs: [], step: { step: "kill and remove cgroup", ok: true, detail: "" }, queuesServed });
  const closed = (queue: string, url: string): QueueRollback => ({ queue, url, steps: [], drainLength: 0, left: [] });

  it("each queue once, across the coprocess and the cgroups", () => {
    expect(distinctQueues([q("a"), q("a"), q("b"), q("a", "redis://127.0.0.1:7002")])).toEqual([q("a"), q("b"), q("a", "redis://127.0.0.1:7002")]);
    expect(queuesLeftOpen([cgroup([q("a"), q("a")]), cgroup([q("a"), q("b")])], [])).toEqual([q("a"), q("b")]);
  });

  it("not the queue this rollback's --queue closed on that Redis; the same name on another Redis still is", () => {
    expect(queuesLeftOpen([cgroup([q("a"), q("a", "redis://127.0.0.1:7002")])], [closed("a", "redis://127.0.0.1:7001")])).toEqual([q("a", "redis://127.0.0.1:7002")]);
  });

  it("names the command that closes and drains it, acting on the same state dir and trees", () => {
    const line = queueLeftOpenLine(q("sbo", "redis://:***@127.0.0.1:7001"), { stateDir: "/tmp/st", sysfs: "/sys", procfs: "/proc" });
    expect(line).toBe(
      "queue sbo on redis://:***@127.0.0.1:7001: its worker was stopped (what it held is back in sbo:admitted), but its admission is still open: " +
        "what the gate admits now waits for a worker, its deadline slack running out. To close and drain it: drill --state-dir /tmp/st --redis 'redis://:***@127.0.0.1:7001' rollback --queue sbo",
    );
  });
});

describe("what becomes of a killed worker's jobs, as its launcher says", () => {
  it("a worker drill up started: the rollback of that drill", () => {
    expect(workerRecovery({ stateDir: "/tmp/st" }, "redis://127.0.0.1:7001", "q", "w1", { DRILL_RUN_ID: "smoke-20261203000000-abcdef" })).toBe(
      "is given back by the next worker with --worker-id w1, or drained by the rollback of the drill up that started it",
    );
  });

  it("a worker run by hand: the queue's rollback, on its Redis and state dir, the password masked", () => {
    expect(workerRecovery({ stateDir: "/tmp/st" }, "redis://:pw@127.0.0.1:7001", "q", "w1", {})).toBe(
      "is given back by the next worker with --worker-id w1, or drained by `drill --state-dir /tmp/st --redis 'redis://:***@127.0.0.1:7001' rollback --queue q`",
    );
  });
});
