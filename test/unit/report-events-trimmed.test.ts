import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Chalk } from "chalk";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildReport, eventsTrimmed, STREAM_FIGURES } from "../../src/report/build.js";
import { gatherReport } from "../../src/report/gather.js";
import type { DecisionEvent, EventStreamExtent, ReportInputs } from "../../src/report/inputs.js";
import { renderJson, renderText, type ReportDocument } from "../../src/report/render.js";
import { reportInputs } from "../helpers/reportInputs.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { flat } from "../helpers/reportText.js";

/**
 * QA: 120 000 decisions in the window, `<q>:events` capped (XADD MAXLEN ~
 * 100000) to the last 100 019: the report said "total decisions 100019" and
 * a first reject 20 000 jobs in, without a word. A stream trimmed after the
 * window's start is said: how much, where it starts now, what is partial.
 * The cap is the scripts' constant: here the stream is trimmed by hand
 * (XTRIM MAXLEN) to a few entries.
 */

const SEC = 1000;
const MIN = 60 * SEC;
const T0 = Date.parse("2025-11-30T12:00:00.000Z");
const plain = new Chalk({ level: 0 });

const event = (tsMs: number, reason: string, job: string): DecisionEvent => ({ id: `${tsMs}-0`, reason, job, figures: "route=retry", tsMs, gate: "g", attempt: 0 });

const inputs = (over: Partial<ReportInputs> = {}): ReportInputs => reportInputs({ queue: "tq", ...over });

describe("a trimmed decision stream (pure)", () => {
  // The stream kept the last 3 of 5 rejects: the window (10 min to T0 + 5 min) began before its first entry.
  const kept = [event(T0 + 3 * SEC, "reject_deadline_slack", "3"), event(T0 + 4 * SEC, "reject_deadline_slack", "4"), event(T0 + 5 * SEC, "reject_deadline_slack", "5")];
  const extent = (over: Partial<EventStreamExtent> = {}): EventStreamExtent => ({ firstId: kept[0]!.id, lastId: kept[2]!.id, length: 3, entriesAdded: 5, decisionsAdded: 5, ...over });
  const NOW = T0 + 5 * MIN;

  it("says how many entries and decisions are gone, where the stream starts, and which figures are partial", () => {
    const r = buildReport(inputs({ events: kept, eventStream: extent(), stats: { reject_deadline_slack: "5" } }), NOW, 10 * MIN, { sinceGiven: true });
    expect(r.decisions?.total).toBe(3);
    expect(r.events_trimmed).toEqual({
      stream_starts: new Date(T0 + 3 * SEC).toISOString(),
      first_entry_id: `${T0 + 3 * SEC}-0`,
      entries_trimmed: 2,
      decisions_trimmed: 2,
      partial: STREAM_FIGURES,
    });
    const note = r.notes.find((n) => n.startsWith("tq:events was trimmed"));
    expect(note).toContain(`it now starts at ${new Date(T0 + 3 * SEC).toISOString()}`);
    expect(note).toContain("2 older entries (every kind) trimmed; 2 admit/reject decision(s) tq:stats counts are not in it");
    const text = renderText(r, plain);
    expect(flat(text)).toMatch(/total decisions 3 3 reject\(s\); partial: tq:events starts at 2025-11-30T12:00:03.000Z \(trimmed, see notes\)/);
    const doc = JSON.parse(renderJson(r)) as ReportDocument;
    expect(doc.events_trimmed?.decisions_trimmed).toBe(2);
    expect(doc.events_trimmed?.partial).toContain("first_reject");
  });

  it("without entries-added (an export, Redis before 7): from the stats' admits and rejects beyond the stream's", () => {
    const t = eventsTrimmed(extent({ entriesAdded: null }), kept, T0 - MIN);
    expect(t).toMatchObject({ entries_trimmed: null, decisions_trimmed: 2 });
    // Stats that agree with the stream: nothing trimmed.
    expect(eventsTrimmed(extent({ entriesAdded: null, decisionsAdded: 3 }), kept, T0 - MIN)).toBeNull();
  });

  it("a live gate's decisions after the counters were read are not taken for trimmed ones", () => {
    const later = [...kept, event(T0 + 6 * SEC, "admit", "6")];
    // Counted at lastId (the 3 rejects), the admit came after: nothing trimmed.
    expect(eventsTrimmed(extent({ entriesAdded: null, decisionsAdded: 3 }), later, T0 - MIN)).toBeNull();
  });

  it("nothing said when nothing was trimmed, or only before the window", () => {
    const whole = buildReport(inputs({ events: kept, eventStream: extent({ entriesAdded: 3, decisionsAdded: 3 }) }), NOW, 10 * MIN, { sinceGiven: true });
    expect(whole.events_trimmed).toBeNull();
    expect(whole.notes.join("\n")).not.toContain("trimmed");
    expect(renderText(whole, plain)).not.toContain("partial:");
    // The window starts after the stream's first entry: what was trimmed predates it.
    expect(eventsTrimmed(extent(), kept, T0 + 3 * SEC)).toBeNull();
  });
});

