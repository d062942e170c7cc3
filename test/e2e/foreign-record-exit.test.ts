import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statePath } from "../../src/drill/state.js";
import { forgedMarkerCgroup, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

/**
 * A record in the state dir drill did not write (a cgroup marker other users
 * can write, a state.json that is a symlink) is bad input, exit 2 (DESIGN.md),
 * to every command that refuses it before acting on its word: cgroup setup,
 * inject, worker, up, gate, pack (QA: the first four exited 4, "rollback
 * incomplete", with nothing to roll back). Only the commands that undo
 * (rollback, cgroup teardown) keep 4: what the record stands for is left.
 */
describe("a state dir record drill did not write: 2 unless the command undoes", () => {
  let host: FakeHost;
  let marker: string;
  let markerText: string;
  let stateDir: string;
  let forgedState: string;
  beforeAll(() => {
    host = makeFakeHost("hybrid");
    marker = forgedMarkerCgroup(host, "forged");
    markerText = readFileSync(marker, "utf8");
    // A second state dir whose smoke/state.json is a symlink (drill writes none).
    stateDir = path.join(host.root, "state-link");
    forgedState = statePath(stateDir, "smoke");
    mkdirSync(path.dirname(forgedState), { recursive: true, mode: 0o700 });
    writeFileSync(path.join(host.root, "elsewhere.json"), "{}");
    symlinkSync(path.join(host.root, "elsewhere.json"), forgedState);
  });
  afterAll(() => host.cleanup());

  const run = (dir: string, args: string[]) => runDrill(["--sysfs", host.sysfs, "--procfs", host.procfs, "--state-dir", dir, ...args]);
  const markerSaid = () => `${marker} is not a record drill wrote: other users can write it (mode 0666)`;
  const stateSaid = () => `${forgedState} is not a record drill wrote: it is a symbolic link (drill writes none)`;
  const cgroupFlags = ["--parent", "self", "--name", "forged"];

  it.each([
    ["cgroup setup", ["cgroup", "setup", ...cgroupFlags, "--memory-max", "64M"]],
    ["inject", ["inject", ...cgroupFlags, "--size", "1M", "--hold", "1s"]],
    ["worker", ["--redis", "redis://127.0.0.1:1", "worker", ...cgroupFlags, "--max-jobs", "1", "--idle-exit", "1s"]],
  ])("%s on a forged cgroup marker: exit 2, naming the file, nothing made (it was 4)", async (_name, args) => {
    const r = await run(host.stateDir, args);
    expect(r.stderr).toContain(markerSaid());
    expect(r.exitCode, r.stderr).toBe(2);
    expect(readFileSync(marker, "utf8")).toBe(markerText);
    expect(existsSync(path.join(host.stateDir, "hogs"))).toBe(false);
  });

  it("up on a forged state.json: exit 2, naming the file, no run started (it was 4)", async () => {
    const r = await run(stateDir, ["up", "--parent", "self", "--name", "forged-up", "--redis", "redis://127.0.0.1:1"]);
    expect(r.stderr).toContain(stateSaid());
    expect(r.exitCode, r.stderr).toBe(2);
    expect(readdirSync(path.dirname(forgedState))).toEqual(["state.json"]);
  });

  it.each([
    ["pack", ["pack", "--jobs", "1"]],
    ["gate", ["gate", ...cgroupFlags, "--duration", "1s"]],
  ])("%s taking its Redis from a forged state.json: exit 2, naming the file", async (_name, args) => {
    const r = await run(stateDir, args);
    expect(r.stderr).toContain(stateSaid());
    expect(r.exitCode, r.stderr).toBe(2);
  });

  it("cgroup teardown, which undoes, keeps 4: the cgroup is left", async () => {
    const r = await run(host.stateDir, ["cgroup", "teardown", ...cgroupFlags]);
    expect(r.stderr).toContain(markerSaid());
    expect(r.exitCode, r.stderr).toBe(4);
    expect(readFileSync(marker, "utf8")).toBe(markerText);
  });

  it("rollback, which undoes, keeps 4: the drill is left", async () => {
    const r = await run(stateDir, ["rollback", "--name", "smoke"]);
    expect(r.stderr).toContain(stateSaid());
    expect(r.exitCode, r.stderr).toBe(4);
  });
});
