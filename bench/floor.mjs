#!/usr/bin/env node
// The floor under any Node sidecar sampling once per interval. Run by
// watch-vs-shell.mjs, which reads this process's CPU the same way it reads
// drill's.
// - timer:   a timer wake-up and one line written per sample;
// - redis:   plus one ioredis round trip (LLEN);
// - sidecar: the least a Node sidecar can do and still read what drill reads:
//   the same kernel files (FLOOR_FILES, a JSON array; opened once, read from
//   offset 0 into one buffer each sample; the first number of each scanned, nothing validated), one
//   round trip on a raw socket with a pre-encoded EVALSHA (no client library)
//   and a JSON line with drill's sample keys (FLOOR_KEYS). No alarms, no
//   nulls, no rates: what drill adds over this is its own cost.
// usage: node bench/floor.mjs timer|redis|sidecar <redis port> <interval e.g. 250ms> <count>
import { createHash } from "node:crypto";
import { openSync, readSync, writeSync } from "node:fs";
import net from "node:net";
import { Redis } from "ioredis";

const [mode, port, intervalText, countText] = process.argv.slice(2);
const m = /^(\d+)(ms|s)$/.exec(intervalText ?? "");
if (!m || !["timer", "redis", "sidecar"].includes(mode)) throw new Error("usage: floor.mjs timer|redis|sidecar <port> <interval> <count>");
const intervalMs = Number(m[1]) * (m[2] === "s" ? 1000 : 1);
const count = Number(countText);
const sleep = () => new Promise((resolve) => setTimeout(resolve, intervalMs));

if (mode === "sidecar") await sidecar();
else await timerOrRedis();

async function timerOrRedis() {
  const redis = mode === "redis" ? new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }) : null;
  if (redis) await redis.connect();
  for (let i = 0; i < count; i++) {
    const len = redis ? await redis.callBuffer("LLEN", "jobs") : 0;
    process.stdout.write(`{"i":${i},"len":${len}}\n`);
    if (i + 1 < count) await sleep();
  }
  redis?.disconnect();
}

async function sidecar() {
  const files = JSON.parse(process.env.FLOOR_FILES ?? "[]");
  const keys = JSON.parse(process.env.FLOOR_KEYS ?? "[]");
  if (files.length === 0 || keys.length === 0) throw new Error("floor.mjs sidecar: FLOOR_FILES and FLOOR_KEYS (JSON arrays) are required");
  const lua = "return {redis.call('LLEN', KEYS[1]), redis.call('LINDEX', KEYS[1], 0), redis.call('LRANGE', KEYS[2], 0, -1), redis.call('HGETALL', KEYS[3])}";
  const resp = (...args) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join("")}`;
  const evalsha = Buffer.from(resp("EVALSHA", createHash("sha1").update(lua).digest("hex"), 3, "jobs", "jobs:admitted", "jobs:stats"));
  const socket = net.connect(Number(port), "127.0.0.1");
  await new Promise((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  socket.setNoDelay(true);
  let waiting = null;
  let pending = null;
  socket.on("data", (chunk) => {
    pending = pending ? Buffer.concat([pending, chunk]) : chunk;
    const parsed = parseResp(pending, 0);
    if (parsed === null) return;
    pending = null;
    waiting?.(parsed[0]);
  });
  const reply = () => new Promise((resolve) => (waiting = resolve));
  const loaded = reply();
  socket.write(resp("SCRIPT", "LOAD", lua));
  await loaded;

  const buffer = Buffer.allocUnsafe(64 * 1024);
  // Held open and read from offset 0 each sample, as drill's sampler reads kernel files.
  const held = new Map();
  const firstNumber = (file) => {
    let fd = held.get(file);
    if (fd === undefined) held.set(file, (fd = openSync(file, "r")));
    let length = 0;
    for (let n; (n = readSync(fd, buffer, length, buffer.length - length, length)) > 0; ) length += n;
    let i = 0;
    while (i < length && (buffer[i] < 48 || buffer[i] > 57)) i++;
    let value = 0;
    for (; i < length && buffer[i] >= 48 && buffer[i] <= 57; i++) value = value * 10 + buffer[i] - 48;
    return value;
  };
  for (let i = 0; i < count; i++) {
    const answer = reply();
    socket.write(evalsha);
    const numbers = files.map(firstNumber);
    const [queueLen, head, admitted, stats] = await answer;
    const sample = {};
    for (let k = 0; k < keys.length; k++) sample[keys[k]] = numbers[k % numbers.length];
    sample.ts = new Date().toISOString();
    sample.queue_len = queueLen;
    sample.queue_age_ms = head === null ? null : head.length;
    sample.admitted = admitted.length + stats.length;
    writeSync(1, `${JSON.stringify(sample)}\n`);
    if (i + 1 < count) await sleep();
  }
  socket.destroy();
}

/** RESP2 → [value, next offset], or null while the reply is incomplete. */
function parseResp(buf, at) {
  const end = buf.indexOf(13, at);
  if (end < 0) return null;
  const line = buf.latin1Slice(at + 1, end);
  const next = end + 2;
  switch (buf[at]) {
    case 58: // :
      return [Number(line), next];
    case 43: // +
      return [line, next];
    case 45: // -
      throw new Error(`floor.mjs sidecar: redis: ${line}`);
    case 36: {
      // $
      const length = Number(line);
      if (length < 0) return [null, next];
      return next + length + 2 > buf.length ? null : [buf.subarray(next, next + length), next + length + 2];
    }
    case 42: {
      // *
      const length = Number(line);
      if (length < 0) return [null, next];
      const items = [];
      let offset = next;
      for (let k = 0; k < length; k++) {
        const item = parseResp(buf, offset);
        if (item === null) return null;
        items.push(item[0]);
        offset = item[1];
      }
      return [items, offset];
    }
    default:
      throw new Error("floor.mjs sidecar: not a RESP2 reply");
  }
}
