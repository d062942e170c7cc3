import { existsSync, readdirSync, readlinkSync, renameSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { resolveWorkerCgroup, type WorkerCgroup } from "../../src/cgroup/paths.js";
import { requireLayout } from "../../src/cgroup/layout.js";
import { readCgroupRaw } from "../../src/sampler/read.js";
import { CGROUP_ABSENT_REASON } from "../../src/sampler/step.js";
import { cgroupDirsLeft, forceCleanup, makeFakeHost, realCgroupSkipReason, realWorkerCgroup, tempStateDir, v2MemoryFiles } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

const skip = realCgroupSkipReason();
if (skip) console.warn(`skipping the sampler's held kernel files on a real cgroup: ${skip}`);

/** This process's open fds that point into `dir`. */
function fdsInto(dir: string): string[] {
  const targets: string[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) targets.push(target);
    } catch {
      // closed meanwhile (readdir's own fd)
    }
  }
  return targets;
}

const MiB = 1024 * 1024;

/**
 * The sampler keeps kernel files open between samples (one pread each instead
 * of open, read, read, close): each sample must still see the kernel's value
 * of that moment, a removed or renamed cgroup must read as absent, and one
 * made again under the same name must be read afresh, not through the old
 * files.
 */
describe.skipIf(skip !== null)("sampler: kernel files held open between samples (real cgroup)", () => {
  const name = `held${process.pid}`;
  const stateDir = tempStateDir();
  let cgroup: WorkerCgroup;
  let renamed: string | null = null;
  afterAll(async () => {
    if (renamed && existsSync(renamed)) rmdirSync(renamed); // empty: nothing ever ran in it
    if (cgroup) await forceCleanup(cgroup, stateDir);
    rmSync(stateDir, { recursive: true, force: true });
    if (cgroup) expect(cgroupDirsLeft(cgroup)).toEqual([]);
  });
  const setup = async (memoryMax: string) => {
    const r = await runDrill(["--state-dir", stateDir, "cgroup", "setup", "--parent", "self", "--name", name, "--memory-max", memoryMax]);
    expect(r.exitCode, r.stderr).toBe(0);
  };

  it("reads the value of the moment, reads a removed or renamed cgroup as absent, and a remade one afresh", async () => {
    cgroup = realWorkerCgroup(name);
    await setup("64M");
    const limits = cgroup.limits.dir;
    expect(maxOf(readCgroupRaw(cgroup))).toBe(64 * MiB);
    // Held: the next sample opens nothing.
    expect(fdsInto(limits).length, "no kernel file of the cgroup held open").toBeGreaterThan(0);

    // The limit moved in place: the held file reads the new one (pread from offset 0, not a cached text).
    const limitFile = path.join(limits, cgroup.limits.version === 2 ? "memory.max" : "memory.limit_in_bytes");
    writeFileSync(limitFile, String(48 * MiB)); // down: v1 refuses a limit above memsw
    expect(maxOf(readCgroupRaw(cgroup))).toBe(48 * MiB);

    const teardown = await runDrill(["--state-dir", stateDir, "cgroup", "teardown", "--parent", "self", "--name", name]);
    expect(teardown.exitCode, teardown.stderr).toBe(0);
    const gone = readCgroupRaw(cgroup);
    expect(gone.ok ? "read" : gone.reason).toBe(CGROUP_ABSENT_REASON);
    expect(fdsInto(limits), "files of a removed cgroup still held").toEqual([]);

    // Made again under the same name: its own limit, through new files.
    await setup("96M");
    expect(maxOf(readCgroupRaw(cgroup))).toBe(96 * MiB);

    // Renamed away (its held files stay readable, no ENODEV): absent, not its old figures; then a new one.
    renamed = `${limits}-old`;
    renameSync(limits, renamed);
    const away = readCgroupRaw(cgroup);
    expect(away.ok ? `read, max ${String(maxOf(away))}` : away.reason).toBe(CGROUP_ABSENT_REASON);
    expect(fdsInto(renamed), "files of the renamed cgroup still held").toEqual([]);
    await setup("80M");
    expect(maxOf(readCgroupRaw(cgroup))).toBe(80 * MiB);
  });
});

describe("sampler: files of a fake tree are opened every sample", () => {
  it("a fake file deleted between samples reads as missing, not as its old text", () => {
    const host = makeFakeHost("v2");
    try {
      host.cgroup("", "/process_api/abc/infer", v2MemoryFiles({ "memory.max": `${64 * MiB}\n` }));
      const cgroup = resolveWorkerCgroup(host.roots, requireLayout(host.roots), "infer", { kind: "self" });
      expect(maxOf(readCgroupRaw(cgroup))).toBe(64 * MiB);
      expect(fdsInto(host.root), "a fake tree's file held open").toEqual([]);
      rmSync(path.join(cgroup.limits.dir, "memory.max"));
      const after = readCgroupRaw(cgroup);
      expect(after.ok && !after.value.max.ok ? after.value.max.reason : after).toBe("missing");
    } finally {
      host.cleanup();
    }
  });
});

function maxOf(raw: ReturnType<typeof readCgroupRaw>): unknown {
  return raw.ok && raw.value.max.ok ? raw.value.max.value : raw;
}
