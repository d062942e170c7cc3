import { describe, expect, it } from "vitest";
import { evaluateChecks, servingVerdict, type DoctorFacts } from "../../src/doctor/checks.js";
import { drillVerdict } from "../../src/doctor/render.js";

const healthy: DoctorFacts = {
  euid: 0,
  layout: "hybrid",
  memoryWritable: { ok: true, where: "/sys/fs/cgroup/memory" },
  swapControl: { file: "/sys/fs/cgroup/memory/x/memory.memsw.limit_in_bytes", present: true },
  hostSwapTotalBytes: 0,
  hostPsi: { ok: true, file: "/proc/pressure/memory", avg10: 0.1 },
  cgroupPsi: { file: "/sys/fs/cgroup/unified/x/memory.pressure", present: true },
  vmstatSwapIn: { ok: true, file: "/proc/vmstat" },
  cgroupKill: { file: "/sys/fs/cgroup/unified/x/cgroup.kill", present: true, freezer: true },
  redis: { given: false },
  redisServerPath: "/usr/bin/redis-server",
  hogDir: { dir: "/var/tmp", fsType: "ext4", freeBytes: 80 * 1024 ** 3, neededBytes: 3 * 1024 ** 3 },
  stateDir: { dir: "/var/lib/drill", fsType: "ext4" },
};

const status = (facts: DoctorFacts, name: string) => evaluateChecks(facts).find((c) => c.name === name)?.status;

