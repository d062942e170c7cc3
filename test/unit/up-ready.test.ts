import { describe, expect, it } from "vitest";
import { gateIdOf, notReadyText, readyTimeoutMs, workerEntryReady } from "../../src/drill/ready.js";
import { weightsReadyTimeoutMs } from "../../src/worker/plan.js";

const MiB = 1024 * 1024;

describe("what up waits for before the schedule's clock starts", () => {
  it("the gate: the one registered by the spawned pid, whatever its id", () => {
    const registered = { "vm-7": JSON.stringify({ pid: 7, started: 1, interval_ms: 1000 }), "vm-9": JSON.stringify({ pid: 9, started: 2, interval_ms: 1000 }) };
    expect(gateIdOf(registered, 9)).toBe("vm-9");
    expect(gateIdOf(registered, 8)).toBeNull();
    expect(gateIdOf(registered, null)).toBeNull();
    // Not an entry drill wrote: never taken for ours.
    expect(gateIdOf({ x: "not json", y: "null", z: JSON.stringify({ pid: "9" }) }, 9)).toBeNull();
  });

  it("the worker: ready_at in its registry entry, under the live heartbeat's token", () => {
    const entry = (fields: Record<string, unknown>) => JSON.stringify({ pid: 5, token: "h:5:1:ab", ...fields });
    expect(workerEntryReady(entry({ ready_at: 1000 }), "h:5:1:ab")).toBe(true);
    // Claimed, weights still being written.
    expect(workerEntryReady(entry({}), "h:5:1:ab")).toBe(false);
    // A previous worker's entry (its heartbeat gone or another holder's): not this one's readiness.
    expect(workerEntryReady(entry({ ready_at: 1000 }), null)).toBe(false);
    expect(workerEntryReady(entry({ ready_at: 1000 }), "h:6:1:cd")).toBe(false);
    expect(workerEntryReady(null, "h:5:1:ab")).toBe(false);
    expect(workerEntryReady("{", "h:5:1:ab")).toBe(false);
  });

  it("bounded by the worker's own weights timeout (or the gate's two samples) plus start-up", () => {
    expect(weightsReadyTimeoutMs(64 * MiB)).toBe(120_000);
    expect(weightsReadyTimeoutMs(4096 * MiB)).toBe(256_000);
    expect(readyTimeoutMs(64 * MiB, 1000)).toBe(150_000);
    expect(readyTimeoutMs(4096 * MiB, 1000)).toBe(286_000);
    expect(readyTimeoutMs(64 * MiB, 100_000)).toBe(230_000);
  });

  it("names what is not ready yet", () => {
    expect(notReadyText({ gate: false, worker: false })).toBe("gate and worker");
    expect(notReadyText({ gate: true, worker: false })).toBe("the worker");
    expect(notReadyText({ gate: false, worker: true })).toBe("the gate");
  });
});
