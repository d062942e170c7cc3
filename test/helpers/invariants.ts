import { readFileSync } from "node:fs";
import { Redis } from "ioredis";
import { queueKeys } from "../../src/queue/keys.js";

/**
 * RELIABILITY.md's "no job lost": the ids across every place a job can be are
 * exactly the ids that were pushed. Duplicates only where at-least-once
 * delivery allows them, and counted.
 */
export interface NoJobLostReport {
  /** id → every place it was found (key name, or `drain-file`). */
  places: Map<string, string[]>;
  duplicates: { id: string; places: string[] }[];
  /** Dead entries without a usable id (payloads that never were jobs). */
  anonymous: number;
}

export interface NoJobLostOptions {
  drainFile?: string;
  /** Ids that are allowed to appear without having been pushed (e.g. malformed payloads carrying an id). */
  extraIds?: Iterable<string>;
  /** Whether an id found in several places is acceptable (default: never). */
  allowDuplicate?: (id: string, places: string[]) => boolean;
}

export async function collectJobIds(redis: Redis, queue: string, drainFile?: string): Promise<Omit<NoJobLostReport, "duplicates">> {
  const keys = queueKeys(queue);
  const lists = [keys.ready, keys.admitted, keys.dead, keys.drain, keys.done];
  for (const pattern of [keys.processingPattern, keys.workingPattern, keys.retryPattern]) {
    lists.push(...(await scanLists(redis, pattern)));
  }
  const places = new Map<string, string[]>();
  let anonymous = 0;
  const add = (id: string | null, place: string) => {
    if (id === null) {
      anonymous++;
      return;
    }
    places.set(id, [...(places.get(id) ?? []), place]);
  };
  for (const key of lists) {
    // Every key named here or matched by these patterns is a list (src/queue/keys.ts, DESIGN.md's table);
    // "none" is a list that is empty or was moved away between SCAN and TYPE. Anything else could hold
    // jobs this check would not see.
    const type = await redis.type(key);
    if (type === "none") continue;
    if (type !== "list") throw new Error(`no-job-lost check on queue ${queue}: ${key} is a ${type}, not a list: its jobs cannot be counted`);
    for (const entry of await redis.lrangeBuffer(key, 0, -1)) add(idOf(entry.toString("utf8")), key);
  }
  if (drainFile !== undefined) {
    for (const line of readFileSync(drainFile, "utf8").split("\n")) if (line.trim() !== "") add(idOf(line), "drain-file");
  }
  return { places, anonymous };
}

export async function assertNoJobLost(redis: Redis, queue: string, pushedIds: Iterable<string>, options: NoJobLostOptions = {}): Promise<NoJobLostReport> {
  const { places, anonymous } = await collectJobIds(redis, queue, options.drainFile);
  return checkPlaces(places, anonymous, queue, pushedIds, options);
}

/**
 * The same invariant over rollback's export (`final-<ts>.jsonl`), for when the
 * embedded Redis that held the lists is gone.
 */
export function assertNoJobLostInExport(exportFile: string, queue: string, pushedIds: Iterable<string>, options: NoJobLostOptions = {}): NoJobLostReport {
  const keys = queueKeys(queue);
  const prefixes = [`${keys.processing("x").slice(0, -1)}`, `${keys.working("x").slice(0, -1)}`, `${keys.retry("x").slice(0, -1)}`];
  const isJobList = (key: string) => [keys.ready, keys.admitted, keys.dead, keys.drain, keys.done].includes(key) || prefixes.some((p) => key.startsWith(p));
  const places = new Map<string, string[]>();
  let anonymous = 0;
  for (const line of readFileSync(exportFile, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    const entry = JSON.parse(line) as { key: string; type: string; value: Array<{ utf8?: string; base64?: string }> };
    if (!isJobList(entry.key)) continue;
    // as in collectJobIds: a job key that is not a list holds jobs this check cannot count
    if (entry.type !== "list") throw new Error(`no-job-lost check on queue ${queue} in ${exportFile}: ${entry.key} is a ${entry.type}, not a list: its jobs cannot be counted`);
    for (const item of entry.value) {
      const id = idOf(item.utf8 ?? Buffer.from(item.base64 ?? "", "base64").toString("utf8"));
      if (id === null) anonymous++;
      else places.set(id, [...(places.get(id) ?? []), entry.key]);
    }
  }
  return checkPlaces(places, anonymous, queue, pushedIds, options);
}

function checkPlaces(places: Map<string, string[]>, anonymous: number, queue: string, pushedIds: Iterable<string>, options: NoJobLostOptions): NoJobLostReport {
  const pushed = new Set(pushedIds);
  const extra = new Set(options.extraIds ?? []);
  const missing = [...pushed].filter((id) => !places.has(id));
  const unknown = [...places.keys()].filter((id) => !pushed.has(id) && !extra.has(id));
  const duplicates = [...places].filter(([, where]) => where.length > 1).map(([id, where]) => ({ id, places: where }));
  const forbidden = duplicates.filter((d) => !(options.allowDuplicate?.(d.id, d.places) ?? false));
  const problems: string[] = [];
  if (missing.length > 0) problems.push(`lost: ${missing.join(",")}`);
  if (unknown.length > 0) problems.push(`never pushed: ${unknown.join(",")}`);
  if (forbidden.length > 0) problems.push(`duplicated: ${forbidden.map((d) => `${d.id} in ${d.places.join("+")}`).join("; ")}`);
  if (problems.length > 0) throw new Error(`no-job-lost invariant broken on queue ${queue}: ${problems.join(" | ")}`);
  return { places, duplicates, anonymous };
}

/**
 * Every id a queue has given so far (1..<q>:seq), read live from its Redis:
 * the pushed ids of a drill that never printed them, taken apart from the
 * export later checked against them (an id list read from that export would
 * let an empty export pass). `atLeast`: wait (up to 10 s) for a packer still
 * pushing to get there.
 */
export async function idsGivenByQueue(url: string, queue: string, atLeast = 0): Promise<string[]> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 3000, retryStrategy: () => null });
  try {
    await redis.connect();
    const deadline = Date.now() + 10_000;
    for (;;) {
      const seq = Number((await redis.get(queueKeys(queue).seq)) ?? "0");
      if (seq >= atLeast || Date.now() > deadline) return Array.from({ length: seq }, (_, i) => String(i + 1));
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    redis.disconnect();
  }
}

async function scanLists(redis: Redis, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 500);
    cursor = next;
    found.push(...keys);
  } while (cursor !== "0");
  return found;
}

/** A job payload, or an entry wrapping one (dead entries carry `id` and the original `payload`). */
function idOf(text: string): string | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const record = value as { id?: unknown; payload?: unknown };
  if (typeof record.id === "string" && record.id !== "") return record.id;
  if (typeof record.payload === "string") return idOf(record.payload);
  return null;
}