describe("a trimmed decision stream, read live and from an export", () => {
  let server: RedisServer;
  let redis: Redis;
  let stateDir: string;
  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-trimmed-"));
  });
  afterAll(async () => {
    redis.disconnect();
    await server.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it("live: XINFO STREAM's entries-added and the stats name what the cap took", async () => {
    // A mode flip, 2 admits and 5 rejects, each counted as the scripts count them; then the oldest 3 trimmed.
    await redis.xadd("tq:events", `${T0}-0`, "reason", "mode", "job", "", "figures", "mode=admit previous=unset psi=0.00 by=up", "ts", String(T0));
    for (let i = 1; i <= 7; i++) {
      const reason = i <= 2 ? "admit" : "reject_deadline_slack";
      await redis.xadd("tq:events", `${T0 + i * SEC}-0`, "reason", reason, "job", String(i), "figures", "route=retry", "ts", String(T0 + i * SEC), "gate", "g", "attempt", "0");
      await redis.hincrby("tq:stats", i <= 2 ? "admitted" : "reject_deadline_slack", 1);
    }
    await redis.xtrim("tq:events", "MAXLEN", 5);
    const { inputs: read, nowMs } = await gatherReport({ stateDir, name: undefined, queue: "tq", redisUrl: server.url, sinceMs: 10 * MIN, now: () => T0 + 5 * MIN });
    expect(read.eventStream).toMatchObject({ firstId: `${T0 + 3 * SEC}-0`, lastId: `${T0 + 7 * SEC}-0`, length: 5, decisionsAdded: 7 });
    const r = buildReport(read, nowMs, 10 * MIN, { sinceGiven: true });
    expect(r.decisions?.total).toBe(5);
    expect(r.events_trimmed).toMatchObject({ first_entry_id: `${T0 + 3 * SEC}-0`, entries_trimmed: 3, decisions_trimmed: 2 });
    expect(r.first_reject?.line).toContain("job=3");
  });

  it("an untrimmed stream read live says nothing", async () => {
    await redis.xadd("uq:events", `${T0 + SEC}-0`, "reason", "admit", "job", "1", "figures", "packed=1 limit=2", "ts", String(T0 + SEC));
    await redis.hincrby("uq:stats", "admitted", 1);
    const { inputs: read, nowMs } = await gatherReport({ stateDir, name: undefined, queue: "uq", redisUrl: server.url, sinceMs: 10 * MIN, now: () => T0 + 5 * MIN });
    expect(read.eventStream).toMatchObject({ length: 1, decisionsAdded: 1 });
    expect(buildReport(read, nowMs, 10 * MIN, { sinceGiven: true }).events_trimmed).toBeNull();
  });

  it("export: the stats beside the exported stream", async () => {
    const dir = path.join(stateDir, "x");
    mkdirSync(dir, { recursive: true });
    const entry = (i: number) => [`${T0 + i * SEC}-0`, ["reason", "reject_deadline_slack", "job", String(i), "figures", "slack_ms=-1 route=retry", "ts", String(T0 + i * SEC)]];
    const lines = [
      { key: "eq:events", type: "stream", ttl_ms: null, value: [entry(4), entry(5)] },
      { key: "eq:stats", type: "hash", ttl_ms: null, value: { reject_deadline_slack: { utf8: "5" } } },
    ];
    writeFileSync(path.join(dir, "final-2025-11-30T12-05-00-000Z.jsonl"), lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const { inputs: read, nowMs } = await gatherReport({ stateDir, name: "x", queue: undefined, redisUrl: undefined, sinceMs: 10 * MIN });
    const r = buildReport(read, nowMs, 10 * MIN);
    expect(r.events_trimmed).toMatchObject({ first_entry_id: `${T0 + 4 * SEC}-0`, entries_trimmed: null, decisions_trimmed: 3 });
  });
});
