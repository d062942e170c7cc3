import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { fail, HostRoots, readKernelText } from "../../src/host/kernelFile.js";
import { readSample } from "../../src/sampler/read.js";

/** Records the order in which the sample's two sources are touched. */
class RecordingRoots extends HostRoots {
  constructor(
    root: string,
    private readonly log: string[],
  ) {
    super(path.join(root, "proc"), path.join(root, "sys"));
  }
  override proc(...parts: string[]): string {
    this.log.push(`kernel ${parts.join("/")}`);
    return super.proc(...parts);
  }
}

describe("readSample", () => {
  let root = "";
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it("sends the Redis call before reading the kernel, so the reply arrives while the files are read (one wake-up per sample)", async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-read-"));
    const log: string[] = [];
    const queue = {
      read: async () => {
        log.push("queue sent");
        await Promise.resolve();
        log.push("queue answered");
        return fail<never>("redis://127.0.0.1:1", "not connected (test)");
      },
    };
    const raw = await readSample({ roots: new RecordingRoots(root, log), cgroup: fail("/sys/fs/cgroup", "no cgroup (test)") }, queue);
    expect(log[0]).toBe("queue sent");
    expect(log.indexOf("queue answered")).toBeGreaterThan(log.findIndex((entry) => entry.startsWith("kernel ")));
    // An empty tree: every kernel signal is a failed reading, never a zero.
    expect(raw.hostPsi.ok).toBe(false);
    expect(raw.queue.ok).toBe(false);
  });

  // QA: a FIFO for pressure/memory in a --procfs tree blocked the open on the main thread: the gate froze, past SIGTERM.
  it("a FIFO or a device in a fake tree is a failed reading that says what it is, at once (no blocking open, no endless read)", async () => {
    root = mkdtempSync(path.join(tmpdir(), "drill-read-"));
    mkdirSync(path.join(root, "proc", "pressure"), { recursive: true });
    execFileSync("mkfifo", [path.join(root, "proc", "pressure", "memory")]);
    symlinkSync("/dev/zero", path.join(root, "proc", "vmstat"));
    const queue = { read: async () => fail<never>("redis://127.0.0.1:1", "not connected (test)") };
    const raw = await readSample({ roots: new HostRoots(path.join(root, "proc"), path.join(root, "sys")), cgroup: fail("/sys/fs/cgroup", "no cgroup (test)") }, queue);
    expect(raw.hostPsi).toEqual({ ok: false, file: path.join(root, "proc", "pressure", "memory"), reason: "a FIFO, not a file" });
    expect(raw.vmstat).toMatchObject({ ok: false, reason: "a character device, not a file" });
    expect(readKernelText(path.join(root, "proc", "pressure", "memory"))).toMatchObject({ ok: false, reason: "a FIFO, not a file" });
    expect(readKernelText(path.join(root, "proc"))).toMatchObject({ ok: false, reason: "a directory, not a file" });
  });
});
