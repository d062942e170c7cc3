#!/usr/bin/env node
// The floor under any Node sidecar sampling once per interval: a timer
// wake-up and one line written per sample ("timer"), plus one ioredis round
// trip ("redis"). Run by watch-vs-shell.mjs, which reads this process's CPU
// the same way it reads drill's.
// usage: node bench/floor.mjs timer|redis <redis port> <interval e.g. 250ms> <count>
import { Redis } from "ioredis";

const [mode, port, intervalText, countText] = process.argv.slice(2);
const m = /^(\d+)(ms|s)$/.exec(intervalText ?? "");
if (!m || (mode !== "timer" && mode !== "redis")) throw new Error("usage: floor.mjs timer|redis <port> <interval> <count>");
const intervalMs = Number(m[1]) * (m[2] === "s" ? 1000 : 1);
const count = Number(countText);

const redis = mode === "redis" ? new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }) : null;
if (redis) await redis.connect();
for (let i = 0; i < count; i++) {
  const len = redis ? await redis.callBuffer("LLEN", "jobs") : 0;
  process.stdout.write(`{"i":${i},"len":${len}}\n`);
  if (i + 1 < count) await new Promise((resolve) => setTimeout(resolve, intervalMs));
}
redis?.disconnect();
