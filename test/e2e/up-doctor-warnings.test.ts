import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Check } from "../../src/doctor/checks.js";
import { doctorOutcome } from "../../src/drill/up.js";
import { repoRoot, runDrill } from "../helpers/cli.js";

const smoke = readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8");

/**
 * QA: up kept only doctor's fail rows, so an operator who runs `drill up`
 * directly (the README's main path) never read its warnings. A fake /proc
 * whose host PSI is already at 3.00 gives doctor's "host PSI" warning; an
 * empty --sysfs makes it refuse (exit 3) right after, before anything is
 * created, so no drill starts.
 */
describe("drill up: doctor's warnings are said before the drill starts", () => {
  let root = "";
  let procfs = "";
  let sysfs = "";
  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "drill-up-doctor-warn-"));
    procfs = path.join(root, "proc");
    sysfs = path.join(root, "sys");
    mkdirSync(path.join(procfs, "pressure"), { recursive: true });
    mkdirSync(sysfs);
    // some avg10=3.00 avg60=1.00 avg300=0.50 total=123456
    writeFileSync(path.join(procfs, "pressure", "memory"), "some avg10=3.00 avg60=1.00 avg300=0.50 total=123456\nfull avg10=0.50 avg60=0.10 avg300=0.00 total=2345\n");
    writeFileSync(path.join(procfs, "meminfo"), "MemTotal:       24000000 kB\nSwapTotal:             0 kB\n");
    writeFileSync(path.join(procfs, "vmstat"), "nr_free_pages 1\npswpin 0\npswpout 0\n");
    writeFileSync(path.join(root, "smoke.yaml"), smoke);
  });
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true });
  });

  const host = (stateDir: string) => ["--procfs", procfs, "--sysfs", sysfs, "--state-dir", path.join(root, stateDir)];
  const up = (stateDir: string, json = false, extra: string[] = []) =>
    runDrill([...host(stateDir), ...(json ? ["--json"] : []), "up", "--drill", path.join(root, "smoke.yaml"), "--parent", "self", "--name", "doctorwarncg", "--file-dir", root, ...extra]);

  /** doctor's own warn rows on the same fake host, as up words them. */
  async function doctorWarnings(stateDir: string): Promise<string[]> {
    const r = await runDrill([...host(stateDir), "--json", "doctor", "--parent", "self", "--file-dir", root]);
    const doc = JSON.parse(r.stdout) as { checks: Check[] };
    return doc.checks.filter((c) => c.status === "warn").map((c) => doctorOutcome([c]).warnings[0]!);
  }

  it("each warn check one line, in doctor's words, after the host check and before the refusal; exit code unchanged", async () => {
    const r = await up("text");
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    const lines = r.stdout.split("\n");
    const warnings = lines.filter((l) => l.startsWith("doctor: warning: "));
    expect(warnings).toContain(
      `doctor: warning: host PSI: ${path.join(procfs, "pressure", "memory")}: some avg10 is already ≥ 1.00 before the drill: neighbours will confound its numbers, and gate mode admit will refuse (host PSI = 3)`,
    );
    expect(warnings).toEqual(await doctorWarnings("text"));
    expect(lines.indexOf(warnings[0]!)).toBeGreaterThan(lines.indexOf("doctor: checking the host"));
    expect(r.stderr).toMatch(/^drill: doctor refused: /m);
    expect(r.stderr).not.toContain("warning");
  });

  // QA: packing.yaml declares 4 vCPU and nothing said this 2-CPU host differs (the runbook: "if your box differs, rewrite the thresholds").
  it("a drill file whose host.vcpus is not this host's online CPU count: said as a warning before the refusal, in the runbook's words", async () => {
    mkdirSync(path.join(sysfs, "devices", "system", "cpu"), { recursive: true });
    writeFileSync(path.join(sysfs, "devices", "system", "cpu", "online"), "0-1\n");
    const file = path.join(root, "fourcpu.yaml");
    writeFileSync(file, smoke.replace(/^host:\n/m, "host:\n  vcpus: 4\n"));
    try {
      const r = await runDrill([...host("vcpus"), "up", "--drill", file, "--parent", "self", "--name", "doctorwarncg", "--file-dir", root]);
      expect(r.exitCode, r.stdout + r.stderr).toBe(3);
      expect(r.stdout).toContain(`drill file: warning: host.vcpus 4 in ${file}, this host has 2 online: its thresholds were written for 4 vCPU; if your box differs, rewrite the thresholds, not the story`);
      // --detach: the background up says it in its log; the operator's terminal and --json's warnings too (QA).
      const detached = await runDrill([...host("vcpus-detach"), "up", "--drill", file, "--parent", "self", "--name", "doctorwarncg", "--file-dir", root, "--detach"]);
      expect(detached.exitCode, detached.stdout + detached.stderr).toBe(3);
      expect(detached.stdout).toContain(`drill file: warning: host.vcpus 4 in ${file}, this host has 2 online`);
      const same = path.join(root, "twocpu.yaml");
      writeFileSync(same, smoke.replace(/^host:\n/m, "host:\n  vcpus: 2\n"));
      expect((await runDrill([...host("vcpus2"), "up", "--drill", same, "--parent", "self", "--name", "doctorwarncg", "--file-dir", root])).stdout).not.toContain("host.vcpus");
    } finally {
      rmSync(path.join(sysfs, "devices"), { recursive: true, force: true });
    }
  });

  it("--json: the warnings are on stderr with up's other lines; stdout stays up's one document", async () => {
    const r = await up("json", true);
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stderr.split("\n").filter((l) => l.startsWith("doctor: warning: "))).toEqual(await doctorWarnings("json"));
    expect(r.stderr).toContain("doctor: warning: host PSI: ");
    const doc = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(doc).toMatchObject({ name: "smoke", verdict: "refused" });
    expect(r.stdout).not.toContain("warning");
  });

  it("--detach: the background up's warnings and its refusal are said where the operator ran it, not only in its log", async () => {
    const r = await up("detach", false, ["--detach"]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(3);
    expect(r.stdout.split("\n").filter((l) => l.startsWith("doctor: warning: "))).toEqual(await doctorWarnings("detach"));
    expect(r.stderr).toMatch(/^drill: drill up exited with code 3 before the drill ran: doctor refused: .*; see .*smoke-up\.log$/m);
 
    const json = await up("detach-json", true, ["--detach"]);
    expect(json.exitCode, json.stdout + json.stderr).toBe(3);
    expect(JSON.parse(json.stdout)).toMatchObject({ name: "smoke", verdict: "refused", reason: expect.stringMatching(/doctor refused: /) });
    expect(json.stderr).toContain("doctor: warning: host PSI: ");
  });
});
