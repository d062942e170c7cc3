import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { exportKeys } from "../../src/drill/drain.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { queueKeys } from "../../src/queue/keys.js";
import { removeStaleWeightsFiles } from "../../src/worker/weightsFile.js";
import { WeightsToucher } from "../../src/native/pagetoucher.js";
import { immutableSkipReason } from "../helpers/cgroupFixtures.js";

const skip = process.getuid?.() !== 0 ? "chattr +i needs root (not root)" : immutableSkipReason();
if (skip) console.warn(`skipping files that cannot be unlinked: ${skip}`);

/**
 * QA: single files removed with rmSync(force), which on a file it may not
 * unlink (its dir immutable: EPERM) falls back to rmdir and throws ENOTDIR in
 * place of saying what stays: a worker's start (a gone worker's weights file)
 * and a failed export's `.partial`. A real immutable dir (chattr +i).
 */
describe.skipIf(skip !== null)("a file that cannot be unlinked is named with why, not ENOTDIR", () => {
  let dir: string;
  afterEach(() => {
    spawnSync("chattr", ["-i", dir]);
    rmSync(dir, { recursive: true, force: true });
  });

  it("removeStaleWeightsFiles: a gone worker's file it cannot unlink is returned as left, with why; the others removed", () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-weights-imm-"));
    // Owners above pid_max: gone.
    const stale = path.join(dir, "drill-weights-w1-4194305-1.bin");
    writeFileSync(stale, "x");
    expect(spawnSync("chattr", ["+i", dir]).status).toBe(0);
    const result = removeStaleWeightsFiles(new HostRoots(), dir, "w1");
    expect(result).toEqual({ removed: [], left: [{ file: stale, why: expect.stringMatching(/^EPERM/) as unknown as string }] });
    spawnSync("chattr", ["-i", dir]);
    expect(removeStaleWeightsFiles(new HostRoots(), dir, "w1")).toEqual({ removed: [stale], left: [] });
    expect(existsSync(stale)).toBe(false);
  });

  it("exportKeys: a failed export whose .partial cannot be unlinked throws what failed, naming the partial left", async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-export-imm-"));
    const file = path.join(dir, "final-1.jsonl");
    // The Redis goes away mid-export, and meanwhile the dir turned immutable.
    const redis = {
      scan: () => Promise.resolve(["0", []]),
      type: () => {
        spawnSync("chattr", ["+i", dir]);
        return Promise.reject(new Error("Connection is closed."));
      },
    } as unknown as Redis;
    const err = await exportKeys(redis, queueKeys("q"), file).then(() => null, (e: unknown) => e as Error);
    expect(err?.message).toBe(`Connection is closed.; its partial file ${file}.partial is left: EPERM (operation not permitted: an immutable file or dir, chattr -i; or a security policy)`);
    expect(existsSync(`${file}.partial`)).toBe(true);
  });

  it("WeightsToucher.close: a weights file it cannot unlink rejects naming it with why (the worker says so), not ENOTDIR", async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "drill-serve-imm-"));
    const file = path.join(dir, "drill-weights-w1-1-1.bin");
    const toucher = await WeightsToucher.start({ file, sizeBytes: 1024 * 1024, seed: 1 });
    expect(spawnSync("chattr", ["+i", dir]).status).toBe(0);
    await expect(toucher.close()).rejects.toThrow(`${file}: EPERM (operation not permitted`);
    expect(existsSync(file)).toBe(true);
  });
});
