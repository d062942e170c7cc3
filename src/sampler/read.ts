import { createHash } from "node:crypto";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { Redis } from "ioredis";
import { parseCounter, parseFlatKeyed, parseLimit, type Limit } from "../cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { readCpuTimes } from "../host/cpu.js";
import { fail, ok, readKernelText, type HostRoots, type Reading } from "../host/kernelFile.js";
import { readHostPsi, readPsiFile } from "../host/psi.js";
import { readVmstat } from "../host/vmstat.js";
import type { QueueKeys } from "../queue/keys.js";
import { redactUrl } from "../queue/redis.js";
import type { CgroupRaw, QueueRaw, RawReadings } from "./step.js";

/**
 * The sidecar's I/O, kept thin: every kernel file once per sample (one open
 * each, no child processes), and one Redis round trip (a pipeline).
 */

export interface KernelTargets {
  roots: HostRoots;
  /** The worker cgroup resolved once at start, or why there is none. */
  cgroup: Reading<WorkerCgroup>;
}

export function readKernel(targets: KernelTargets): Omit<RawReadings, "queue"> {
  const { roots } = targets;
  return {
    monoMs: performance.now(),
    hostPsi: readHostPsi(roots, "memory"),
    vmstat: readVmstat(roots),
    cpu: readCpuTimes(roots),
    cgroup: targets.cgroup.ok ? readCgroupRaw(targets.cgroup.value) : targets.cgroup,
    files: { hostPsi: roots.proc("pressure", "memory"), vmstat: roots.proc("vmstat"), cpu: roots.proc("stat") },
  };
}

function readParsed<T>(file: string, parse: (text: string, file: string) => Reading<T>): Reading<T> {
  const text = readKernelText(file);
  return text.ok ? parse(text.value, file) : text;
}

function oomKillFrom(file: string): Reading<number> {
  const values = readParsed(file, parseFlatKeyed);
  if (!values.ok) return values;
  const count = values.value.get("oom_kill");
  return count === undefined ? fail(file, "no oom_kill line (kernel < 4.13?)") : ok(count);
}

/** a − b for two readings (v1 derives swap from memsw − memory); `max` stays max. */
function difference(a: Reading<Limit>, b: Reading<Limit>): Reading<Limit> {
  if (!a.ok) return a;
  if (!b.ok) return b;
  if (a.value === "max" || b.value === "max") return ok("max");
  return ok(Math.max(0, a.value - b.value));
}

/** The worker cgroup's memory signals in one shape for v2, hybrid and v1. */
export function readCgroupRaw(cgroup: WorkerCgroup): Reading<CgroupRaw> {
  const dir = cgroup.limits.dir;
  const at = (name: string): string => path.join(dir, name);
  const pressureFile = cgroup.pressureFile ?? at("memory.pressure");
  const pressure = cgroup.pressureFile
    ? readPsiFile(cgroup.pressureFile)
    : fail(pressureFile, "legacy cgroup v1 has no per-cgroup PSI");
  let raw: CgroupRaw;
  if (cgroup.limits.version === 2) {
    raw = {
      dir,
      pressure,
      pressureFile,
      current: readParsed(at("memory.current"), parseCounter),
      max: readParsed(at("memory.max"), parseLimit),
      peak: readParsed(at("memory.peak"), parseCounter),
      oomKill: oomKillFrom(at("memory.events")),
      swapCurrent: readParsed(at("memory.swap.current"), parseCounter),
      swapMax: readParsed(at("memory.swap.max"), parseLimit),
    };
  } else {
    const usage = readParsed(at("memory.usage_in_bytes"), parseCounter);
    const limit = readParsed(at("memory.limit_in_bytes"), parseLimit);
    // memsw counts memory + swap together: the swap share is the difference.
    const memswUsage = readParsed(at("memory.memsw.usage_in_bytes"), parseCounter);
    const memswLimit = readParsed(at("memory.memsw.limit_in_bytes"), parseLimit);
    const swapCurrent = difference(memswUsage, usage);
    raw = {
      dir,
      pressure,
      pressureFile,
      current: usage,
      max: limit,
      peak: readParsed(at("memory.max_usage_in_bytes"), parseCounter),
      oomKill: oomKillFrom(at("memory.oom_control")),
      swapCurrent: swapCurrent.ok ? ok(swapCurrent.value === "max" ? 0 : swapCurrent.value) : swapCurrent,
      swapMax: difference(memswLimit, limit),
    };
  }
  // No usage and no limit file: the cgroup is not there (yet, or any more). Say that once.
  if (!raw.current.ok && !raw.max.ok && raw.current.reason === "missing" && raw.max.reason === "missing") {
    return fail(dir, "worker cgroup does not exist");
  }
  return ok(raw);
}

/**
 * One Lua call inside the pipeline, so the whole sample stays one round trip:
 * the in-flight lists `<q>:working:*` (names unknown to us: SCAN) and the jobs
 * in `<q>` / `<q>:admitted` that may be retries on this host class. The text
 * pre-filter only saves bytes; the sampler decodes and checks each one.
 * KEYS: ready admitted; ARGV: working pattern, host class.
 */
