import { describe, expect, it } from "vitest";
import { cgroupFromEnv, resolveWorkerFlags, weightsDirOf, type RawWorkerFlags } from "../../src/commands/worker.js";
import { UsageError } from "../../src/errors.js";

const defaults: RawWorkerFlags = {
  queue: "jobs",
  name: "infer",
  weights: "1G",
  kvBytesPerToken: "4096",
  decodeTokensPerS: "30",
  prefillTokensPerPass: "2048",
  concurrency: "8",
};

describe("drill worker flags", () => {
  it("defaults: the seed's worker", () => {
    expect(resolveWorkerFlags(defaults, false, null)).toEqual({
      queue: "jobs",
      workerId: null,
      config: { weightsBytes: 1024 ** 3, kvBytesPerToken: 4096, decodeTokensPerS: 30, prefillTokensPerPass: 2048, concurrency: 8 },
      weightsDir: "/var/tmp",
      maxJobs: null,
      idleExitMs: null,
      durationMs: null,
      json: false,
    });
  });

  it("sizes, durations and ids", () => {
    const o = resolveWorkerFlags({ ...defaults, weights: "64M", kvBytesPerToken: "1K", workerId: "w-1", maxJobs: "3", idleExit: "2s", duration: "10m", decodeTokensPerS: "0" }, true, null);
    expect(o).toMatchObject({ workerId: "w-1", maxJobs: 3, idleExitMs: 2000, durationMs: 600_000, json: true });
    expect(o.config).toMatchObject({ weightsBytes: 64 << 20, kvBytesPerToken: 1024, decodeTokensPerS: 0 });
  });

  it.each([
    [{ weights: "lots" }, /--weights/],
    [{ weights: "100" }, /--weights: "100" is less than one page/],
    [{ concurrency: "0" }, /--concurrency/],
    [{ prefillTokensPerPass: "0" }, /--prefill-tokens-per-pass/],
    [{ decodeTokensPerS: "-1" }, /--decode-tokens-per-s/],
    [{ maxJobs: "0" }, /--max-jobs/],
    [{ duration: "5" }, /--duration/],
    [{ idleExit: "soon" }, /--idle-exit/],
    [{ workerId: "a:b" }, /--worker-id/],
    [{ weights: "100T" }, /--weights: "100T" is more than the page toucher can map/],
    [{ queue: "jobs*" }, /--queue/],
  ] as Array<[Partial<RawWorkerFlags>, RegExp]>)("%o is a usage error naming the flag", (override, message) => {
    expect(() => resolveWorkerFlags({ ...defaults, ...override }, false, null)).toThrow(UsageError);
    expect(() => resolveWorkerFlags({ ...defaults, ...override }, false, null)).toThrow(message);
  });

  // QA: inject, doctor and up call this directory --file-dir; the worker's --weights-dir stays as its older name.
  it.each([
    [{}, "/var/tmp", "--file-dir"],
    [{ fileDir: "/srv/a" }, "/srv/a", "--file-dir"],
    [{ weightsDir: "/srv/b" }, "/srv/b", "--weights-dir"],
    [{ fileDir: "/srv/a", weightsDir: "/srv/a" }, "/srv/a", "--file-dir"],
    // One directory written two ways (QA): not two.
    [{ fileDir: "/srv/a", weightsDir: "/srv/a/" }, "/srv/a", "--file-dir"],
    [{ fileDir: "/srv/a", weightsDir: "/srv/../srv/a" }, "/srv/a", "--file-dir"],
  ] as Array<[Partial<RawWorkerFlags>, string, string]>)("%o: the weights file goes in %s, checked as %s", (given, dir, flag) => {
    expect(resolveWorkerFlags({ ...defaults, ...given }, false, null).weightsDir).toBe(dir);
    expect(weightsDirOf(given)).toEqual({ dir, flag });
  });

  it("--file-dir and --weights-dir naming two directories is a usage error naming both", () => {
    const both = { ...defaults, fileDir: "/srv/a", weightsDir: "/srv/b" };
    expect(() => resolveWorkerFlags(both, false, null)).toThrow(UsageError);
    expect(() => resolveWorkerFlags(both, false, null)).toThrow('--file-dir "/srv/a" and --weights-dir "/srv/b" are the same option (--weights-dir is its older name): give one');
  });

  // The bound a drill file's worker.weights gets (mapSizeProblem): one bound, one place.
  it("--weights beyond this host's RAM + swap is a usage error naming both; within it is fine", () => {
    const host = 4 * 1024 ** 3;
    expect(() => resolveWorkerFlags({ ...defaults, weights: "8G" }, false, host)).toThrow(/--weights: "8G" is more than this host's RAM \+ swap \(4(\.0)?GiB\)/);
    expect(resolveWorkerFlags({ ...defaults, weights: "2G" }, false, host).config.weightsBytes).toBe(2 * 1024 ** 3);
  });

  it("the cgroup handed down by the launcher: absent, valid, or refused", () => {
    expect(cgroupFromEnv(undefined)).toBeNull();
    const dir = { version: 1, mount: "/sys/fs/cgroup/memory", cgroupPath: "/x/infer", dir: "/sys/fs/cgroup/memory/x/infer" };
    const cg = { name: "infer", layout: "v1", memory: dir, unified: null, limits: dir, procsFiles: [`${dir.dir}/cgroup.procs`], pressureFile: null, killFile: null, dirs: [dir] };
    expect(cgroupFromEnv(JSON.stringify(cg))).toEqual(cg);
    expect(() => cgroupFromEnv("{")).toThrow(/not JSON/);
    expect(() => cgroupFromEnv(JSON.stringify({ name: "infer" }))).toThrow(/does not describe/);
  });
});
