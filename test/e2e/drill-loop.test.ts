import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { parseDrillFile } from "../../src/drill/drillFile.js";
import { readState, type DrillState } from "../../src/drill/state.js";
import { realCgroupSkipReason, waitForQuietHostPsi } from "../helpers/cgroupFixtures.js";
import { runDrill } from "../helpers/cli.js";
import { assertHostClean } from "../helpers/hostClean.js";
import { assertNoJobLostInExport, idsGivenByQueue } from "../helpers/invariants.js";

const skip = realCgroupSkipReason();
/** drills/smoke.yaml's gate psi_limit (host PSI avg10 at or over it rejects), read as up reads it. */
const SMOKE_PSI_LIMIT = parseDrillFile(readFileSync("drills/smoke.yaml", "utf8"), "drills/smoke.yaml").gate.psi_limit;
if (skip) console.warn(`skipping drill up/rollback end-to-end: ${skip}`);

/**
 * The operator's loop on this machine: `drill up` on the default smoke drill
 * with its embedded Redis, a real cgroup and the real gate, `drill report`,
 * then `drill rollback` — host clean and every pushed id accounted for.
 */
describe.skipIf(skip !== null)("drill up → report → rollback (real cgroup, embedded Redis)", () => {
  let stateDir: string;
  let decoy: ChildProcess;
  beforeAll(() => {
    stateDir = mkdtempSync(path.join(tmpdir(), "drill-loop-"));
    // RELIABILITY 5: a decoy whose command line says "packed" must survive rollback.
    decoy = spawn("bash", ["-c", "exec -a packed-decoy sleep 300"], { stdio: "ignore" });
  });
  afterAll(async () => {
    await runDrill(["--state-dir", stateDir, "rollback"], { timeout: 60_000 });
    decoy.kill("SIGKILL");
    rmSync(stateDir, { recursive: true, force: true });
  });

  it("smoke: admits, rejects for all three reasons from real signals, then rolls back clean", async () => {
    // Left up by a failure here, smoke would hold the cgroup the next test's thrash asks for.
    onTestFailed(async () => {
      await runDrill(["--state-dir", stateDir, "rollback", "--name", "smoke"], { timeout: 90_000 });
    });
    // An admit needs a host under the gate's limits (smoke.yaml's psi_limit): not the previous file's hog still
    // in avg10. Half the limit leaves room, and waits ~15 s, not ~30, for a hog's 30 % to decay (10 s time constant).
    const waited = await waitForQuietHostPsi(SMOKE_PSI_LIMIT / 2);
    if (waited > 0) console.log(`drill-loop: waited ${waited} ms for host memory PSI avg10 < ${SMOKE_PSI_LIMIT / 2} before drill up`);
    const up = await runDrill(["--state-dir", stateDir, "--json", "up", "--drill", "drills/smoke.yaml", "--parent", "self"], { timeout: 120_000 });
    expect(up.exitCode, up.stderr).toBe(0);
    const summary = JSON.parse(up.stdout.trim().split("\n").pop()!) as { pushed_ids: string[]; name: string };
    expect(summary.pushed_ids.length).toBeGreaterThan(0);
    const before = readState(stateDir, "smoke") as DrillState;
    expect(before.phase).toBe("stopped");
    // Recorded absolute, as typed it names no file once read from elsewhere (QA).
    expect(before.drillFile).toBe(path.resolve("drills", "smoke.yaml"));

    const report = await runDrill(["--state-dir", stateDir, "report", "--name", "smoke", "--format", "json"]);
    expect(report.exitCode, report.stderr).toBe(0);
    const decisions = decisionCounts(JSON.parse(report.stdout));
    expect(decisions.admit ?? 0, JSON.stringify(decisions)).toBeGreaterThan(0);
    for (const reason of ["reject_packed_tokens", "reject_deadline_slack", "reject_host_pressure"]) {
      expect(decisions[reason] ?? 0, `${reason} in ${JSON.stringify(decisions)}`).toBeGreaterThan(0);
    }

    const rollback = await runDrill(["--state-dir", stateDir, "rollback", "--name", "smoke"], { timeout: 90_000 });
    expect(rollback.exitCode, rollback.stdout + rollback.stderr).toBe(0);
    expect(rollback.stdout).toMatch(/deny-all: mode reject_all/);
    assertHostClean(stateDir, "smoke", before);
    const exported = readdirSync(path.join(stateDir, "smoke")).filter((f) => /^final-.*\.jsonl$/.test(f));
    expect(exported).toHaveLength(1);
    assertNoJobLostInExport(path.join(stateDir, "smoke", exported[0]!), "jobs", summary.pushed_ids);
    expect(decoy.exitCode).toBeNull();
    expect(decoy.signalCode).toBeNull();

    // Idempotent (RELIABILITY 8): again, and with no drill at all.
    for (let i = 0; i < 2; i++) {
      const again = await runDrill(["--state-dir", stateDir, "rollback"]);
      expect(again.exitCode).toBe(0);
      expect(again.stdout).toMatch(/nothing to roll back/);
    }
  }, 180_000);

  it("thrash --detach, then rollback twice: exit 0 both times, host clean", async () => {
    const up = await runDrill(["--state-dir", stateDir, "up", "--drill", "drills/thrash.yaml", "--parent", "self", "--detach"], { timeout: 120_000 });
    expect(up.exitCode, up.stdout + up.stderr).toBe(0);
    expect(up.stdout).toMatch(/is up in the background/);
    const before = readState(stateDir, "thrash") as DrillState;
    expect(before.phase).toBe("running");
    // What the rollback then has to undo: the hog has filled the cgroup, the packer has pushed (phase 1 at 5 s).
    expect(await idsGivenByQueue(before.redis.url, "jobs", 1), "the packer pushed nothing").not.toEqual([]);
    const usage = before.cgroup!.dirs.map((d) => [path.join(d, "memory.usage_in_bytes"), path.join(d, "memory.current")]).flat().find((f) => existsSync(f))!;
    const filled = Date.now() + 30_000;
    while (Number(readFileSync(usage, "utf8")) < 0.9 * 256 * 1024 * 1024 && Date.now() < filled) await new Promise((r) => setTimeout(r, 100));
    expect(Number(readFileSync(usage, "utf8")), `${usage}: the hog never filled the 256M cgroup`).toBeGreaterThanOrEqual(0.9 * 256 * 1024 * 1024);
    const first = await runDrill(["--state-dir", stateDir, "rollback", "--name", "thrash"], { timeout: 90_000 });
    expect(first.exitCode, first.stdout + first.stderr).toBe(0);
    const second = await runDrill(["--state-dir", stateDir, "rollback", "--name", "thrash"]);
    expect(second.exitCode).toBe(0);
    assertHostClean(stateDir, "thrash", readState(stateDir, "thrash") ?? before);
  }, 180_000);
});

/** Decision counts by reason from the report document, whatever its nesting. */
function decisionCounts(report: unknown): Record<string, number> {
  const doc = report as { decisions?: unknown };
  let decisions = doc.decisions;
  if (decisions && typeof decisions === "object" && "rows" in decisions) decisions = (decisions as { rows: unknown }).rows;
  if (Array.isArray(decisions)) {
    return Object.fromEntries(decisions.map((d: { reason?: string; kind?: string; count?: number }) => [d.reason ?? d.kind ?? "?", d.count ?? 0]));
  }
  return (decisions ?? {}) as Record<string, number>;
}
