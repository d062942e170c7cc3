import net from "node:net";
import path from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { connectRedis } from "../../src/queue/redis.js";

const repoRoot = path.resolve(import.meta.dirname, "../..");

/** A port nothing listens on: bound, then closed (never 6379, the host's Redis). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("connectRedis: a Redis that does not answer", () => {
  // QA: a refused connection read "Connection is closed." and told the
  // operator to "give --redis <url> or DRILL_REDIS_URL" after they had.
  it("names the reason (ECONNREFUSED), the URL with its password hidden, and no flag to give", async () => {
    const port = await closedPort();
    const failure = connectRedis(`redis://:hunter2@127.0.0.1:${port}`, { name: "test-connect" });
    await expect(failure).rejects.toThrow(`cannot connect to redis at redis://:***@127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}`);
    const message = await failure.catch((err: Error) => err.message);
    expect(message).not.toContain("Connection is closed");
    expect(message).not.toContain("give --redis");
    expect(message).not.toContain("hunter2");
  });

  // A failed command took 2 s more to exit: ioredis's disconnect timer for a
  // socket that never opened. In a process of its own (the test runner's timers
  // come and go): what is still pending a while after the refusal.
  it("leaves no timer behind that keeps the process alive long after the refusal", async () => {
    const port = await closedPort();
    const script = `
      const { connectRedis } = await import(${JSON.stringify(path.join(repoRoot, "dist", "queue", "redis.js"))});
      await connectRedis("redis://127.0.0.1:${port}", { name: "test-connect" }).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 400));
      console.log(JSON.stringify(process.getActiveResourcesInfo()));`;
    const r = await execa("node", ["--input-type=module", "-e", script], { reject: false });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout) as string[]).not.toContain("Timeout");
  });
});
