import { existsSync, mkdirSync, readdirSync, rmdirSync, rmSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { requireLayout } from "../../src/cgroup/layout.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import { setupWorkerCgroup } from "../../src/cgroup/setup.js";
import { markerFile } from "../../src/cgroup/stateFiles.js";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";

/**
 * QA: `drill cgroup teardown` on a cgroup whose cgroup.procs cannot be read
 * exited 1, "failed", though it is a teardown that could not finish: the
 * cgroup and its marker are left, and the run once the file reads finishes
 * it. Exit 4 (README: rollback incomplete, what is left and where), naming
 * the file. On a fake tree: cgroup.procs made a directory (EISDIR on read).
 */
let host: FakeHost | undefined;
afterEach(() => {
  host?.cleanup();
  host = undefined;
});

describe("cgroup teardown: a cgroup.procs that cannot be read", () => {
  it.each([[false], [true]])("exit 4 naming the file, the cgroup and marker left; run again once it reads, it finishes (--json %s)", async (json) => {
    host = makeFakeHost("v2");
    const h = host;
    const cg = resolveWorkerCgroup(h.roots, requireLayout(h.roots), "procs-unread", { kind: "self" });
    setupWorkerCgroup(h.roots, cg, h.stateDir, { memoryMax: 64 * 1024 * 1024, swapMax: 0 });
    const procs = path.join(cg.limits.dir, "cgroup.procs");
    rmSync(procs, { force: true });
    mkdirSync(procs);
    const args = ["--sysfs", h.sysfs, "--procfs", h.procfs, "--state-dir", h.stateDir, ...(json ? ["--json"] : []), "cgroup", "teardown", "--name", "procs-unread", "--parent", "self"];
    const r = await runDrill(args);
    expect(r.stderr).not.toContain("unexpected error");
    expect(r.exitCode, r.stdout + r.stderr).toBe(4);
    expect(r.stderr).toContain(`cannot read ${procs}`);
    if (json) {
      const doc = JSON.parse(r.stdout) as { kind: string; left: string[] };
      expect(doc.kind).toBe("failed");
      expect(doc.left.join("\n")).toContain(`cannot read ${procs}`);
    }
    expect(existsSync(cg.limits.dir)).toBe(true);
    expect(existsSync(markerFile(h.stateDir, cg))).toBe(true);

    // The file fixed: on this fake tree the dir is emptied of its files, as the kernel takes them with its rmdir.
    rmdirSync(procs);
    for (const file of readdirSync(cg.limits.dir)) rmSync(path.join(cg.limits.dir, file));
    const again = await runDrill(args);
    expect(again.exitCode, again.stdout + again.stderr).toBe(0);
    expect(existsSync(markerFile(h.stateDir, cg))).toBe(false);
    expect(existsSync(cg.limits.dir)).toBe(false);
  });
});