describe("doctor checks", () => {
  it("a healthy hybrid host is ready", () => {
    const checks = evaluateChecks(healthy);
    expect(checks.every((c) => c.status === "pass")).toBe(true);
    expect(drillVerdict(checks)).toBe("ready");
  });

  it.each<[string, Partial<DoctorFacts>, string, "warn" | "fail"]>([
    ["not root", { euid: 1000 }, "root", "fail"],
    ["no memory controller", { layout: "none" }, "cgroup layout", "fail"],
    ["cgroup not writable", { memoryWritable: { ok: false, where: "/sys/fs/cgroup/memory", error: "EROFS" } }, "memory controller writable", "fail"],
    ["host PSI unreadable", { hostPsi: { ok: false, file: "/proc/pressure/memory", reason: "missing" } }, "host PSI", "fail"],
    ["host already under pressure", { hostPsi: { ok: true, file: "/proc/pressure/memory", avg10: 4.2 } }, "host PSI", "warn"],
    ["no cgroup PSI (legacy v1)", { cgroupPsi: { file: null, present: false } }, "cgroup PSI", "warn"],
    ["no cgroup.kill", { cgroupKill: { file: null, present: false, freezer: true } }, "cgroup.kill", "warn"],
    ["hog dir on tmpfs", { hogDir: { dir: "/tmp", fsType: "tmpfs", freeBytes: 1e12, neededBytes: 1 } }, "hog file system", "fail"],
    ["hog dir on procfs", { hogDir: { dir: "/proc", fsType: "proc", freeBytes: 0, neededBytes: 1 } }, "hog file system", "fail"],
    ["hog dir too small", { hogDir: { dir: "/var/tmp", fsType: "ext4", freeBytes: 1024, neededBytes: 1e9 } }, "hog file system", "fail"],
    // inject and worker keep 64 MiB to spare beyond their files (checkFileDir): room for the files alone is not enough.
    ["hog dir without the margin", { hogDir: { dir: "/var/tmp", fsType: "ext4", freeBytes: 1e9 + 1024, neededBytes: 1e9 } }, "hog file system", "fail"],
    ["state dir on tmpfs", { stateDir: { dir: "/run/drill", fsType: "tmpfs" } }, "state dir", "warn"],
    // QA: "survives a reboot" for /tmp/x on ext4, where systemd-tmpfiles' `D /tmp` empties it at boot.
    ["state dir under /tmp on a disk", { stateDir: { dir: "/tmp/drill-state", fsType: "ext4" } }, "state dir", "warn"],
    ["no redis-server and no --redis", { redisServerPath: null }, "redis-server on PATH", "fail"],
    ["swap on, no swap control", { swapControl: { file: null, present: false }, hostSwapTotalBytes: 1e9, layout: "v2" }, "swap disabled in cgroup", "fail"],
    ["v1 memsw missing with swap on", { swapControl: { file: null, present: false }, hostSwapTotalBytes: 1e9, layout: "v1" }, "swap disabled in cgroup", "warn"],
  ])("%s", (_name, patch, check, expected) => {
    const facts = { ...healthy, ...patch };
    expect(status(facts, check)).toBe(expected);
    expect(drillVerdict(evaluateChecks(facts))).toBe(expected === "fail" ? "refused" : "ready_with_warnings");
  });

  // QA S 8: a second drill's doctor blamed "neighbours" for the pressure of the drill already up beside it.
  it("host PSI already high names the drills up on this host; none up, no such words", () => {
    const busy = { ...healthy, hostPsi: { ok: true, file: "/proc/pressure/memory", avg10: 4.2 } };
    const row = (facts: DoctorFacts) => evaluateChecks(facts).find((c) => c.name === "host PSI")?.detail;
    expect(row({ ...busy, drillsUp: ["smoke (run smoke-1, --state-dir /var/lib/drill)"] })).toBe(
      "/proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill: neighbours will confound its numbers, and gate mode admit will refuse; drill smoke (run smoke-1, --state-dir /var/lib/drill) is up on this host, its hog and worker among them",
    );
    expect(row({ ...busy, drillsUp: [] })).not.toContain("is up on this host");
  });

  it("the state dir under /tmp says why it warns and what keeps the state; /var/tmp and /tmpfoo are not /tmp", () => {
    const row = evaluateChecks({ ...healthy, stateDir: { dir: "/tmp/../tmp/qa", fsType: "ext4" } }).find((c) => c.name === "state dir");
    expect(row?.detail).toBe("under /tmp, which hosts commonly empty at boot (FHS; systemd-tmpfiles `D /tmp`): a reboot can lose the state file and the drain export; --state-dir /var/lib/drill keeps them");
    for (const dir of ["/var/tmp/drill", "/tmpfoo/drill"]) expect(status({ ...healthy, stateDir: { dir, fsType: "ext4" } }, "state dir")).toBe("pass");
  });

  // QA: /var/lib/drill linked into /tmp passed as "survives a reboot".
  it("a state dir that leads into /tmp through a symlink warns as /tmp does, and its value names both paths", () => {
    const row = evaluateChecks({ ...healthy, stateDir: { dir: "/var/lib/drill", fsType: "ext4", realDir: "/tmp/drill-state" } }).find((c) => c.name === "state dir");
    expect(row).toMatchObject({ status: "warn", value: "/var/lib/drill -> /tmp/drill-state (ext4)" });
    expect(row?.detail).toMatch(/^under \/tmp, which hosts commonly empty at boot/);
    expect(status({ ...healthy, stateDir: { dir: "/tmp/x", fsType: "ext4", realDir: "/srv/drill" } }, "state dir")).toBe("pass");
  });

  it("a probe cgroup never made: its rows say not checked (not a pass from 'no host swap'), and the serving swap rule is unknown", () => {
    const facts: DoctorFacts = { ...healthy, memoryWritable: { ok: false, where: "self", error: "EACCES: run as root" }, swapControl: { file: null, present: false }, cgroupPsi: { file: null, present: false }, cgroupKill: { file: null, present: false, freezer: false }, hostSwapTotalBytes: 1e9 };
    for (const name of ["swap disabled in cgroup", "cgroup PSI", "cgroup.kill"]) {
      expect(evaluateChecks(facts).find((c) => c.name === name)).toEqual({ name, status: "warn", value: null, detail: "not checked: the probe cgroup could not be made (EACCES: run as root)" });
    }
    expect(servingVerdict(facts).reasons.find((r) => r.rule.startsWith("You cannot disable swap"))).toMatchObject({ holds: null });
  });

  it("host swap unknown (meminfo unreadable): the swap row and the serving rule name the file, not 'the worker can swap'", () => {
    const facts: DoctorFacts = { ...healthy, swapControl: { file: null, present: false }, hostSwapTotalBytes: null, hostSwapUnknown: "/proc/meminfo: EACCES", layout: "v2" };
    expect(evaluateChecks(facts).find((c) => c.name === "swap disabled in cgroup")).toMatchObject({
      status: "fail",
      detail: "no swap control, and whether the host has swap is unknown (/proc/meminfo: EACCES): the worker may swap, the failure quiet instead of loud",
    });
    expect(servingVerdict(facts).reasons.find((r) => r.rule.startsWith("You cannot disable swap"))?.why).toBe("no swap control file; host swap unknown (/proc/meminfo: EACCES)");
  });

  it("room for the files and the 64 MiB margin passes", () => {
    expect(status({ ...healthy, hogDir: { dir: "/var/tmp", fsType: "ext4", freeBytes: 1e9 + 64 * 1024 * 1024, neededBytes: 1e9 } }, "hog file system")).toBe("pass");
  });

  it("without cgroup.kill but with cgroup.freeze the detail says what teardown does: freeze, SIGKILL by pid, thaw", () => {
    const row = evaluateChecks({ ...healthy, cgroupKill: { file: null, present: false, freezer: true } }).find((c) => c.name === "cgroup.kill");
    expect(row?.status).toBe("warn");
    expect(row?.detail).toMatch(/freezes the cgroup.*SIGKILLs each pid.*while it is frozen, thaws it/);
  });

  it("with neither cgroup.kill nor cgroup.freeze the detail says SIGKILL by pid until empty, no freezing", () => {
    const row = evaluateChecks({ ...healthy, cgroupKill: { file: null, present: false, freezer: false } }).find((c) => c.name === "cgroup.kill");
    expect(row?.status).toBe("warn");
    expect(row?.detail).toMatch(/no cgroup.kill and no cgroup.freeze: rollback SIGKILLs each pid.*until the cgroup is empty/);
    expect(row?.detail).not.toMatch(/freezes|thaw/);
  });

  it("with cgroup.kill the detail is the one write, freezer or not", () => {
    for (const freezer of [true, false]) {
      const row = evaluateChecks({ ...healthy, cgroupKill: { ...healthy.cgroupKill, freezer } }).find((c) => c.name === "cgroup.kill");
      expect(row).toMatchObject({ status: "pass", detail: "rollback kills the whole cgroup in one write" });
    }
  });

  it("warns on a given Redis that can lose jobs, fails on one that is unreachable", () => {
    const lossy: DoctorFacts = { ...healthy, redis: { given: true, url: "redis://127.0.0.1:6379", reachable: true, maxmemoryPolicy: { ok: true, value: "allkeys-lru" }, appendonly: { ok: true, value: "no" } } };
    expect(status(lossy, "redis maxmemory-policy")).toBe("warn");
    expect(status(lossy, "redis appendonly")).toBe("warn");
    const down: DoctorFacts = { ...healthy, redis: { given: true, url: "redis://127.0.0.1:1", reachable: false, error: "ECONNREFUSED" } };
    expect(status(down, "redis reachable")).toBe("fail");
    // A password in the URL stays out of the table (it goes into tickets and chat).
    const secret: DoctorFacts = { ...healthy, redis: { given: true, url: "redis://:hunter2@127.0.0.1:1", reachable: false, error: "ECONNREFUSED" } };
    const row = evaluateChecks(secret).find((c) => c.name === "redis reachable")!;
    expect(JSON.stringify(row)).not.toContain("hunter2");
    expect(row).toMatchObject({ value: "redis://:***@127.0.0.1:1", detail: "cannot reach redis://:***@127.0.0.1:1: ECONNREFUSED" });
    // with a Redis given, the embedded server is optional
    expect(status({ ...lossy, redisServerPath: null }, "redis-server on PATH")).toBe("warn");
  });

  it("a Redis setting CONFIG GET could not read is said so, not judged as another value (QA: NOPERM read as evicting)", () => {
    const reason = "NOPERM User qaR has no permissions to run the 'config|get' command (CONFIG refused to this user, or renamed on a managed Redis)";
    const refused: DoctorFacts = {
      ...healthy,
      redis: { given: true, url: "redis://127.0.0.1:6379", reachable: true, maxmemoryPolicy: { ok: false, reason }, appendonly: { ok: false, reason }, maxmemory: { ok: false, reason } },
    };
    const rows = evaluateChecks(refused);
    for (const name of ["redis maxmemory-policy", "redis appendonly"]) {
      const row = rows.find((c) => c.name === name)!;
      expect(row).toMatchObject({ status: "warn", value: null, detail: `could not read: ${reason}` });
      expect(row.detail).not.toMatch(/anything but noeviction|appendonly no/);
    }
  });

  it("noeviction under a maxmemory says a full Redis refuses writes; without one, only that jobs are never evicted", () => {
    const redis = (maxmemory: string): DoctorFacts["redis"] => ({
      given: true,
      url: "redis://127.0.0.1:6379",
      reachable: true,
      maxmemoryPolicy: { ok: true, value: "noeviction" },
      appendonly: { ok: true, value: "yes" },
      maxmemory: { ok: true, value: maxmemory },
    });
    const policyRow = (maxmemory: string) => evaluateChecks({ ...healthy, redis: redis(maxmemory) }).find((c) => c.name === "redis maxmemory-policy");
    expect(policyRow(String(2 * 1024 ** 3))).toMatchObject({
      status: "pass",
      value: "noeviction",
      detail: "jobs are never evicted; at maxmemory 2.0GiB a full Redis refuses writes (pushes, decisions) until memory is freed",
    });
    expect(policyRow("0")).toMatchObject({ status: "pass", detail: "jobs are never evicted" });
  });

  it("the serving verdict is informational and follows the seed's list", () => {
    const v = servingVerdict(healthy);
    expect(v.reasons).toHaveLength(5);
    expect(v.reasons.find((r) => r.rule.startsWith("You lack PSI"))?.holds).toBe(false);
    // QA: the table's values named the probe cgroup's files, paths doctor had removed before printing them.
    const rows = evaluateChecks(healthy);
    expect(rows.find((c) => c.name === "swap disabled in cgroup")?.value).toBe("memory.memsw.limit_in_bytes (probe cgroup, removed)");
    expect(rows.find((c) => c.name === "cgroup PSI")?.value).toBe("memory.pressure (probe cgroup, removed)");
    expect(rows.find((c) => c.name === "cgroup.kill")?.value).toBe("cgroup.kill (probe cgroup, removed)");
    // QA: a file the probe did not have was named as if it had it.
    const bare = evaluateChecks({ ...healthy, layout: "v1", hostSwapTotalBytes: 1e9, swapControl: { file: "/x/memory.memsw.limit_in_bytes", present: false }, cgroupKill: { file: "/x/cgroup.kill", present: false, freezer: false } });
    expect(bare.find((c) => c.name === "swap disabled in cgroup")?.value).toBe("no memory.memsw.limit_in_bytes (probe cgroup, removed)");
    expect(bare.find((c) => c.name === "cgroup.kill")?.value).toBe("no cgroup.kill (probe cgroup, removed)");
    // QA: it named the probe cgroup's file, a path doctor had removed before printing it.
    expect(v.reasons.find((r) => r.rule.startsWith("You cannot disable swap"))?.why).toBe("memory.memsw.limit_in_bytes is available (seen in doctor's probe cgroup, removed since)");
    const blind = servingVerdict({ ...healthy, vmstatSwapIn: { ok: false, file: "/proc/vmstat", reason: "missing" } });
    expect(blind.reasons.find((r) => r.rule.startsWith("You lack PSI"))?.holds).toBe(true);
    expect(blind.refuse).toBe(true);
  });
});

