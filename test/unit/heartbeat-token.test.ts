import os from "node:os";
import { describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { readProcessStat } from "../../src/host/process.js";
import { holderExited, parseWorkerToken, workerToken } from "../../src/worker/heartbeatToken.js";

describe("a heartbeat's holder (host, pid, start time)", () => {
  const roots = new HostRoots();
  const self = readProcessStat(roots, "self");
  const startTime = self.ok ? self.value.startTime : -1;

  it("this live process is not gone; a pid with another start time is", () => {
    expect(holderExited(roots, parseWorkerToken(workerToken(process.pid, startTime)))).toBe(false);
    expect(holderExited(roots, parseWorkerToken(workerToken(process.pid, startTime + 1)))).toBe(true);
  });

  // A holder that could not read its own start time (a --procfs tree without it) wrote 0: it can only
  // expire, never be judged gone, or a rollback would drain the list of a live gate or worker.
  it("start time 0 (unread) or a token that is no token: no holder, so never gone", () => {
    expect(parseWorkerToken(`${os.hostname()}:${process.pid}:0:abcd`)).toBeNull();
    expect(parseWorkerToken("garbage")).toBeNull();
    expect(holderExited(roots, null)).toBe(false);
  });
});
