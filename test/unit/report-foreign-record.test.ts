import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { statePath } from "../../src/drill/state.js";
import { DrillError, ExitCode } from "../../src/errors.js";
import { gatherReport } from "../../src/report/gather.js";
import { writeFakeDrill } from "../helpers/fakeState.js";

/**
 * A state.json drill did not write (other users can write it): the report
 * refuses it, as every command does, with the exit code of bad input (2,
 * DESIGN.md), not rollback's 4, "rollback incomplete": a report only reads.
 */
describe("report on a state dir record drill did not write", () => {
  let stateDir: string;
  beforeEach(() => {
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-report-foreign-"));
    writeFakeDrill(stateDir, "forged", "fq", "redis://127.0.0.1:1");
    chmodSync(statePath(stateDir, "forged"), 0o666);
  });
  afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

  /** The error gatherReport rejects with; null: it did not. */
  const refusal = (redisUrl?: string, name?: string): Promise<DrillError | null> =>
    gatherReport({ stateDir, name, queue: redisUrl === undefined ? undefined : "fq", redisUrl, sinceMs: 600_000 }).then(() => null, (err: unknown) => err as DrillError);

  it.each([
    ["--name", undefined, "forged"],
    ["the only drill there", undefined, undefined],
    ["--redis --queue (which drill ran there)", "redis://127.0.0.1:1", undefined],
  ])("%s: exit 2, naming the file and why", async (_what, redisUrl, name) => {
    const err = (await refusal(redisUrl, name))!;
    expect(err).toBeInstanceOf(DrillError);
    expect(err.message).toContain(`${statePath(stateDir, "forged")} is not a record drill wrote: other users can write it (mode 0666)`);
    expect(err.exitCode).toBe(ExitCode.usage);
  });
});
