import { afterEach, describe, expect, it, vi } from "vitest";
import { exitsWithin } from "../../src/commands/inject.run.js";

afterEach(() => vi.useRealTimers());

describe("inject's SIGTERM grace (exitsWithin)", () => {
  it("a hog that exits at once: true, and no grace timer is left to keep inject alive after a Ctrl-C", async () => {
    vi.useFakeTimers();
    expect(await exitsWithin(Promise.resolve({ code: 130, signal: null }), 3000)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a hog still there when the grace is over: false (inject sends SIGKILL then)", async () => {
    vi.useFakeTimers();
    const within = exitsWithin(new Promise(() => undefined), 3000);
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(3000);
    expect(await within).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });
});
