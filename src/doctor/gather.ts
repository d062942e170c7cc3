import { findRunningDrills } from "../drill/rollback.js";
import { existsSync, realpathSync, rmdirSync, rmSync, statfsSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { Redis } from "ioredis";
import { connectionRefusal, databaseRefusal, notRedisReply, openRedis } from "../queue/redis.js";
import { refusalText } from "../queue/refusal.js";
import { detectLayout, type CgroupLayout } from "../cgroup/layout.js";
import type { ParentSpec } from "../cgroup/names.js";
import { assembleWorkerCgroup, requireParentDirs, resolveWorkerCgroup, twinName, type WorkerCgroup } from "../cgroup/paths.js";
import { makeCgroupDir } from "../cgroup/setup.js";
import { directoryProblem, filesystemName } from "../host/filesystem.js";
import type { HostRoots } from "../host/kernelFile.js";
import { readMeminfoReading } from "../host/meminfo.js";
import { readHostPsi } from "../host/psi.js";
import { findOnPath } from "../util/findOnPath.js";
import { readVmstat, swapCounters } from "../host/vmstat.js";
import { recordDirs, stateDirError } from "../cgroup/stateFiles.js";
import { makeDirs } from "../util/makeDirs.js";
import type { ConfigReading, DoctorFacts, WritesReading } from "./checks.js";

export interface GatherOptions {
  roots: HostRoots;
  parent: ParentSpec;
  redisUrl: string | undefined;
  hogDir: string;
  hogBytes: number;
  stateDir: string;
  /** The directories `up` makes under the state dir for its drill (`<name>`, its `runs`): none for doctor, which has no drill. */
  drillDirs?: string[];
  env?: NodeJS.ProcessEnv;
}

/** All of doctor's I/O: reads, one probe cgroup created and removed, one Redis round trip. */
export async function gatherFacts(options: GatherOptions): Promise<DoctorFacts> {
  const { roots } = options;
  const layoutReading = detectLayout(roots);
  const layout = layoutReading.ok ? layoutReading.value : null;

  const meminfo = readMeminfoReading(roots);
  const facts: DoctorFacts = {
    euid: typeof process.geteuid === "function" ? process.geteuid() : null,
    layout: layout?.kind ?? "none",
    memoryWritable: { ok: false, where: layoutReading.ok ? "" : layoutReading.file, error: layoutReading.ok ? undefined : layoutReading.reason },
    swapControl: { file: null, present: false },
    hostSwapTotalBytes: meminfo.ok ? meminfo.value.swapTotalBytes : null,
    hostSwapUnknown: !meminfo.ok ? `${meminfo.file}: ${meminfo.reason}` : meminfo.value.swapTotalBytes === null ? `no SwapTotal line in ${roots.proc("meminfo")}` : undefined,
    hostPsi: psiFact(roots),
    drillsUp: findRunningDrills(roots).map((r) => `${r.drill} (run ${r.runId}${r.stateDir === null ? "" : `, --state-dir ${r.stateDir}`})`),
    cgroupPsi: { file: null, present: false },
    vmstatSwapIn: vmstatFact(roots),
    cgroupKill: { file: null, present: false, freezer: false },
    redis: options.redisUrl ? await redisFact(options.redisUrl) : { given: false },
    redisServerPath: findOnPath("redis-server", (options.env ?? process.env).PATH ?? ""),
    timeoutPath: findOnPath("timeout", (options.env ?? process.env).PATH ?? ""),
    hogDir: { dir: options.hogDir, ...hogDirFact(options.hogDir), neededBytes: options.hogBytes },
    stateDir: stateDirFact(options.stateDir, options.drillDirs ?? []),
  };

  if (layout) {
    let probe: WorkerCgroup | null = null;
    try {
      probe = doctorProbe(roots, layout, options.parent);
    } catch (err) {
      facts.memoryWritable = { ok: false, where: String(options.parent.kind === "self" ? "self" : options.parent.path), error: (err as Error).message };
    }
    if (probe) {
      requireParentDirs(probe, options.parent);
      probeCgroup(probe, facts);
    }
  }
  return facts;
}

/**
 * The probe, where setup would put the worker cgroup and its twin:
 * `drill-doctor-<pid>`, and on hybrid the twin of `doctor-<pid>`
 * (`drill-doctor-<pid>-<hash>`): the twin of the probe's own name would say
 * drill twice (`drill-drill-doctor-…`).
 */
function doctorProbe(roots: HostRoots, layout: CgroupLayout, parent: ParentSpec): WorkerCgroup {
  const probe = resolveWorkerCgroup(roots, layout, `drill-doctor-${process.pid}`, parent);
  if (!probe.memory || !probe.unified) return probe; // v2, legacy v1: no twin
  const twin = twinName(`doctor-${process.pid}`, probe.memory.cgroupPath);
  const unified = { ...probe.unified, cgroupPath: path.posix.join(path.posix.dirname(probe.unified.cgroupPath), twin), dir: path.join(path.dirname(probe.unified.dir), twin) };
  return assembleWorkerCgroup(probe.name, probe.layout, probe.memory, unified);
}

/** Creates the probe cgroup in every hierarchy, notes which files it got, removes it. */
function probeCgroup(probe: WorkerCgroup, facts: DoctorFacts): void {
  const created: string[] = [];
  facts.memoryWritable.where = path.dirname(probe.limits.dir);
  try {
    for (const dir of probe.dirs) {
      makeCgroupDir(dir.dir);
      created.push(dir.dir);
    }
    facts.memoryWritable = { ok: true, where: path.dirname(probe.limits.dir) };
    const swapFile = probe.limits.version === 2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes";
    const swapPath = path.join(probe.limits.dir, swapFile);
    // On v2 the child only gets memory.* once the parent enables +memory (setup does).
    const swapPresent = existsSync(swapPath) || (probe.limits.version === 2 && existsSync(path.join(path.dirname(probe.limits.dir), swapFile)));
    facts.swapControl = { file: swapPath, present: swapPresent };
    facts.cgroupPsi = { file: probe.pressureFile, present: probe.pressureFile !== null && existsSync(probe.pressureFile) };
    facts.cgroupKill = {
      file: probe.killFile,
      present: probe.killFile !== null && existsSync(probe.killFile),
      // Only the v2 freezer: teardown never uses a v1 freezer hierarchy.
      freezer: probe.unified !== null && existsSync(path.join(probe.unified.dir, "cgroup.freeze")),
    };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "";
    facts.memoryWritable = {
      ok: false,
      where: path.dirname(probe.limits.dir),
      error: code === "EACCES" || code === "EPERM" || code === "EROFS" ? `${code}: run as root` : (err as Error).message,
    };
  } finally {
    for (const dir of created.reverse()) {
      try {
        rmdirSync(dir);
      } catch {
        // An empty probe cgroup always goes; if it did not, doctor's own row says where.
      }
    }
  }
}

function psiFact(roots: HostRoots): DoctorFacts["hostPsi"] {
  const psi = readHostPsi(roots, "memory");
  const file = roots.proc("pressure", "memory");
  // readKernelText's "missing" is ENOENT: a parse failure's reason is never that bare word.
  return psi.ok ? { ok: true, file, avg10: psi.value.some.avg10 } : { ok: false, file, reason: psi.reason, absent: psi.reason === "missing" };
}

function vmstatFact(roots: HostRoots): DoctorFacts["vmstatSwapIn"] {
  const vmstat = readVmstat(roots);
  const file = roots.proc("vmstat");
  if (!vmstat.ok) return { ok: false, file, reason: vmstat.reason };
  return swapCounters(vmstat.value).pswpin === null ? { ok: false, file, reason: "no pswpin counter" } : { ok: true, file };
}

async function redisFact(url: string): Promise<DoctorFacts["redis"]> {
  const redis = openRedis(url, { lazyConnect: true, connectTimeout: 1500, commandTimeout: 1500, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  // connect() rejects with "Connection is closed."; the reason (ECONNREFUSED, ENOTFOUND, TLS, auth) came as an error event first.
  let cause: Error | null = null;
  redis.on("error", (err: Error) => (cause ??= err));
  try {
    await redis.connect();
    await redis.ping();
    const [policy, aof, maxmemory, writes] = await Promise.all([configGet(redis, "maxmemory-policy"), configGet(redis, "appendonly"), configGet(redis, "maxmemory"), writesFact(redis)]);
    return { given: true, url, reachable: true, maxmemoryPolicy: policy, appendonly: aof, maxmemory, writes };
  } catch (err) {
    const refused = databaseRefusal(redis);
    // Dropped before it was ready (maxclients): what the server said as it accepted, with its fix.
    const said = refused ? null : await connectionRefusal(redis);
    if (said) return { given: true, url, reachable: false, error: refusalText(said) };
    const reason = refused ?? cause ?? (err as Error);
    return { given: true, url, reachable: false, error: notRedisReply(reason) ?? reason.message, ...(refused ? { databaseRefused: true } : {}) };
  } finally {
    redis.disconnect();
  }
}

/** INFO's role and used_memory: what tells a server that refuses every write (a replica, a full one). */
async function writesFact(redis: Redis): Promise<WritesReading> {
  try {
    const info = `${await redis.info("replication")}\n${await redis.info("memory")}`;
    const field = (name: string) => new RegExp(`^${name}:(\\S+)`, "m").exec(info)?.[1] ?? null;
    const used = field("used_memory");
    return { ok: true, role: field("role") ?? "unknown", usedMemory: used !== null && /^\d+$/.test(used) ? Number(used) : null };
  } catch (err) {
    return { ok: false, reason: (err as Error).message };
  }
}

/** A refused CONFIG GET is said as such (QA: a NOPERM read as "not noeviction"), never as a value. */
async function configGet(redis: Redis, key: string): Promise<ConfigReading> {
  try {
    const reply = (await redis.config("GET", key)) as string[];
    const value = reply[1];
    return value === undefined ? { ok: false, reason: `CONFIG GET ${key} returned nothing` } : { ok: true, value };
  } catch (err) {
    return { ok: false, reason: `${(err as Error).message} (CONFIG refused to this user, or renamed on a managed Redis)` };
  }
}


function filesystemOf(dir: string): { fsType: string | null; freeBytes: number | null; error?: string } {
  try {
    const stats = statfsSync(dir);
    return { fsType: filesystemName(stats.type), freeBytes: stats.bavail * stats.bsize };
  } catch (err) {
    return { fsType: null, freeBytes: null, error: (err as NodeJS.ErrnoException).code ?? (err as Error).message };
  }
}

/** The hog's dir as inject and worker check it (statfs alone passes a regular file), then its filesystem. */
function hogDirFact(dir: string): { fsType: string | null; freeBytes: number | null; error?: string } {
  const problem = directoryProblem(dir);
  if (problem) return { fsType: null, freeBytes: null, error: problem };
  const fs = filesystemOf(dir);
  return fs.error ? { ...fs, error: `cannot stat ${dir}: ${fs.error}` } : fs;
}

/** The state dir as up will use it: its filesystem and room, a probe file written there, and what stands where drill makes its directories. */
function stateDirFact(stateDir: string, drillDirs: string[]): DoctorFacts["stateDir"] {
  const notDirectories = [...recordDirs(stateDir), ...drillDirs].flatMap((dir) => {
    try {
      const found = statSync(dir, { throwIfNoEntry: false });
      return found === undefined || found.isDirectory() ? [] : [{ dir, problem: "not a directory" }];
    } catch (err) {
      return [{ dir, problem: (err as NodeJS.ErrnoException).code ?? (err as Error).message }];
    }
  });
  const writeError = probeWrite(stateDir);
  return { dir: stateDir, ...filesystemOf(nearestExisting(stateDir)), ...symlinkedTo(stateDir), ...(writeError === null ? {} : { writeError }), notDirectories };
}

/**
 * Writes a few bytes to a probe file in the state dir and removes it, making
 * the dir first as up would (and removing what it made): a read-only mount,
 * a full disk (a file with no bytes is made even there) or a dir root may not
 * write is said as up would meet it. Null when it wrote.
 */
function probeWrite(stateDir: string): string | null {
  const probe = path.join(stateDir, `.drill-doctor-${process.pid}`);
  let made: string | undefined;
  try {
    made = makeDirs(stateDir);
    writeFileSync(probe, "drill doctor's probe, removed at once\n", { mode: 0o600 });
    rmSync(probe);
    return null;
  } catch (err) {
    try {
      rmSync(probe, { force: true }); // made, then a write refused (ENOSPC)
    } catch {
      // never made
    }
    return stateDirError("write a probe file", probe, err).message;
  } finally {
    // The dirs the probe made, deepest first, up to the first one: nothing of doctor's stays.
    for (let at = path.resolve(stateDir); made !== undefined; at = path.dirname(at)) {
      try {
        rmdirSync(at);
      } catch {
        break; // not empty: someone else's meanwhile
      }
      if (at === made) break;
    }
  }
}

/** Where `dir` leads through symlinks, when elsewhere (QA: a state dir linked into /tmp passed as surviving a reboot). */
function symlinkedTo(dir: string): { realDir?: string } {
  const resolved = path.resolve(dir);
  const near = nearestExisting(resolved);
  try {
    const real = path.join(realpathSync(near), path.relative(near, resolved));
    return real === resolved ? {} : { realDir: real };
  } catch {
    return {}; // unreadable on the way: the fsType read says so
  }
}

/** The state dir may not exist yet: judge the filesystem it will be created on. */
function nearestExisting(dir: string): string {
  let current = path.resolve(dir);
  while (!existsSync(current) && path.dirname(current) !== current) current = path.dirname(current);
  return current;
}

