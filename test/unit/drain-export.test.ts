import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it, vi } from "vitest";
import { exportKeys } from "../../src/drill/drain.js";
import { queueKeys } from "../../src/queue/keys.js";

// What the file system looked like when the export's directory was fsynced.
const seen = vi.hoisted(() => ({ exportFile: "", synced: [] as Array<{ dir: string; exportThere: boolean; partialThere: boolean }> }));
vi.mock("../../src/util/fsyncDir.js", () => ({
  fsyncDir: (dir: string) => seen.synced.push({ dir, exportThere: existsSync(seen.exportFile), partialThere: existsSync(`${seen.exportFile}.partial`) }),
}));

const dir = mkdtempSync(path.join(tmpdir(), "drill-drain-export-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A Redis with no keys: enough for the export's file handling. */
const emptyRedis = { scan: () => Promise.resolve(["0", []]), type: () => Promise.resolve("none") } as unknown as Redis;

describe("exportKeys", () => {
  it("fsyncs the directory once the export is linked into place and the partial unlinked: the name outlives the Redis rollback stops next", async () => {
    seen.exportFile = path.join(dir, "jobs.export.jsonl");
    expect(await exportKeys(emptyRedis, queueKeys("jobs"), seen.exportFile)).toEqual({ keys: 0, file: seen.exportFile });
    expect(seen.synced).toEqual([{ dir, exportThere: true, partialThere: false }]);
  });
});
