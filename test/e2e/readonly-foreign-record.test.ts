import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forgedMarkerCgroup, makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

/**
 * A cgroup marker drill did not write (other users can write it): a command
 * that only reads the state dir refuses it as bad input (exit 2, DESIGN.md),
 * as report does, not with rollback's 4, "rollback incomplete" (QA: cgroup
 * status exited 4).
 */
describe("read-only commands on a state dir record drill did not write", () => {
  let host: FakeHost;
  let marker: string;
  beforeAll(() => {
    host = makeFakeHost("hybrid");
    marker = forgedMarkerCgroup(host, "forged");
  });
  afterAll(() => host.cleanup());

  const run = (args: string[]) => runDrill(["--sysfs", host.sysfs, "--procfs", host.procfs, "--state-dir", host.stateDir, ...args]);
  const said = () => `${marker} is not a record drill wrote: other users can write it (mode 0666)`;

  it("cgroup status, which only reads: exit 2, naming the file and why (it was 4)", async () => {
    const r = await run(["cgroup", "status", "--parent", "self", "--name", "forged"]);
    expect(r.stderr).toContain(said());
    expect(r.exitCode).toBe(2);
  });

  // As README says: an observer names it and samples on, the cgroup's fields null.
  it("watch, an observer, names it and goes on (exit 0, never 4)", async () => {
    const r = await run(["--redis", "redis://127.0.0.1:1", "watch", "--once", "--interval", "10ms", "--parent", "self", "--name", "forged"]);
    expect(r.stderr).toContain(said());
    expect(r.exitCode).toBe(0);
  });
});
