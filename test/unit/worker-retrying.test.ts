// The worker's retry of its idempotent scripts through an outage, at a stop.
// QA: a stop with Redis paused waited while every finished job retried its
// done record four times, each try waiting out the 5 s command timeout.
import { describe, expect, it } from "vitest";
import { NoReplyAtStop } from "../../src/queue/redis.js";
import { retrying } from "../../src/worker/run.js";

const timedOut = () => Promise.reject(new Error("Command timed out"));

describe("retrying at a stop", () => {
  it("stopped before it begins: one try when it must try even when stopping, and it fails with the try's error", async () => {
    const stopped = new AbortController();
    stopped.abort();
    let tries = 0;
    await expect(retrying(() => (tries++, timedOut()), stopped.signal, true)).rejects.toThrow("Command timed out");
    expect(tries).toBe(1);
  });

  it("stopped during a try that lost its connection: one more try, begun after the stop, then it gives up", async () => {
    const stopped = new AbortController();
    let tries = 0;
    const fn = () => {
      tries++;
      if (tries === 1) stopped.abort();
      return Promise.reject(new Error("connection to redis lost before its reply"));
    };
    await expect(retrying(fn, stopped.signal, true)).rejects.toThrow("connection to redis lost before its reply");
    expect(tries).toBe(2);
  });

  // QA: a try that timed out just before the stop waited out its back-off, then was sent
  // again to the same silent server: the worker outlasted rollback's 3 s grace (SIGKILL).
  it("a try that timed out, then the stop during its back-off: not sent again", async () => {
    const stopped = new AbortController();
    let tries = 0;
    const fn = () => {
      tries++;
      setTimeout(() => stopped.abort(), 10);
      return timedOut();
    };
    await expect(retrying(fn, stopped.signal, true)).rejects.toThrow("Command timed out");
    expect(tries).toBe(1);
  });

  // QA: the try in flight at the stop was given up unanswered after 1 s, then sent again to the
  // same silent server for another second before the give-back could begin.
  it("a try the stop gave up unanswered (NoReplyAtStop) is not sent again", async () => {
    const stopped = new AbortController();
    let tries = 0;
    const fn = () => {
      tries++;
      stopped.abort();
      return Promise.reject(new NoReplyAtStop(1000));
    };
    await expect(retrying(fn, stopped.signal, true)).rejects.toThrow(NoReplyAtStop);
    expect(tries).toBe(1);
  });

  it("not stopping: it tries again until it succeeds; stopping without evenWhenStopping: no second try", async () => {
    let tries = 0;
    expect(await retrying(() => (++tries < 3 ? timedOut() : Promise.resolve("ok")), new AbortController().signal, true)).toBe("ok");
    expect(tries).toBe(3);
    const stopped = new AbortController();
    stopped.abort();
    let once = 0;
    await expect(retrying(() => (once++, timedOut()), stopped.signal, false)).rejects.toThrow("Command timed out");
    expect(once).toBe(1);
  });
});
