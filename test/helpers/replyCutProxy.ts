import net from "node:net";

/**
 * A loopback TCP proxy in front of a redis-server that can lose one reply:
 * armed with a marker, it forwards the first command chunk holding it, lets
 * Redis run it, then drops Redis's answer and closes both sides — the window
 * where a SIGKILLed server has applied (and fsynced) a script but never
 * replied, made deterministic. A NOSCRIPT answer is passed on: that command
 * did not run, so the cut waits for the EVAL that follows.
 */
export interface ReplyCutProxy {
  url: string;
  /** Cuts the reply to the next command whose bytes contain `marker`; resolves once cut. */
  cutReplyTo(marker: string): Promise<void>;
  close(): Promise<void>;
}

export async function startReplyCutProxy(redisPort: number): Promise<ReplyCutProxy> {
  let armed: { marker: Buffer; cut: () => void } | null = null;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(redisPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    for (const s of [client, upstream]) s.once("close", () => sockets.delete(s));
    let cutting: (() => void) | null = null;
    client.on("data", (chunk) => {
      if (armed !== null && chunk.includes(armed.marker)) {
        cutting = armed.cut;
        armed = null;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (cutting === null) return void client.write(chunk);
      if (chunk.includes("-NOSCRIPT")) {
        // Not run: re-arm for the EVAL that follows on this connection.
        client.write(chunk);
        return;
      }
      const done = cutting;
      cutting = null;
      client.destroy();
      upstream.destroy();
      done();
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `redis://127.0.0.1:${port}`,
    cutReplyTo: (marker) =>
      new Promise<void>((resolve) => {
        armed = { marker: Buffer.from(marker), cut: resolve };
      }),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
