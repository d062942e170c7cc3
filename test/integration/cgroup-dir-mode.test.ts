import { rmSync, statSync } from "node:fs";
import { execa } from "execa";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { WorkerCgroup } from "../../src/cgroup/paths.js";
import { drillBin } from "../helpers/cli.js";
import { forceCleanup, realCgroupSkipReason, realWorkerCgroup, tempStateDir } from "../helpers/cgroupFixtures.js";

/**
 * The cgroup dirs drill makes are 0755 whatever the umask, as runc and
 * systemd make theirs. QA: under umask 000 `drill cgroup setup` made them
 * world-writable; under 077 a sidecar run as another user could not read
 * memory.pressure in them.
 */

const skipReason = realCgroupSkipReason();
if (skipReason) console.warn(`skipping the cgroup dir mode test: ${skipReason}`);

const stateDir = tempStateDir();
const made: WorkerCgroup[] = [];
afterEach(async () => {
  for (const cg of made.splice(0)) await forceCleanup(cg, stateDir);
});
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

describe.skipIf(skipReason)("cgroup setup under --parent self (real cgroups)", () => {
  for (const umask of ["000", "077"]) {
    it(`umask ${umask}: every dir it makes is 0755`, async () => {
      const name = `dirmode${process.pid}u${umask}`;
      const cg = realWorkerCgroup(name);
      made.push(cg);
      const r = await execa("sh", ["-c", `umask ${umask} && exec node "$0" "$@"`, drillBin, "--state-dir", stateDir, "--json", "cgroup", "setup", "--name", name, "--parent", "self", "--memory-max", "64M"], {
        env: { FORCE_COLOR: "0" },
        reject: false,
        timeout: 60_000,
      });
      expect(r.exitCode, r.stdout + r.stderr).toBe(0);
      const created = (JSON.parse(r.stdout) as { created: string[] }).created;
      // v2 one dir; hybrid the v1 memory dir and its unified twin
      expect(created.sort()).toEqual(cg.dirs.map((d) => d.dir).sort());
      for (const dir of created) expect((statSync(dir).mode & 0o7777).toString(8), dir).toBe("755");
    });
  }
});
