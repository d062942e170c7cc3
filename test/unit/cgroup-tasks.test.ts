import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HostRoots } from "../../src/host/kernelFile.js";
import { signalVerified } from "../../src/cgroup/tasks.js";
import { isSameProcess, parseProcessUid, readProcessStat } from "../../src/host/process.js";
import { fakeProcStat, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";

let host: FakeHost | undefined;
afterEach(() => host?.cleanup());

describe("signalVerified (RELIABILITY 6: PID reuse)", () => {
  it("does not signal a pid whose start time changed", async () => {
    const child = spawn("sleep", ["30"], { stdio: "ignore" });
    const pid = child.pid!;
    onTestFinished(() => void child.kill("SIGKILL"));
    const real = readProcessStat(new HostRoots(), pid);
    expect(real.ok).toBe(true);
    if (!real.ok) return;
    const exited = new Promise<string>((resolve) => child.once("exit", (code, signal) => resolve(`exited ${signal ?? code}`)));
    expect(signalVerified(new HostRoots(), { pid, startTime: real.value.startTime + 1 }, "SIGKILL")).toBe("reused");
    // child.exitCode/signalCode change only on a later 'exit' event: give a wrongly sent signal time to land, then look.
    const afterWindow = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("alive"), 300))]);
    expect(afterWindow).toBe("alive");
    expect(isSameProcess(new HostRoots(), pid, real.value.startTime), `pid ${pid} was signalled`).toBe(true);
    expect(signalVerified(new HostRoots(), { pid, startTime: real.value.startTime }, "SIGKILL")).toBe("signalled");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(child.signalCode).toBe("SIGKILL");
  });
  it("a pid that is gone is gone", () => {
    host = makeFakeHost("v2");
    expect(signalVerified(host.roots, { pid: 999999, startTime: 1 }, "SIGKILL")).toBe("gone");
  });
  it("reads identity from a fake procfs", () => {
    host = makeFakeHost("v2");
    mkdirSync(path.join(host.procfs, "77"));
    writeFileSync(path.join(host.procfs, "77", "stat"), fakeProcStat(77, "hog", 5555, "Z"));
    expect(readProcessStat(host.roots, 77)).toMatchObject({ ok: true, value: { startTime: 5555, state: "Z" } });
    expect(signalVerified(host.roots, { pid: 77, startTime: 5555 }, "SIGKILL")).toBe("gone");
  });
});

describe("parseProcessUid (whose a process is, for an EPERM)", () => {
  it("takes the real uid of the Uid: line", () => {
    expect(parseProcessUid("Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t0\t65534\t0\t0\nGid:\t0\t0\t0\t0\n")).toBe(0);
    expect(parseProcessUid("Uid:\t1000\t1000\t1000\t1000\n")).toBe(1000);
  });
  it("no Uid: line is null", () => {
    expect(parseProcessUid("Name:\tsleep\n")).toBeNull();
    expect(parseProcessUid("")).toBeNull();
  });
});
