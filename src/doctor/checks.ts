import path from "node:path";
import { FREE_MARGIN_BYTES, isKernelFilesystem, isMemoryFilesystem } from "../host/filesystem.js";
import { formatBytes } from "../units.js";
import { DEFAULT_STATE_DIR, redactUrl } from "../context.js";

/**
 * Doctor's decisions, pure: facts gathered from the host in, one row per check
 * out. "fail" means the drill cannot run safely here (exit 3); "warn" means it
 * can, with a caveat the operator should read.
 */
export type CheckStatus = "pass" | "warn" | "fail";

export interface Check {
  name: string;
  status: CheckStatus;
  value: string | number | boolean | null;
  detail: string;
}

/** One CONFIG GET: its value, or why it did not read (NOPERM for this user, CONFIG renamed on a managed Redis). */
export type ConfigReading = { ok: true; value: string } | { ok: false; reason: string };

/** INFO's role (master, slave) and used_memory (bytes), or why INFO did not read. */
export type WritesReading = { ok: true; role: string; usedMemory: number | null } | { ok: false; reason: string };

export type CgroupLayoutName = "v2" | "hybrid" | "v1" | "none";

export interface DoctorFacts {
  euid: number | null;
  layout: CgroupLayoutName;
  /** mkdir+rmdir of a probe cgroup where the drill's cgroup would go. */
  memoryWritable: { ok: boolean; where: string; error?: string };
  /** The probe cgroup had the file that disables swap (v2 memory.swap.max, v1 memory.memsw.limit_in_bytes). */
  swapControl: { file: string | null; present: boolean };
  hostSwapTotalBytes: number | null;
  /** Why hostSwapTotalBytes is null (meminfo unreadable, or no SwapTotal line): said where doctor would say the host has swap. */
  hostSwapUnknown?: string;
  /** absent: the file is not there (ENOENT), as on a kernel without PSI; otherwise it is there and does not read. */
  hostPsi: { ok: boolean; file: string; reason?: string; avg10?: number; absent?: boolean };
  /** Drills up on this host (their processes carry DRILL_RUN_ID), each `name (run R, --state-dir D)`: a pressure they may cause is named. */
  drillsUp?: string[];
  cgroupPsi: { file: string | null; present: boolean };
  vmstatSwapIn: { ok: boolean; file: string; reason?: string };
  /** freezer: the probe's cgroup2 dir (v2, or the hybrid twin) has cgroup.freeze, which teardown uses without cgroup.kill. */
  cgroupKill: { file: string | null; present: boolean; freezer: boolean };
  redis:
    | { given: false }
    | {
        given: true;
        url: string;
        reachable: boolean;
        error?: string;
        /** The server answered but has no database of the URL's index: a bad URL (exit 2), not an unsafe host. */
        databaseRefused?: boolean;
        maxmemoryPolicy?: ConfigReading;
        appendonly?: ConfigReading;
        /** Bytes as Redis says them; "0" is no limit. */
        maxmemory?: ConfigReading;
        /** From INFO: a replica or a full server refuses every write drill makes (QA R re-check 7). */
        writes?: WritesReading;
      };
  redisServerPath: string | null;
  /** coreutils `timeout`, which the embedded redis-server runs under (it exits by itself after the drill). Absent in older fixtures: not judged. */
  timeoutPath?: string | null;
  /** error: why the dir cannot take the files, naming it (directoryProblem). */
  hogDir: { dir: string; fsType: string | null; freeBytes: number | null; error?: string; neededBytes: number };
  /**
   * realDir: where dir leads through a symlink, when elsewhere. freeBytes: on
   * its filesystem. writeError: why a probe file could not be written and
   * removed there. notDirectories: what stands where drill makes a directory
   * under it (a file named `served`). The last three are absent when not probed.
   */
  stateDir: {
    dir: string;
    fsType: string | null;
    error?: string;
    realDir?: string;
    freeBytes?: number | null;
    writeError?: string;
    notDirectories?: Array<{ dir: string; problem: string }>;
  };
}

