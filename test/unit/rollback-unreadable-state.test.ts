import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { rollbackDrill } from "../../src/drill/rollback.js";
import { listDrills } from "../../src/drill/state.js";
import { HostRoots } from "../../src/host/kernelFile.js";

/**
 * QA AB 4: a drill whose state.json cannot be read was left out of the drill
 * list ("no drill", the default Redis) or stopped rollback with exit 1 and no
 * document. Root reads every file mode, so the unreadable ones here are a
 * symlink loop (ELOOP, where a non-root run gets EACCES) and a torn file.
 */
describe("a drill whose state.json cannot be read", () => {
  let stateDir = "";
  beforeEach(() => {
    stateDir = mkdtempSync(path.join(os.tmpdir(), "drill-unreadable-state-"));
  });
  afterEach(() => rmSync(stateDir, { recursive: true, force: true }));

  const loop = (dir: string) => {
    mkdirSync(path.join(stateDir, dir));
    symlinkSync(path.join(stateDir, dir, "state.json"), path.join(stateDir, dir, "state.json"));
  };

  it("is listed as a drill; a dir with no state.json and drill's own record dirs are not", () => {
    loop("looped");
    loop("cgroups");
    mkdirSync(path.join(stateDir, "empty"));
    expect(listDrills(stateDir)).toEqual(["looped"]);
  });

  it.each([
    // A symlink is no record drill wrote (readOwnRecord opens with O_NOFOLLOW): refused as such, not read.
    ["a symlink loop", "looped", /^\S+\/looped\/state\.json is not a record drill wrote: it is a symbolic link/],
    ["a torn file", "torn", /^\S+\/torn\/state\.json is not a drill state file/],
  ])("%s: rollback lists it with its failed step, left, nothing rolled back", async (_label, name, problem) => {
    if (name === "looped") loop(name);
    else {
      mkdirSync(path.join(stateDir, name));
      writeFileSync(path.join(stateDir, name, "state.json"), '{"version":1,"na');
    }
    const logged: string[] = [];
    const outcome = await rollbackDrill(name, { roots: new HostRoots(), stateDir, log: (s) => logged.push(s.step) });
    expect(outcome.kind).toBe("unreadable");
    if (outcome.kind !== "unreadable") return;
    expect(outcome.result).toMatchObject({ name, runId: null, drainLength: null, exported: null });
    expect(outcome.result.steps).toHaveLength(1);
    expect(outcome.result.steps[0]!).toMatchObject({ step: "read state", ok: false });
    expect(outcome.result.steps[0]!.detail).toMatch(problem);
    expect(outcome.result.left).toEqual([`not rolled back: ${outcome.result.steps[0]!.detail}`]);
    expect(logged).toEqual(["read state"]);
  });
});
