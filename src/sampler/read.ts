import { closeSync, readSync, statfsSync, statSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import type { Redis } from "ioredis";
import { OOM_KILL_KEYS, oomKillIn, parseCounter, parseFlatKeyed, parseLimit, V1_SWAP_STAT_KEYS, v1SwapInUse, v1SwapLimit } from "../cgroup/memoryFiles.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { parseProcStatCpu } from "../host/cpu.js";
import { KERNEL_FS_MAGIC } from "../host/filesystem.js";
import { fail, kernelReadReason, ok, openKernelFile, type HostRoots, type Reading } from "../host/kernelFile.js";
import { scanKeyedCounters } from "../host/keyedCounters.js";
import { parsePsi, type Psi } from "../host/psi.js";
import { parseVmstatCounters, SWAP_COUNTER_NAMES, type Vmstat } from "../host/vmstat.js";
import type { QueueKeys } from "../queue/keys.js";
import { connectionRefusal, databaseRefusal, notRedisReply, openRedis, redactUrl, saysNothingOfWhy, serverLoading } from "../queue/redis.js";
import { script } from "../queue/scripts.js";
import { workerKeys } from "../worker/scripts.js";
import {
  EVENTS_SCANNED_PER_SAMPLE,
  initialRejectFeed,
  isBuffers,
  joinRejectBatches,
  nextRejectFeed,
  NO_NEW_EVENTS,
  NO_REJECTS,
  parseRejectEvents,
  REJECT_LINES_PER_SAMPLE,
  type RejectBatch,
  type RejectEventsRaw,
  type RejectFeed,
} from "./rejects.js";
import { CGROUP_ABSENT_REASON, isQueueKeyRole, type CgroupRaw, type QueueRaw, type QueueScan, type RawReadings, type WrongTypedKey } from "./step.js";

/**
 * The sidecar's I/O, kept thin: every kernel file once per sample (held open
 * between samples, no child processes), and one Redis round trip (one script call).
 */

export interface KernelTargets {
  roots: HostRoots;
  /** The worker cgroup resolved once at start, or why there is none. */
  cgroup: Reading<WorkerCgroup>;
}

type HostFiles = RawReadings["files"];
/** Paths resolved once per roots, not joined again every sample. */
const hostFilesOf = new WeakMap<HostRoots, HostFiles>();

export function readKernel(targets: KernelTargets): Omit<RawReadings, "queue"> {
  const { roots } = targets;
  let files = hostFilesOf.get(roots);
  if (files === undefined) {
    files = { hostPsi: roots.proc("pressure", "memory"), vmstat: roots.proc("vmstat"), cpu: roots.proc("stat") };
    hostFilesOf.set(roots, files);
  }
  return {
    monoMs: performance.now(),
    hostPsi: readPsiText(files.hostPsi),
    vmstat: readParsed(files.vmstat, parseSwapCounters),
    cpu: readParsed(files.cpu, parseProcStatCpu),
    cgroup: targets.cgroup.ok ? readCgroupRaw(targets.cgroup.value) : targets.cgroup,
    files,
  };
}

/**
 * One sample's readings for one wake-up of the process: the Redis script call
 * goes out first and the kernel files are read while redis-server answers, so
 * the reply is usually waiting when we look for it. Reading the kernel first
 * and then sleeping until the reply arrived was a second wake-up per sample,
 * and on a VM each wake-up of a Node process costs more CPU than the reads
 * themselves (bench/watch-vs-shell.mjs).
 */
export async function readSample(targets: KernelTargets, queue: Pick<QueueReader, "read">): Promise<RawReadings> {
  const reply = queue.read();
  const kernel = readKernel(targets);
  return { ...kernel, queue: await reply };
}

// One buffer for every kernel file of every sample: the largest (/proc/vmstat,
// a v1 memory.stat) are a few KiB; a longer file is read in several chunks.
const textBuffer = Buffer.allocUnsafe(64 * 1024);

// Files of a kernel filesystem (KERNEL_FS_MAGIC) regenerate on a read from
// offset 0 and turn ENODEV once removed (a cgroup's rmdir succeeds with them
// open), so the sampler keeps them open.

/** Kernel files held open between samples, by path (bounded: the sampler's fixed set of files). */
const heldFiles = new Map<string, number>();

/**
 * readKernelText's Reading (same failure reasons) for a file read every
 * sample. A kernel file is opened once and read with pread from offset 0 each
 * sample: one or two syscalls where open, read to EOF and close were four.
 * When its read fails (ENODEV: the cgroup was removed, maybe made again under
 * the same name) it is closed and opened afresh, so a cgroup that went away
 * reads as missing; a renamed cgroup's files stay readable, which
 * readCgroupRaw's stat of the dir catches (sameHeldDir). Any other file (a
 * fake tree under --procfs/--sysfs) is opened every sample: a held one would
 * still read after it was deleted or replaced. Opened only as a file
 * (openKernelFile: one fstat at the open), read without a size (procfs and
 * cgroupfs report size 0) and with no fresh buffers to concatenate.
 */
function readSampleText(file: string): Reading<string> {
  const held = heldFiles.get(file);
  if (held !== undefined) {
    try {
      return ok(readFromStart(held));
    } catch {
      heldFiles.delete(file);
      closeSync(held); // gone under us: open it again below, which says how
    }
  }
  let fd: number;
  try {
    fd = openKernelFile(file);
  } catch (err) {
    return readFailure(file, err);
  }
  let text: string;
  try {
    text = readFromStart(fd);
  } catch (err) {
    closeSync(fd);
    return readFailure(file, err);
  }
  if (isKernelFile(file)) heldFiles.set(file, fd);
  else closeSync(fd);
  return ok(text);
}

/** The inode of each cgroup dir whose files are held, as when they were opened. */
const heldDirs = new Map<string, number>();

/**
 * Whether `dir` is still the directory whose files are held: when it is gone
 * or its inode changed (renamed away, another made under its name), what is
 * held under it is closed (opened afresh by the reads that follow). → false
 * when it is not a directory now.
 */
function sameHeldDir(dir: string): boolean {
  const stat = statSync(dir, { throwIfNoEntry: false });
  const ino = stat?.isDirectory() ? stat.ino : null;
  if (heldDirs.get(dir) !== ino) {
    releaseHeldUnder(dir);
    if (ino === null) heldDirs.delete(dir);
    else heldDirs.set(dir, ino);
  }
  return ino !== null;
}

/** A cgroup found gone or replaced: close what is held of it now, not when (if ever) it comes back. */
function releaseHeldUnder(dir: string): void {
  const prefix = `${dir}${path.sep}`;
  for (const [file, fd] of heldFiles) {
    if (!file.startsWith(prefix)) continue;
    heldFiles.delete(file);
    closeSync(fd);
  }
}

function isKernelFile(file: string): boolean {
  try {
    return KERNEL_FS_MAGIC.has(statfsSync(file).type);
  } catch {
    return false;
  }
}

/** The whole file from offset 0 (pread: a held file needs no seek), through the shared buffer. */
function readFromStart(fd: number): string {
  let length = 0;
  let position = 0;
  let chunks: Buffer[] | null = null; // only for a file longer than the buffer
  for (;;) {
    const n = readSync(fd, textBuffer, length, textBuffer.length - length, position);
    if (n === 0) break;
    length += n;
    position += n;
    if (length === textBuffer.length) {
      (chunks ??= []).push(Buffer.from(textBuffer));
      length = 0;
    }
  }
  if (chunks === null) return textBuffer.toString("utf8", 0, length);
  chunks.push(textBuffer.subarray(0, length));
  return Buffer.concat(chunks).toString("utf8");
}

function readFailure(file: string, err: unknown): Reading<never> {
  return fail(file, kernelReadReason(err));
}

const readPsiText = (file: string): Reading<Psi> => readParsed(file, parsePsi);
const parseSwapCounters = (text: string, file: string): Reading<Vmstat> => parseVmstatCounters(text, file, SWAP_COUNTER_NAMES);

function readParsed<T>(file: string, parse: (text: string, file: string) => Reading<T>): Reading<T> {
  const text = readSampleText(file);
  return text.ok ? parse(text.value, file) : text;
}

const parseOomKillKey = (text: string, file: string): Reading<Map<string, number>> => scanKeyedCounters(text, file, OOM_KILL_KEYS, parseFlatKeyed);
const parseV1SwapKeys = (text: string, file: string): Reading<Map<string, number>> => scanKeyedCounters(text, file, V1_SWAP_STAT_KEYS, parseFlatKeyed);

function oomKillFrom(file: string): Reading<number> {
  const values = readParsed(file, parseOomKillKey);
  return values.ok ? oomKillIn(values.value, file) : values;
}

interface CgroupFiles {
  dir: string;
  pressureFile: string;
  /** The file read first: its absence is how a missing cgroup is noticed. */
  current: string;
  max: string;
  peak: string;
  /** v2 memory.events, v1 memory.oom_control. */
  oomKill: string;
  /** v2 memory.swap.current, v1 memory.stat. */
  swapCurrent: string;
  /** v2 memory.swap.max, v1 memory.memsw.limit_in_bytes. */
  swapMax: string;
}

/** Paths resolved once per cgroup, not joined again every sample. */
const cgroupFilesOf = new WeakMap<WorkerCgroup, CgroupFiles>();

function cgroupFiles(cgroup: WorkerCgroup): CgroupFiles {
  let files = cgroupFilesOf.get(cgroup);
  if (files === undefined) {
    const dir = cgroup.limits.dir;
    const at = (name: string): string => path.join(dir, name);
    const v2 = cgroup.limits.version === 2;
    files = {
      dir,
      pressureFile: cgroup.pressureFile ?? at("memory.pressure"),
      current: at(v2 ? "memory.current" : "memory.usage_in_bytes"),
      max: at(v2 ? "memory.max" : "memory.limit_in_bytes"),
      peak: at(v2 ? "memory.peak" : "memory.max_usage_in_bytes"),
      oomKill: at(v2 ? "memory.events" : "memory.oom_control"),
      swapCurrent: at(v2 ? "memory.swap.current" : "memory.stat"),
      swapMax: at(v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes"),
    };
    cgroupFilesOf.set(cgroup, files);
  }
  return files;
}

/** The worker cgroup's memory signals in one shape for v2, hybrid and v1. */
export function readCgroupRaw(cgroup: WorkerCgroup): Reading<CgroupRaw> {
  const files = cgroupFiles(cgroup);
  const { dir, pressureFile } = files;
  // One stat of each dir a sample: a cgroup that is not there (yet, or any
  // more) is one failed stat, not seven failed opens; and a held file outlives
  // a rename of its cgroup (readable, no ENODEV), so a dir whose inode changed
  // is another cgroup now and what is held of it is let go.
  const present = sameHeldDir(dir);
  const pressureDir = cgroup.pressureFile === null ? dir : path.dirname(cgroup.pressureFile);
  if (pressureDir !== dir) sameHeldDir(pressureDir); // hybrid: the unified twin
  if (!present) return fail(dir, CGROUP_ABSENT_REASON);
  const current = readParsed(files.current, parseCounter);
  const pressure = cgroup.pressureFile
    ? readPsiText(cgroup.pressureFile)
    : fail(pressureFile, "legacy cgroup v1 has no per-cgroup PSI");
  if (cgroup.limits.version === 2) {
    return ok({
      dir,
      pressure,
      hasPressure: cgroup.pressureFile !== null,
      pressureFile,
      current,
      max: readParsed(files.max, parseLimit),
      peak: readParsed(files.peak, parseCounter),
      oomKill: oomKillFrom(files.oomKill),
      swapCurrent: readParsed(files.swapCurrent, parseCounter),
      swapMax: readParsed(files.swapMax, parseLimit),
    });
  }
  const limit = readParsed(files.max, parseLimit);
  const memswLimit = readParsed(files.swapMax, parseLimit);
  const stat = readParsed(files.swapCurrent, parseV1SwapKeys);
  const statSwap = stat.ok ? v1SwapInUse(stat.value) : undefined;
  const swapCurrent: Reading<number> = !stat.ok ? stat : statSwap === undefined ? fail(files.swapCurrent, "no swap line (swap accounting off)") : ok(statSwap);
  return ok({
    dir,
    pressure,
    hasPressure: cgroup.pressureFile !== null,
    pressureFile,
    current,
    max: limit,
    peak: readParsed(files.peak, parseCounter),
    oomKill: oomKillFrom(files.oomKill),
    swapCurrent,
    swapMax: !memswLimit.ok ? memswLimit : !limit.ok ? limit : ok(v1SwapLimit(memswLimit.value, limit.value)),
  });
}

/**
 * Above this many keys the `<q>:working:*` SCAN is replaced by the worker
 * registry (`<q>:workers` hash): a SCAN of a huge shared keyspace every few
 * seconds is traffic the sidecar has no business adding.
 */
export const WORKING_SCAN_MAX_KEYS = 100_000;

/**
 * How often the sidecar looks for `<q>:working:*` lists (findWorkingKeys),
 * at most; watch's start waits for the first look (QueueReader.connect). The
 * registry's workers' lists are read every sample; this is for a list no
 * registry entry names (one whose entry was removed while it still held
 * jobs): seen within this long, plus the paged SCAN's own time and one
 * sample interval. The worker looks for dead peers' lists as often (its
 * peerRecoveryMs default).
 */
export const WORKING_DISCOVERY_MS = 5000;

/** Keys SCAN looks at per page: Redis answers the gate's and the worker's commands between pages. */
const WORKING_SCAN_PAGE = 1000;

/**
 * The `<q>:working:*` keys there now, by a paged SCAN from the client (the
 * sample script ran it inside Redis once: 65 ms of every second blocked with
 * 99 000 unrelated keys); null when the keyspace is past
 * WORKING_SCAN_MAX_KEYS (the registry's lists only). Buffers: a key is passed
 * back as it is named, whatever its bytes.
 */
export async function findWorkingKeys(redis: Redis, pattern: string): Promise<Buffer[] | null> {
  if ((await redis.dbsize()) > WORKING_SCAN_MAX_KEYS) return null;
  const found = new Map<string, Buffer>(); // SCAN may return a key twice
  let cursor = "0";
  do {
    const [next, keys] = await redis.scanBuffer(cursor, "MATCH", pattern, "COUNT", WORKING_SCAN_PAGE);
    cursor = next.toString();
    for (const key of keys) found.set(key.toString("latin1"), key);
  } while (cursor !== "0");
  return [...found.values()];
}

/**
 * The most entries of the ready list and of the admitted list one sample
 * reads. A full LRANGE of a 500 000-job ready list took ~0.5 s inside Redis
 * every sample, stalling the gate's and worker's commands (and past the
 * reader's timeout the reader reconnected and sent it again while Redis was
 * still running it). Up to the cap every field is exact; queue_len,
 * queue_age_ms and queue_head_slack_ms (LLEN, LINDEX 0) are exact at any size.
 * Beyond it (QueueScan says so):
 * - admitted list longer than the cap (only with jobs of a few prompt tokens:
 *   each admitted job holds its tokens against the packed-token cap): only
 *   its first (oldest) cap jobs are read, so deadline_slack_ms is null
 *   (step.ts: a smaller slack further back is not seen);
 * - ready list longer than the cap: retry candidates come from its first and
 *   last cap/2 jobs only, where a retried job arrives (gate recovery LPUSHes
 *   to the head, a push goes to the tail) and where it waits for the gate;
 *   one in between is not seen, so finding none does not clear
 *   retry_worker_idle.
 */
export const SAMPLE_LIST_SCAN_CAP = 2000;

/**
 * The whole queue sample as one script: one round trip, and an atomic
 * snapshot (a job moving from admitted to a worker between two reads would
 * otherwise be counted twice or not at all). Cheaper on the client than a
 * five-command pipeline, which matters at one sample a second forever.
 * Its Redis time does not grow with the keyspace: no SCAN in it (a script
 * blocks Redis for as long as it runs), the working lists are the
 * registry's and those the last findWorkingKeys found, passed in.
 * KEYS: ready admitted stats workers mode events, then the working lists
 * found; ARGV: working key prefix, host class, 1 when the working lists
 * found come from a SCAN | 0 when there was none (echoed), events cursor
 * ('' at start), reject line cap, events scan cap, list scan cap
 * (SAMPLE_LIST_SCAN_CAP).
 * → {LLEN ready, LINDEX ready 0, LRANGE admitted (at most the list cap),
 *    HGETALL stats (flat), payloads of the registry's workers' and the found
 *    working lists, retry candidates, the SCAN flag, GET mode,
 *    newest events id read (nil: nothing after the cursor), reject entries'
 *    fields, rejects past the line cap, ready entries scanned, LLEN admitted,
 *    wrong-typed keys: role, key, wrong_type's reason, role, key, reason...}
 * A key of the wrong type is named by the scripts' own check (wrong_type) and
 * read as empty, so only the fields that come from it go null (step.ts).
 * The retry candidates are jobs in ready/admitted (as far as scanned) or held
 * by a worker that mention this host class with an attempt other than 0: a text pre-filter to
 * save bytes; the sampler decodes and checks each one.
 * The events part (src/sampler/rejects.ts): the `<q>:events` entries after
 * the cursor, at most the scan cap of them, of which only the reject entries
 * are sent back; with no cursor yet only the newest id (what is there already
 * is history). Nothing new costs one XRANGE that finds nothing. More than the
 * scan cap since the last sample: it jumps to the newest, so watch stays live
 * and the cost bounded (the stats counters say how many it did not read).
 */
const QUEUE_SAMPLE_KEYS = 6;
const QUEUE_SAMPLE = script(
  "queue-sample",
  QUEUE_SAMPLE_KEYS,
  `
local ready, admitted_key, stats_key, workers_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- A key holding what drill never writes there: named (a bare WRONGTYPE names
-- none) and read as empty, so the other keys' fields still come through.
local wrong = {}
local function usable(role, key, wanted)
  local bad = wrong_type(key, wanted)
  if not bad then return true end
  wrong[#wrong + 1] = role
  wrong[#wrong + 1] = key
  wrong[#wrong + 1] = bad.err
  return false
end
local ready_ok = usable('ready', ready, 'list')
local admitted_ok = usable('admitted', admitted_key, 'list')
local stats_ok = usable('stats', stats_key, 'hash')
local workers_ok = usable('workers', workers_key, 'hash')
local events_ok = usable('events', KEYS[6], 'stream')
local list_cap = tonumber(ARGV[7])
local admitted = {}
if admitted_ok then admitted = redis.call('LRANGE', admitted_key, 0, list_cap - 1) end
local working = {}
-- A worker's list of another type is named too (role working): its jobs are
-- not counted, and skipping it silently would not say why.
local function hold(key)
  if usable('working', key, 'list') then
    for _, payload in ipairs(redis.call('LRANGE', key, 0, -1)) do working[#working + 1] = payload end
  end
end
-- Each list once: a registry's worker's list is usually among those found too.
local held = {}
local function hold_once(key)
  if held[key] then return end
  held[key] = true
  hold(key)
end
if workers_ok then
  for _, worker in ipairs(redis.call('HKEYS', workers_key)) do hold_once(ARGV[1] .. worker) end
end
for i = 7, #KEYS do hold_once(KEYS[i]) end -- the keys after the six named
local scanned = tonumber(ARGV[3])
local candidates = {}
local needle = '"' .. ARGV[2] .. '"'
local function consider(payloads)
  for _, payload in ipairs(payloads) do
    if string.find(payload, needle, 1, true) and not string.find(payload, '"attempt":0[,}]') then
      candidates[#candidates + 1] = payload
    end
  end
end
local ready_len = 0
if ready_ok then ready_len = redis.call('LLEN', ready) end
local ready_scanned = ready_len
if not ready_ok then
elseif ready_len <= list_cap then
  consider(redis.call('LRANGE', ready, 0, -1))
else
  local head = math.floor(list_cap / 2)
  consider(redis.call('LRANGE', ready, 0, head - 1))
  consider(redis.call('LRANGE', ready, head - list_cap, -1))
  ready_scanned = list_cap
end
consider(admitted)
consider(working)
local events, cursor, line_cap, events_cap = KEYS[6], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local function newest(default)
  local last = redis.call('XREVRANGE', events, '+', '-', 'COUNT', 1)[1]
  if last then return last[1] end
  return default
end
local tip, rejects, beyond = false, {}, 0
if not events_ok then
elseif cursor == '' then
  tip = newest('0-0')
else
  local entries = redis.call('XRANGE', events, '(' .. cursor, '+', 'COUNT', events_cap)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'reason' then
        if string.sub(fields[i + 1], 1, 7) == 'reject_' then
          if #rejects < line_cap then rejects[#rejects + 1] = fields else beyond = beyond + 1 end
        end
        break
      end
    end
  end
  if #entries > 0 then tip = entries[#entries][1] end
  if #entries == events_cap then tip = newest(tip) end
end
-- The lever of any type: a hash there reads as its type, which the gate rejects on (read_mode).
local _, mode_type, mode_value = read_mode(KEYS[5])
if mode_type ~= 'none' and mode_type ~= 'string' then mode_value = '(a ' .. mode_type .. ')' end
local head, stats, admitted_len = false, {}, 0
if ready_ok then head = redis.call('LINDEX', ready, 0) end
if stats_ok then stats = redis.call('HGETALL', stats_key) end
if admitted_ok then admitted_len = redis.call('LLEN', admitted_key) end
return {ready_len, head, admitted, stats, working, candidates, scanned, mode_value, tip, rejects, beyond, ready_scanned, admitted_len, wrong}
`,
);
const QUEUE_SAMPLE_LUA = QUEUE_SAMPLE.source;
const QUEUE_SAMPLE_SHA = QUEUE_SAMPLE.sha1;
const REJECT_LINES_ARG = String(REJECT_LINES_PER_SAMPLE);
const EVENTS_SCANNED_ARG = String(EVENTS_SCANNED_PER_SAMPLE);
const LIST_SCAN_ARG = String(SAMPLE_LIST_SCAN_CAP);

/**
 * The sidecar's Redis reader. Redis being down must not stop the kernel
 * sampling: commands fail fast while disconnected (no offline queue), the
 * client reconnects in the background, and a reply that does not come back in
 * `timeoutMs` (half-open connection) drops the connection and reconnects.
 * It also follows the gate's reject lines (takeRejects): from where the
 * last reading that came back left off, so a reading lost to an outage or a
 * timeout shows its lines on the next one, once.
 */
export class QueueReader {
  readonly source: string;
  private readonly redis: Redis;
  private closed = false;
  /** The client's last connection error ("connect ECONNREFUSED …"), until it is ready again. */
  private lastError: string | null = null;
  /** The worker registry (src/worker/scripts.ts workerKeys().workers). */
  private readonly workersKey: string;
  /** `<q>:working:`, a worker id after it. */
  private readonly workingPrefix: string;
  private rejectFeed: RejectFeed = initialRejectFeed;
  /** Reject lines read and not yet taken. */
  private rejects: RejectBatch = NO_REJECTS;
  /** The working lists the last findWorkingKeys found; null: none yet, or the keyspace is past WORKING_SCAN_MAX_KEYS. */
  private workingFound: Buffer[] | null = null;
  /** The look for working lists under way, and when the last one started (monotonic ms). */
  private finding: Promise<void> | null = null;
  private foundAtMs: number | null = null;

  constructor(
    url: string,
    private readonly keys: QueueKeys,
    private readonly hostClass: string,
    private readonly timeoutMs: number,
  ) {
    this.source = redactUrl(url);
    this.workersKey = workerKeys(keys.queue).workers;
    this.workingPrefix = keys.workingPattern.slice(0, -1);
    this.redis = openRedis(url, {
      lazyConnect: true,
      connectTimeout: timeoutMs,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false, // a stale reply is worse than a missing one
      retryStrategy: () => Math.max(timeoutMs, 500),
    });
    // Surfaced through the failed reading: `not connected` alone would not say why.
    this.redis.on("error", (err: Error) => {
      // A command refused while not connected, or dropped with the connection, says nothing of why: the reason seen before it stays.
      if (this.lastError !== null && saysNothingOfWhy(err)) return;
      const refused = databaseRefusal(this.redis);
      this.lastError = notRedisReply(err) ?? (refused?.cause === err ? refused : err).message;
    });
    // A connection closed before it was ready: what the server said as it accepted (maxclients), once heard, is why.
    this.redis.on("close", () => {
      void connectionRefusal(this.redis).then((refused) => {
        if (refused !== null && this.redis.status !== "ready") this.lastError = refused.message;
      });
    });
    // EVALSHA keeps the script text off the wire each sample; (re)loaded on every connect.
    this.redis.on("ready", () => {
      this.lastError = null;
      this.loadScript();
    });
  }

  private loadScript(): void {
    this.redis.script("LOAD", QUEUE_SAMPLE_LUA).catch(() => {});
  }

  /**
   * First connection, bounded; a failure here is fine (the fields go null).
   * Then the first look for working lists, for at most the reply timeout
   * (past it, it goes on beside the samples), so that a list no registry
   * names is in the samples from the start.
   */
  async connect(): Promise<void> {
    try {
      await this.redis.connect();
    } catch {
      await connectionRefusal(this.redis); // its reason, for the first reading
      return; // reconnects in the background per retryStrategy
    }
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.timeoutMs);
    });
    await Promise.race([this.findWorkingLists(), waited]);
    clearTimeout(timer);
  }

  /**
   * Starts a look for working lists when the last one started
   * WORKING_DISCOVERY_MS ago (or there was none), in the background: the
   * samples go on with what the last look found. → the look under way.
   */
  private findWorkingLists(): Promise<void> | null {
    if (this.redis.status !== "ready") return this.finding;
    const now = performance.now();
    if (this.finding === null && (this.foundAtMs === null || now - this.foundAtMs >= WORKING_DISCOVERY_MS)) {
      this.foundAtMs = now;
      this.finding = findWorkingKeys(this.redis, this.keys.workingPattern)
        .then((found) => {
          this.workingFound = found;
        })
        // A failed look keeps what the last one found: the next is due in WORKING_DISCOVERY_MS.
        .catch(() => {})
        .finally(() => {
          this.finding = null;
        });
    }
    return this.finding;
  }

  async read(): Promise<Reading<QueueRaw>> {
    if (this.redis.status !== "ready") {
      // Loading its data set, the server answers the ready check's INFO and nothing else: that, not ioredis's last words.
      const why = serverLoading(this.redis) ?? this.lastError;
      return fail(this.source, `not connected (${this.redis.status})${why === null ? "" : `: ${why}`}`);
    }
    const k = this.keys;
    void this.findWorkingLists();
    let timer: NodeJS.Timeout | undefined;
    // Our own bound, not commandTimeout: one timer per sample, and on expiry the connection is dropped.
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), this.timeoutMs);
    });
    try {
      const found = this.workingFound;
      const call = this.redis.callBuffer(
        "EVALSHA",
        QUEUE_SAMPLE_SHA,
        QUEUE_SAMPLE_KEYS + (found?.length ?? 0),
        k.ready,
        k.admitted,
        k.stats,
        this.workersKey,
        k.mode,
        k.events,
        ...(found ?? []),
        this.workingPrefix,
        this.hostClass,
        found === null ? "0" : "1",
        this.rejectFeed.cursor ?? "",
        REJECT_LINES_ARG,
        EVENTS_SCANNED_ARG,
        LIST_SCAN_ARG,
      );
      const reply = await Promise.race([call, timeout]);
      if (reply === "timeout") {
        call.catch(() => {});
        this.redis.disconnect(true);
        return fail(this.source, `no reply within ${this.timeoutMs}ms (reconnecting)`);
      }
      const sample = parseQueueSample(this.source, this.keys.queue, reply);
      if (!sample.ok) return sample;
      if (sample.value.events !== NO_NEW_EVENTS) {
        const { feed, batch } = nextRejectFeed(this.rejectFeed, sample.value.events, sample.value.queue.stats);
        this.rejectFeed = feed;
        this.rejects = joinRejectBatches(this.rejects, batch);
      }
      return ok(sample.value.queue);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      // Script cache flushed (SCRIPT FLUSH, a restart we raced): load it for the next sample.
      if (message.startsWith("NOSCRIPT")) this.loadScript();
      return fail(this.source, message);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The gate's reject lines read since the last call (NO_REJECTS when none). */
  takeRejects(): RejectBatch {
    const rejects = this.rejects;
    this.rejects = NO_REJECTS;
    return rejects;
  }

  /** Safe to call twice. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.redis.disconnect(false);
  }
}

/** One queue sample script reply: the sample's queue readings, and what it read of `<q>:events`. */
export interface QueueSampleReply {
  queue: QueueRaw;
  events: RejectEventsRaw;
}

/** The script's reply → QueueRaw and the events read; anything unexpected is a failed reading, never a guess. */
export function parseQueueSample(source: string, queueName: string, reply: unknown): Reading<QueueSampleReply> {
  if (!Array.isArray(reply) || reply.length !== 14) return fail(source, "queue sample script: unexpected reply");
  const [len, head, admitted, statsFlat, working, candidates, scanned, mode, tip, rejects, beyond, readyScanned, admittedLen, wrongFlat] = reply as unknown[];
  if (typeof len !== "number") return fail(source, "LLEN: unexpected reply");
  if (typeof readyScanned !== "number" || typeof admittedLen !== "number") return fail(source, "queue sample script: unexpected reply");
  if (head !== null && !Buffer.isBuffer(head)) return fail(source, "LINDEX: unexpected reply");
  if (mode !== null && !Buffer.isBuffer(mode)) return fail(source, "GET mode: unexpected reply");
  if (!isBuffers(admitted) || !isBuffers(statsFlat) || !isBuffers(working) || !isBuffers(candidates) || !isBuffers(wrongFlat) || wrongFlat.length % 3 !== 0) {
    return fail(source, "queue sample script: unexpected reply");
  }
  const wrongTyped: WrongTypedKey[] = [];
  for (let i = 0; i + 2 < wrongFlat.length; i += 3) {
    const role = wrongFlat[i]!.toString("utf8");
    if (!isQueueKeyRole(role)) return fail(source, "queue sample script: unexpected reply");
    wrongTyped.push({ role, key: wrongFlat[i + 1]!.toString("utf8"), reason: wrongFlat[i + 2]!.toString("utf8") });
  }
  const stats: Record<string, string> = {};
  for (let i = 0; i + 1 < statsFlat.length; i += 2) stats[statsFlat[i]!.toString("utf8")] = statsFlat[i + 1]!.toString("utf8");
  const events = parseRejectEvents(tip, rejects, beyond);
  if (events === null) return fail(source, "events: unexpected reply");
  const scan: QueueScan = { readyLen: len, readyScanned, admittedLen, admittedScanned: admitted.length };
  const queue: QueueRaw = { source, queue: queueName, queueLen: len, head: head ?? null, admitted, working, workingScanned: scanned === 1, retryCandidates: candidates, stats, mode: mode === null ? null : mode.toString("utf8"), wrongTyped, scan };
  return ok({ queue, events });
}