const QUEUE_SCAN_LUA = `
local working = {}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if redis.call('TYPE', key).ok == 'list' then
      for _, payload in ipairs(redis.call('LRANGE', key, 0, -1)) do working[#working + 1] = payload end
    end
  end
until cursor == '0'
local candidates = {}
local needle = '"' .. ARGV[2] .. '"'
for _, key in ipairs(KEYS) do
  for _, payload in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.find(payload, needle, 1, true) and not string.find(payload, '"attempt":0[,}]') then
      candidates[#candidates + 1] = payload
    end
  end
end
return {working, candidates}
`;
const QUEUE_SCAN_SHA = createHash("sha1").update(QUEUE_SCAN_LUA).digest("hex");

/**
 * The sidecar's Redis reader. Redis being down must not stop the kernel
 * sampling: commands fail fast while disconnected (no offline queue), the
 * client reconnects in the background, and a reply that does not come back in
 * `timeoutMs` (half-open connection) drops the connection and reconnects.
 */
export class QueueReader {
  readonly source: string;
  private readonly redis: Redis;
  private closed = false;

  constructor(
    url: string,
    private readonly keys: QueueKeys,
    private readonly hostClass: string,
    private readonly timeoutMs: number,
  ) {
    this.source = redactUrl(url);
    this.redis = new Redis(url, {
      lazyConnect: true,
      connectTimeout: timeoutMs,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false, // a stale reply is worse than a missing one
      retryStrategy: () => Math.max(timeoutMs, 500),
      // Its 2 s default keeps the process alive after a refused connection.
      disconnectTimeout: 200,
    });
    this.redis.on("error", () => {}); // surfaced per sample through the failed pipeline
    // EVALSHA keeps the script text off the wire each sample; (re)loaded on every connect.
    this.redis.on("ready", () => {
      this.redis.script("LOAD", QUEUE_SCAN_LUA).catch(() => {});
    });
  }

  /** First connection, bounded; a failure here is fine (the fields go null). */
  async connect(): Promise<void> {
    try {
      await this.redis.connect();
    } catch {
      // reconnects in the background per retryStrategy
    }
  }

  async read(): Promise<Reading<QueueRaw>> {
    if (this.redis.status !== "ready") return fail(this.source, `not connected (${this.redis.status})`);
    const k = this.keys;
    const pipeline = this.redis
      .pipeline()
      .llen(k.ready)
      .lindexBuffer(k.ready, 0)
      .lrangeBuffer(k.admitted, 0, -1)
      .hgetall(k.stats)
      .callBuffer("EVALSHA", QUEUE_SCAN_SHA, 2, k.ready, k.admitted, k.workingPattern, this.hostClass);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), this.timeoutMs + 50);
    });
    try {
      const replies = await Promise.race([pipeline.exec(), timeout]);
      if (replies === "timeout") {
        this.redis.disconnect(true);
        return fail(this.source, `no reply within ${this.timeoutMs}ms (reconnecting)`);
      }
      const parsed = parseReplies(this.source, replies);
      // Script cache flushed (SCRIPT FLUSH, a restart we raced): load it for the next sample.
      if (!parsed.ok && parsed.reason.startsWith("NOSCRIPT")) this.redis.script("LOAD", QUEUE_SCAN_LUA).catch(() => {});
      return parsed;
    } catch (err) {
      return fail(this.source, err instanceof Error ? err.message : String(err));
    } finally {
      clearTimeout(timer);
    }
  }

  /** Safe to call twice. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.redis.disconnect(false);
  }
}

type PipelineReplies = Array<[Error | null, unknown]> | null;

function parseReplies(source: string, replies: PipelineReplies): Reading<QueueRaw> {
  if (replies === null) return fail(source, "pipeline aborted");
  const failed = replies.find(([err]) => err !== null);
  if (failed?.[0]) return fail(source, failed[0].message);
  const [len, head, admitted, stats, scan] = replies.map(([, value]) => value);
  const isBuffers = (v: unknown): v is Buffer[] => Array.isArray(v) && v.every((x) => Buffer.isBuffer(x));
  if (typeof len !== "number") return fail(source, "LLEN: unexpected reply");
  if (head !== null && !Buffer.isBuffer(head)) return fail(source, "LINDEX: unexpected reply");
  if (!isBuffers(admitted)) return fail(source, "LRANGE: unexpected reply");
  if (typeof stats !== "object" || stats === null) return fail(source, "HGETALL: unexpected reply");
  if (!Array.isArray(scan) || !isBuffers(scan[0]) || !isBuffers(scan[1])) return fail(source, "queue scan script: unexpected reply");
  const statValues: Record<string, string> = {};
  for (const [key, value] of Object.entries(stats as Record<string, unknown>)) {
    if (typeof value === "string") statValues[key] = value;
  }
  return ok({ source, queueLen: len, head: head ?? null, admitted, working: scan[0], retryCandidates: scan[1], stats: statValues });
}