/**
 * Below this free in the state dir, doctor warns: a run's embedded-Redis AOF,
 * its logs and sidecar recording and the rollback's drain export go there,
 * and a write that finds the disk full stops the drill (or leaves the drain
 * unexported) half-way.
 */
export const STATE_DIR_MIN_FREE_BYTES = 64 * 1024 * 1024;


export function evaluateChecks(f: DoctorFacts): Check[] {
  const checks: Check[] = [];
  const add = (name: string, status: CheckStatus, value: Check["value"], detail: string) =>
    checks.push({ name, status, value, detail });

  add("root", f.euid === 0 ? "pass" : "fail", f.euid, f.euid === 0 ? "running as root" : "cgroup files need root: run as root on the scratch host");

  add(
    "cgroup layout",
    f.layout === "none" ? "fail" : "pass",
    f.layout,
    {
      v2: "cgroup v2 (unified): memory.max, memory.swap.max, memory.pressure, cgroup.kill",
      hybrid: "hybrid: memory controller on v1, PSI and cgroup.kill from a twin in the cgroup2 (unified) hierarchy",
      v1: "legacy v1: memory controller only; no per-cgroup PSI, no cgroup.kill",
      none: "no memory controller mounted under the sysfs root: cannot put a limit around the worker",
    }[f.layout],
  );

  add(
    "memory controller writable",
    f.memoryWritable.ok ? "pass" : "fail",
    f.memoryWritable.where,
    f.memoryWritable.ok ? "created and removed a probe cgroup" : `cannot create a cgroup there: ${f.memoryWritable.error ?? "unknown"}`,
  );

  // The probe cgroup is removed before this prints: its file by name, not by a path that is gone (QA).
  // A file the probe did not have is named as absent (QA: "cgroup.kill (probe cgroup, removed)" beside "no cgroup.kill").
  const probed = (fact: { file: string | null; present: boolean }): string | null =>
    fact.file === null ? null : `${fact.present ? "" : "no "}${path.basename(fact.file)} (probe cgroup, removed)`;
  // Without the probe cgroup (not writable, or its place not resolved) its files were never looked at.
  const notProbed = f.memoryWritable.ok ? null : `not checked: the probe cgroup could not be made (${f.memoryWritable.error ?? "unknown"})`;
  const noHostSwap = f.hostSwapTotalBytes === 0;
  if (notProbed) add("swap disabled in cgroup", "warn", null, notProbed);
  else add(
    "swap disabled in cgroup",
    f.swapControl.present ? "pass" : noHostSwap ? "pass" : f.layout === "v1" || f.layout === "hybrid" ? "warn" : "fail",
    probed(f.swapControl),
    f.swapControl.present
      ? f.layout === "v2"
        ? "memory.swap.max can be set to 0"
        : "memory.memsw.limit_in_bytes = limit disables swap (plus swappiness=0); v1 swap-off is best effort"
      : noHostSwap
        ? "no swap control file, but the host has no swap at all"
        : f.hostSwapUnknown
          ? `no swap control, and whether the host has swap is unknown (${f.hostSwapUnknown}): the worker may swap, the failure quiet instead of loud`
          : "no swap control: the worker can swap, the failure will be quiet instead of loud",
  );

  const busyHost = f.hostPsi.ok && (f.hostPsi.avg10 ?? 0) >= 1;
  add(
    "host PSI",
    f.hostPsi.ok ? (busyHost ? "warn" : "pass") : "fail",
    f.hostPsi.ok ? (f.hostPsi.avg10 ?? null) : null,
    f.hostPsi.ok
      ? busyHost
        ? `${f.hostPsi.file}: some avg10 is already ≥ 1.00 before the drill: neighbours will confound its numbers, and gate mode admit will refuse${
            // QA S 8: the neighbour was often a drill already up here (its hog), unnamed.
            f.drillsUp?.length ? `; drill ${f.drillsUp.join(", ")} is up on this host, its hog and worker among them` : ""
          }`
        : `${f.hostPsi.file} readable (some avg10 shown)`
      : f.hostPsi.absent
        ? `${f.hostPsi.file}: ${f.hostPsi.reason ?? "missing"}; the gate would reject every job (psi=missing). Boot with psi=1 (CONFIG_PSI)`
        : `${f.hostPsi.file} is there but unreadable or garbled: ${f.hostPsi.reason ?? "unreadable"}; the gate would reject every job (psi=missing)`,
  );

  if (notProbed) add("cgroup PSI", "warn", null, notProbed);
  else add(
    "cgroup PSI",
    f.cgroupPsi.present ? "pass" : "warn",
    probed(f.cgroupPsi),
    f.cgroupPsi.present
      ? "the worker cgroup gets its own memory.pressure"
      : "no per-cgroup memory.pressure: the gate and watch fall back to host PSI only",
  );

  add(
    "swap-in counters",
    f.vmstatSwapIn.ok ? "pass" : "warn",
    f.vmstatSwapIn.file,
    f.vmstatSwapIn.ok ? "pswpin readable on the same interval as PSI (host-wide)" : `${f.vmstatSwapIn.reason ?? "unreadable"}: si will be null`,
  );

  if (notProbed) add("cgroup.kill", "warn", null, notProbed);
  else add(
    "cgroup.kill",
    f.cgroupKill.present ? "pass" : "warn",
    probed(f.cgroupKill),
    // What teardown does (killUntilEmpty) in each case.
    f.cgroupKill.present
      ? "rollback kills the whole cgroup in one write"
      : f.cgroupKill.freezer
        ? "no cgroup.kill (kernel < 5.14): rollback freezes the cgroup (cgroup.freeze), SIGKILLs each pid in cgroup.procs while it is frozen, thaws it, and repeats until the cgroup is empty"
        : "no cgroup.kill and no cgroup.freeze: rollback SIGKILLs each pid in cgroup.procs, re-reading until the cgroup is empty (a hog forking faster than that can outlast the timeout)",
  );

  if (f.redis.given) {
    const r = f.redis;
    // Doctor's table goes into tickets and chat: a password in the URL stays out of it.
    const url = redactUrl(r.url);
    add("redis reachable", r.reachable ? "pass" : "fail", url, r.reachable ? "PING answered" : `cannot reach ${url}: ${r.error ?? "no answer"}`);
    if (r.reachable) {
      // A setting CONFIG GET could not read is said so, never judged as some other value (QA: NOPERM read as "not noeviction").
      const unread = (reading: ConfigReading | undefined) => `could not read: ${reading && !reading.ok ? reading.reason : "no answer"}`;
      const policy = r.maxmemoryPolicy?.ok ? r.maxmemoryPolicy.value : null;
      const limitBytes = r.maxmemory?.ok ? Number(r.maxmemory.value) : 0;
      if (policy === null) add("redis maxmemory-policy", "warn", null, unread(r.maxmemoryPolicy));
      else add(
        "redis maxmemory-policy",
        policy === "noeviction" ? "pass" : "warn",
        policy,
        policy !== "noeviction"
          ? "anything but noeviction can evict queued jobs under memory pressure"
          : limitBytes > 0
            ? `jobs are never evicted; at maxmemory ${formatBytes(limitBytes)} a full Redis refuses writes (pushes, decisions) until memory is freed`
            : "jobs are never evicted",
      );
      // Said only when it refuses, or may soon: a server that takes writes needs no row.
      const writes = r.writes;
      if (writes && !writes.ok) add("redis takes writes", "warn", null, `could not read INFO: ${writes.reason}`);
      else if (writes?.role === "slave") add("redis takes writes", "fail", "replica", "a read-only replica refuses every push, decision and the rollback's drain: point --redis at its primary");
      else if (writes && policy === "noeviction" && limitBytes > 0 && writes.usedMemory !== null && writes.usedMemory >= 0.9 * limitBytes) {
        const full = writes.usedMemory >= limitBytes;
        add(
          "redis takes writes",
          full ? "fail" : "warn",
          `${formatBytes(writes.usedMemory)} of ${formatBytes(limitBytes)}`,
          full ? "full: used_memory is at its maxmemory, so it refuses every write (pushes, decisions, the rollback's drain): raise maxmemory or free memory" : "nearly full: at its maxmemory it refuses every write (pushes, decisions, the rollback's drain)",
        );
      }
      const aof = r.appendonly?.ok ? r.appendonly.value : null;
      if (aof === null) add("redis appendonly", "warn", null, unread(r.appendonly));
      else add(
        "redis appendonly",
        aof === "yes" ? "pass" : "warn",
        aof,
        aof === "yes" ? "AOF on: a killed server keeps its jobs" : `appendonly ${aof}: a SIGKILLed server loses every job since its last snapshot`,
      );
    }
  } else {
    add(
      "redis",
      "pass",
      null,
      "no --redis given: `drill up` starts an embedded redis-server (AOF, appendfsync always) in the state dir",
    );
  }

  add(
    "redis-server on PATH",
    f.redisServerPath ? "pass" : f.redis.given ? "warn" : "fail",
    f.redisServerPath,
    f.redisServerPath ? "used for the embedded Redis" : "not found: install redis-server, or give --redis <url>",
  );
  // QA: without it up started the cgroup, then failed at the embedded Redis's start, leaving a rollback to do.
  if (f.timeoutPath !== undefined) add(
    "timeout on PATH",
    f.timeoutPath ? "pass" : f.redis.given ? "warn" : "fail",
    f.timeoutPath,
    f.timeoutPath
      ? "the embedded Redis runs under coreutils timeout, so it exits by itself after the drill"
      : "coreutils timeout not found: the embedded Redis runs under it (it exits by itself after the drill); put coreutils on PATH, or give --redis <url>",
  );

  const hog = f.hogDir;
  if (hog.error || hog.fsType === null) {
    // inject and worker would refuse it (exit 2) at their start, mid-drill.
    add("hog file system", "fail", hog.dir, `${hog.error ?? `cannot stat ${hog.dir}`}: give --file-dir an existing directory on a disk filesystem`);
  } else if (isKernelFilesystem(hog.fsType)) {
    add("hog file system", "fail", `${hog.dir} (${hog.fsType})`, "a kernel filesystem, where no file can be made (under cgroupfs a directory is a cgroup): use --file-dir on a disk filesystem such as /var/tmp");
  } else if (isMemoryFilesystem(hog.fsType)) {
    add("hog file system", "fail", `${hog.dir} (${hog.fsType})`, "tmpfs pages are shmem, not reclaimable without swap: thrash becomes an OOM. Use --file-dir on a disk filesystem");
  } else {
    // The margin inject and worker keep (checkFileDir): short of it they refuse at their start, mid-drill.
    const enough = hog.freeBytes === null || hog.freeBytes >= hog.neededBytes + FREE_MARGIN_BYTES;
    add(
      "hog file system",
      enough ? "pass" : "fail",
      `${hog.dir} (${hog.fsType}, ${hog.freeBytes === null ? "?" : formatBytes(hog.freeBytes)} free)`,
      enough
        ? "disk filesystem: file pages can be reclaimed and refaulted"
        : `needs ${formatBytes(hog.neededBytes)} for the hog and weights files plus ${formatBytes(FREE_MARGIN_BYTES)} to spare: inject and worker would refuse to start; use --file-dir on a larger disk, or a smaller --size`,
    );
  }

  const state = f.stateDir;
  const onTmpfs = state.fsType !== null && isMemoryFilesystem(state.fsType);
  // QA: a state dir under /tmp passed as "survives a reboot"; systemd-tmpfiles' `D /tmp` empties it at boot.
  const underTmp = isUnderTmp(state.realDir ?? state.dir);
  const where = state.realDir === undefined ? state.dir : `${state.dir} -> ${state.realDir}`;
  add(
    "state dir",
    state.error || onTmpfs || underTmp ? "warn" : "pass",
    state.fsType ? `${where} (${state.fsType})` : where,
    state.error
      ? `${state.error}; drill up will create it`
      : onTmpfs
        ? "on tmpfs: a reboot loses the state file and the drain export"
        : underTmp
          ? `under /tmp, which hosts commonly empty at boot (FHS; systemd-tmpfiles \`D /tmp\`): a reboot can lose the state file and the drain export; --state-dir ${DEFAULT_STATE_DIR} keeps them`
          : "survives a reboot",
  );
  checks.push(...stateDirUseChecks(state));

  return checks;
}

