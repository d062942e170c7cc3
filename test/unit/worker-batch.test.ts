import { describe, expect, it } from "vitest";
import { PassBatcher } from "../../src/worker/batch.js";

/** A toucher whose passes finish when the test says so. */
function manualRunner() {
  const pending: Array<{ resolve: (us: number) => void; reject: (err: Error) => void }> = [];
  return {
    started: () => pending.length,
    runner: { pass: () => new Promise<number>((resolve, reject) => pending.push({ resolve, reject })) },
    finish: (i: number, us: number) => pending[i]!.resolve(us),
    fail: (i: number, err: Error) => pending[i]!.reject(err),
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("PassBatcher", () => {
  it("one pass serves every job waiting when it starts; later askers ride the next pass", async () => {
    const m = manualRunner();
    const batcher = new PassBatcher(m.runner);
    const a = batcher.step();
    const b = batcher.step(); // joins the next pass: the first had already started for a
    const c = batcher.step();
    expect(m.started()).toBe(1);
    m.finish(0, 100);
    expect(await a).toEqual({ us: 100, batch: 1 });
    await tick();
    expect(m.started()).toBe(2);
    m.finish(1, 250);
    expect(await b).toEqual({ us: 250, batch: 2 });
    expect(await c).toEqual({ us: 250, batch: 2 });
    expect(batcher.passes).toBe(2);
    expect(batcher.passUsTotal).toBe(350);
  });

  it("a failed pass rejects its batch and the next request starts a fresh pass", async () => {
    const m = manualRunner();
    const batcher = new PassBatcher(m.runner);
    const a = batcher.step();
    m.fail(0, new Error("toucher exited: killed by SIGKILL"));
    await expect(a).rejects.toThrow(/SIGKILL/);
    const b = batcher.step();
    expect(m.started()).toBe(2);
    m.finish(1, 5);
    expect((await b).us).toBe(5);
  });
});
