import net from "node:net";

/**
 * A loopback TCP proxy in front of a redis-server that can lose one reply:
 * armed with a marker, it forwards the first command chunk holding it, lets
 * Redis run it, then drops Redis's answer and closes both sides — the window
 * where a SIGKILLed server has applied (and fsynced) a script but never
 * replied, made deterministic. A NOSCRIPT answer is passed on: that command
 * did not run, so the cut waits for the EVAL that follows. Armed to hold
 * instead, it withholds that answer and every later one on the connection
 * (a server that runs the command and then stalls, as a paused one looks to
 * its client) until released; commands still reach Redis and run.
 */
export interface ReplyCutProxy {
  url: string;
  /** Cuts the reply to the next command whose bytes contain `marker`; resolves once cut. */
  cutReplyTo(marker: string): Promise<void>;
  /** Holds the reply to the next command holding `marker`, and all after it on that connection; resolves once held, with the release. */
  holdRepliesFrom(marker: string): Promise<() => void>;
  close(): Promise<void>;
}

export async function startReplyCutProxy(redisPort: number): Promise<ReplyCutProxy> {
  let armed: { marker: Buffer; cut: () => void; hold?: (release: () => void) => void } | null = null;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(redisPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    for (const s of [client, upstream]) s.once("close", () => sockets.delete(s));
    let cutting: (() => void) | null = null;
    // Holding: the replies withheld so far; null when not holding.
    let held: Buffer[] | null = null;
    client.on("data", (chunk) => {
      if (armed !== null && chunk.includes(armed.marker)) {
        const { hold, cut } = armed;
        armed = null;
        if (hold === undefined) cutting = cut;
        else {
          held = [];
          hold(() => {
            const replies = held ?? [];
            held = null;
            for (const reply of replies) if (!client.destroyed) client.write(reply);
          });
        }
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (held !== null) return void held.push(chunk);
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
    holdRepliesFrom: (marker) =>
      new Promise<() => void>((resolve) => {
        armed = { marker: Buffer.from(marker), cut: () => {}, hold: resolve };
      }),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