/**
 * Whether drill can write where it keeps its state, as up will: a probe file
 * written and removed, and no file where it makes a directory (QA: a file
 * named `served` let up start everything, then its worker died writing its
 * record); and the room left there. Rows only for what was probed.
 */
export function stateDirUseChecks(state: DoctorFacts["stateDir"]): Check[] {
  const checks: Check[] = [];
  const blocked = (state.notDirectories ?? []).map(({ dir, problem }) =>
    problem === "not a directory" ? `${dir} is not a directory, and drill keeps its records there: move it aside` : `cannot look at ${dir}: ${problem}`,
  );
  const problems = [...(state.writeError === undefined ? [] : [state.writeError]), ...blocked];
  if (state.writeError !== undefined || state.notDirectories !== undefined) {
    checks.push({
      name: "state dir writable",
      status: problems.length > 0 ? "fail" : "pass",
      value: state.dir,
      detail: problems.length > 0 ? problems.join("; ") : "wrote and removed a probe file",
    });
  }
  if (typeof state.freeBytes === "number") {
    const short = state.freeBytes < STATE_DIR_MIN_FREE_BYTES;
    checks.push({
      name: "state dir free space",
      status: short ? "warn" : "pass",
      value: `${formatBytes(state.freeBytes)} free`,
      detail: short
        ? `under ${formatBytes(STATE_DIR_MIN_FREE_BYTES)}: the run's embedded-Redis AOF, logs and sidecar recording and the rollback's drain export may not fit, and a full disk stops the drill half-way; free some, or give --state-dir a directory on another disk`
        : `at least ${formatBytes(STATE_DIR_MIN_FREE_BYTES)} for the run's files and the drain export`,
    });
  }
  return checks;
}

