import { chmodSync, chownSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runDir, upEndedPath, writeUpEnded, type DrillEnded } from "../../src/drill/state.js";
import { makeDirs } from "../../src/util/makeDirs.js";
import { runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

/**
 * runs/<id>/up-ended.json: what up had packed when a rollback stopped it, read
 * by the report only. QA: a forged or garbled one was ignored without a word.
 * Now it is named, with why it is not taken, and its counts are n/a; the
 * report still runs (exit 0): two counts are missing, not the run.
 */

const isRoot = process.getuid?.() === 0;
const ENDED: DrillEnded = { verdict: "interrupted", at: new Date(Date.now() - 30_000).toISOString(), reason: "a rollback took it over", pushed: 7, notPacked: 2 };

interface ReportJson {
  notes: string[];
  drill: { ended: { verdict: string; pushed: number | null; not_packed: number | null; packed_unknown: string | null } | null } | null;
}

describe("report and up's end record (up-ended.json)", () => {
  let server: RedisServer;
  let stateDir: string;
  beforeAll(async () => {
    server = await startRedisServer();
    stateDir = mkdtempSync(path.join(tmpdir(), "drill-up-ended-"));
  });
  afterAll(async () => {
    await server.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** A drill a rollback took over and completed before up recorded an end; `plant` puts its run dir's up-ended.json. */
  async function report(name: string, plant: (runDirPath: string) => void) {
    const state = writeFakeDrill(stateDir, name, `${name}q`, server.url, { phase: "complete", rollback: { at: new Date(Date.now() - 20_000).toISOString(), left: [] } });
    const dir = runDir(stateDir, name, state.runId);
    makeDirs(dir);
    plant(dir);
    const r = await runDrill(["--state-dir", stateDir, "--json", "report", "--name", name]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as ReportJson;
    const notes = doc.notes.filter((n) => n.includes("up-ended.json"));
    return { ended: doc.drill?.ended ?? null, notes, file: upEndedPath(dir) };
  }

  it("drill's own: its counts, no note", async () => {
    const { ended, notes } = await report("own", (dir) => writeUpEnded(dir, ENDED));
    expect(ended).toMatchObject({ verdict: "rolled_back", pushed: 7, not_packed: 2 });
    expect(notes).toEqual([]);
  });

  it("none (up did not write one): counts n/a, no note", async () => {
    const { ended, notes } = await report("none", () => {});
    expect(ended).toMatchObject({ verdict: "rolled_back", pushed: null, not_packed: null });
    expect(notes).toEqual([]);
  });

  const forged: Array<[string, (dir: string) => void, RegExp, boolean]> = [
    [
      "a symbolic link",
      (dir) => {
        writeFileSync(path.join(dir, "elsewhere.json"), JSON.stringify(ENDED), { mode: 0o600 });
        symlinkSync(path.join(dir, "elsewhere.json"), upEndedPath(dir));
      },
      /is not a record drill wrote: it is a symbolic link/,
      false,
    ],
    [
      "another user's file",
      (dir) => {
        writeUpEnded(dir, ENDED);
        chownSync(upEndedPath(dir), 65534, 65534);
      },
      /is not a record drill wrote: it is owned by uid 65534/,
      !isRoot,
    ],
    [
      "in a dir other users can write",
      (dir) => {
        writeUpEnded(dir, ENDED);
        chmodSync(dir, 0o777);
      },
      /is not a record drill wrote: other users can write its dir .* \(mode 0777\)/,
      false,
    ],
    ["not JSON", (dir) => writeFileSync(upEndedPath(dir), "{\"verdict\": \"ran\", ", { mode: 0o600 }), /is not up's end record \(not JSON: .*\); move it aside/, false],
    ["JSON, not an end record", (dir) => writeFileSync(upEndedPath(dir), "[1,2]", { mode: 0o600 }), /is not up's end record \(not a JSON object\)/, false],
    // QA AE: parseable, with verdict and at, its counts printed as they stood ("all lots-3 jobs packed").
    ["counts that are not counts", (dir) => writeFileSync(upEndedPath(dir), JSON.stringify({ ...ENDED, pushed: "lots", notPacked: -3 }), { mode: 0o600 }), /is not up's end record \(`pushed` is "lots", not a count; `notPacked` is -3, not a count\)/, false],
    ["ids that are not ids", (dir) => writeFileSync(upEndedPath(dir), JSON.stringify({ ...ENDED, pushedIds: "x" }), { mode: 0o600 }), /is not up's end record \(`pushedIds` is "x", not a list of ids\)/, false],
  ];
  for (const [what, plant, why, skip] of forged) {
    it.skipIf(skip)(`${what}: named with why, not taken (counts n/a), exit 0`, async () => {
      const name = what.replace(/[^a-z]+/gi, "-").replace(/-$/, "");
      const { ended, notes, file } = await report(name, plant);
      // Said n/a in the ended: line too, pointing at the note (QA: dropped there without a word).
      expect(ended).toMatchObject({ verdict: "rolled_back", pushed: null, not_packed: null, packed_unknown: "its end record was not taken: see notes" });
      expect(notes).toHaveLength(1);
      expect(notes[0]).toContain(`pushed and not packed at the run's end are n/a: ${file}`);
      expect(notes[0]).toMatch(why);
    });
  }
  if (!isRoot) console.warn("skipping the other user's up-ended.json: chown needs root (not root)");
});
