// A --redis that points at something else (an HTTP server on that port): said
// as that, at once. QA: "Protocol error, got "<" as reply type byte. Please
// report this." (ioredis's words, sending the operator to its tracker), after
// ~10 s of reconnecting to a server that would never speak Redis. The built
// binary against a loopback listener that answers every connection with HTML.
import net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";

describe("--redis at a server that is not Redis", () => {
  let server: net.Server;
  let url: string;
  let root: string;
  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), "drill-not-redis-"));
    server = net.createServer((socket) => {
      socket.on("data", () => socket.end("<html>400 Bad Request</html>\r\n"));
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `redis://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    rmSync(root, { recursive: true, force: true });
  });

  it.each([
    ["pack", ["pack", "--jobs", "1", "--queue", "nrq"]],
    ["gate mode", ["gate", "mode", "reject_all", "--queue", "nrq"]],
    ["report", ["report", "--queue", "nrq"]],
  ])("%s: exit 1, not a Redis server, in well under ioredis's reconnecting", async (_label, args) => {
    const started = Date.now();
    const r = await runDrill(["--state-dir", path.join(root, "state"), "--redis", url, ...args], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stderr).toContain(`cannot connect to redis at ${url}: not a Redis server: its reply began with "<"`);
    expect(r.stderr).not.toContain("Please report this");
    // A bound on a hang, not a timing claim: 10 s of reconnects was the bug.
    expect(Date.now() - started).toBeLessThan(8000);
  }, 60_000);

  it("rollback --queue: FAIL connect redis saying so, at once (not the whole PING wait)", async () => {
    const started = Date.now();
    const r = await runDrill(["--state-dir", path.join(root, "state"), "--redis", url, "rollback", "--queue", "nrq"], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(4);
    expect(r.stdout).toContain(`FAIL connect redis: redis at ${url}: not a Redis server: its reply began with "<"`);
    expect(`${r.stdout}${r.stderr}`).not.toContain("Please report this");
    expect(Date.now() - started).toBeLessThan(8000);
  }, 60_000);

  it("up: doctor refuses it (exit 3) saying it is not Redis, nothing started", async () => {
    const r = await runDrill(["--state-dir", path.join(root, "up-state"), "--redis", url, "up", "--parent", "self", "--name", "notrediscg", "--file-dir", root], { timeout: 60_000 });
    expect(r.exitCode, r.stderr).toBe(3);
    expect(r.stderr).toContain("not a Redis server: its reply began with");
    expect(`${r.stdout}${r.stderr}`).not.toContain("Please report this");
  }, 90_000);

  it("watch --once: the queue fields null, the reason says it is not Redis", async () => {
    const r = await runDrill(["--json", "--state-dir", path.join(root, "state"), "--redis", url, "watch", "--once", "--queue", "nrq", "--parent", "self", "--name", "notrediscg"], { timeout: 30_000 });
    expect(r.exitCode, r.stderr).toBe(0);
    const sample = JSON.parse(r.stdout.trim()) as { queue_len: unknown; missing: Array<{ field: string; reason: string }> };
    expect(sample.queue_len).toBeNull();
    expect(sample.missing.find((m) => m.field === "queue_len")?.reason).toMatch(/not a Redis server/);
    expect(`${r.stdout}${r.stderr}`).not.toContain("Please report this");
  }, 60_000);
});