/** /tmp or below: the FHS lets a boot empty it, whatever the filesystem. */
export function isUnderTmp(dir: string): boolean {
  const resolved = path.resolve(dir);
  return resolved === "/tmp" || resolved.startsWith("/tmp/");
}

export interface ServingVerdict {
  refuse: boolean;
  reasons: Array<{ rule: string; holds: boolean | null; why: string }>;
}

/**
 * The seed's "refuse the free-host bet" list, for SERVING on this host class.
 * Informational: it never blocks the drill, whose working set is above
 * memory.max by design.
 */
export function servingVerdict(f: DoctorFacts): ServingVerdict {
  const psiAndSi = f.hostPsi.ok && f.vmstatSwapIn.ok;
  const reasons = [
    { rule: "The job has a user-facing first-token deadline", holds: null, why: "a property of your workload: if yes, refuse" },
    { rule: "The prompt working set can exceed memory.max", holds: true, why: "packed long contexts can always outgrow a fixed limit; the drill proves the gate" },
    {
      rule: "You cannot disable swap inside the worker cgroup",
      holds: f.hostSwapTotalBytes === 0 || f.swapControl.present ? false : f.memoryWritable.ok ? true : null,
      why: f.swapControl.present
        ? // Seen in the probe cgroup doctor made and removed: its name, not its gone path (QA).
          `${f.swapControl.file === null ? "swap control" : path.basename(f.swapControl.file)} is available (seen in doctor's probe cgroup, removed since)`
        : f.hostSwapTotalBytes === 0
          ? "host has no swap"
          : f.memoryWritable.ok
            ? `no swap control file${f.hostSwapUnknown ? `; host swap unknown (${f.hostSwapUnknown})` : ""}`
            : "not checked: the probe cgroup could not be made",
    },
    { rule: "Retries reenter the same packed process", holds: false, why: "drill nacks to jobs:retry:<host_class>, never back to the same queue" },
    { rule: "You lack PSI and si on the same scrape interval", holds: !psiAndSi, why: psiAndSi ? "both readable" : "host PSI or /proc/vmstat unreadable" },
  ];
  return { refuse: reasons.some((r) => r.holds === true), reasons };
}