// QA AB 7: doctor passed a read-only state dir, a full one, a file named `served` in it, and a PATH
// without coreutils timeout; up then failed on each, some after starting Redis, the cgroup and the children.
describe("doctor's checks of what up needs to write and run", () => {
  const row = (facts: DoctorFacts, name: string) => evaluateChecks(facts).find((c) => c.name === name);
  const probed = (patch: Partial<DoctorFacts["stateDir"]>): DoctorFacts => ({ ...healthy, stateDir: { ...healthy.stateDir, notDirectories: [], ...patch } });

  it("a state dir that took the probe file passes; one that refused it fails naming the write and what to do", () => {
    expect(row(probed({}), "state dir writable")).toEqual({ name: "state dir writable", status: "pass", value: "/var/lib/drill", detail: "wrote and removed a probe file" });
    const refused = "cannot write a probe file /var/lib/drill/.drill-doctor-7: EROFS (a read-only filesystem: give --state-dir a writable directory)";
    expect(row(probed({ writeError: refused }), "state dir writable")).toMatchObject({ status: "fail", detail: refused });
    expect(drillVerdict(evaluateChecks(probed({ writeError: refused })))).toBe("refused");
  });

  it("a file where drill makes one of its directories fails, each named, beside a refused write", () => {
    const facts = probed({ writeError: "cannot write a probe file x: ENOSPC", notDirectories: [{ dir: "/var/lib/drill/served", problem: "not a directory" }, { dir: "/var/lib/drill/hogs", problem: "ELOOP" }] });
    expect(row(facts, "state dir writable")).toMatchObject({
      status: "fail",
      detail: "cannot write a probe file x: ENOSPC; /var/lib/drill/served is not a directory, and drill keeps its records there: move it aside; cannot look at /var/lib/drill/hogs: ELOOP",
    });
  });

  it("under 64 MiB free in the state dir warns, saying the threshold; 64 MiB passes; not read, no row", () => {
    expect(row(probed({ freeBytes: 1024 * 1024 }), "state dir free space")).toMatchObject({ status: "warn", value: "1.0MiB free", detail: expect.stringMatching(/^under 64\.0MiB: the run's embedded-Redis AOF/) });
    expect(row(probed({ freeBytes: 64 * 1024 * 1024 }), "state dir free space")?.status).toBe("pass");
    expect(row(probed({ freeBytes: null }), "state dir free space")).toBeUndefined();
    expect(drillVerdict(evaluateChecks(probed({ freeBytes: 0 })))).toBe("ready_with_warnings");
  });

  it("no coreutils timeout on PATH fails without --redis (the embedded Redis runs under it), warns with one", () => {
    expect(row({ ...healthy, timeoutPath: "/usr/bin/timeout" }, "timeout on PATH")?.status).toBe("pass");
    expect(row({ ...healthy, timeoutPath: null }, "timeout on PATH")).toMatchObject({ status: "fail", detail: expect.stringMatching(/^coreutils timeout not found: .*put coreutils on PATH, or give --redis <url>$/) });
    const given: DoctorFacts["redis"] = { given: true, url: "redis://127.0.0.1:1", reachable: true, maxmemoryPolicy: { ok: true, value: "noeviction" }, appendonly: { ok: true, value: "yes" } };
    expect(row({ ...healthy, redis: given, timeoutPath: null }, "timeout on PATH")?.status).toBe("warn");
  });
});
