import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readKernelText, writeKernelFile } from "../../src/host/kernelFile.js";

const dir = mkdtempSync(path.join(tmpdir(), "drill-kernel-write-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// QA: a FIFO for cgroup.subtree_control in a --sysfs tree held `cgroup setup` in its open, past SIGTERM.
describe("writeKernelFile: without blocking, only into a file", () => {
  it("a FIFO with no reader, a device and a directory are refused at once, naming what they are", () => {
    const fifo = path.join(dir, "cgroup.subtree_control");
    execFileSync("mkfifo", [fifo]);
    expect(() => writeKernelFile(fifo, "+memory")).toThrow("a FIFO, not a file");
    expect(() => writeKernelFile("/dev/null", "1048576")).toThrow("a character device, not a file");
    expect(() => writeKernelFile(dir, "1")).toThrow("a directory, not a file");
  });

  // QA: a link in a fake --sysfs tree carried the write out of it, truncating the file it named.
  it("a symbolic link is not followed: refused, and the file it names is left as it was", () => {
    const victim = path.join(dir, "victim");
    writeFileSync(victim, "untouched");
    const link = path.join(dir, "cgroup.kill");
    symlinkSync(victim, link);
    expect(() => writeKernelFile(link, "1")).toThrow("a symbolic link, not a file");
    expect(readFileSync(victim, "utf8")).toBe("untouched");
    const dangling = path.join(dir, "memory.high");
    symlinkSync(path.join(dir, "nowhere"), dangling);
    expect(() => writeKernelFile(dangling, "1")).toThrow("a symbolic link, not a file");
    expect(existsSync(path.join(dir, "nowhere"))).toBe(false);
  });

  it("a file is written (and made when absent, as in a fake tree)", () => {
    const file = path.join(dir, "memory.swap.max");
    writeKernelFile(file, "0");
    writeKernelFile(file, "max");
    expect(readFileSync(file, "utf8")).toBe("max");
  });

  it("a socket in place of a kernel file is named as one when read", async () => {
    const sock = path.join(dir, "pressure-memory.sock");
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(sock, resolve));
    try {
      expect(readKernelText(sock)).toMatchObject({ ok: false, reason: "a socket, not a file" });
    } finally {
      server.close();
    }
  });
});
