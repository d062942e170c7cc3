import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { refusedSummary } from "../../src/commands/up.run.js";
import { RefusedError } from "../../src/errors.js";

describe("up --json refused document", () => {
  const root = mkdtempSync(path.join(tmpdir(), "drill-refused-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  // QA: a refusal before the first write (the queue already holds keys) named <state-dir>/<drill>/state.json, which did not exist.
  it("state is null when the refusal came before any state file", () => {
    expect(refusedSummary("fresh", root, new RefusedError("queue jobs on redis://x already holds keys"))).toEqual({
      name: "fresh",
      verdict: "refused",
      reason: "queue jobs on redis://x already holds keys",
      run_id: null,
      state: null,
    });
  });

  it("state names the state file there is (the drill that is up)", () => {
    mkdirSync(path.join(root, "upnow"), { recursive: true });
    writeFileSync(path.join(root, "upnow", "state.json"), "{}");
    expect(refusedSummary("upnow", root, new RefusedError("drill upnow is already up")).state).toBe(path.join(root, "upnow", "state.json"));
  });
});
