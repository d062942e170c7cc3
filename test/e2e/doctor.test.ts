import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";

/** A fake host: a v2 cgroup root and /proc files in the real kernel formats. */
function fakeHost(options: { psi?: string | null; vmstat?: string }): { procfs: string; sysfs: string; root: string } {
  const root = mkdtempSync(path.join(tmpdir(), "drill-doctor-"));
  const procfs = path.join(root, "proc");
  const sysfs = path.join(root, "sys");
  const cg = path.join(sysfs, "fs", "cgroup");
  mkdirSync(path.join(procfs, "pressure"), { recursive: true });
  mkdirSync(path.join(procfs, "self"), { recursive: true });
  mkdirSync(cg, { recursive: true });
  writeFileSync(path.join(cg, "cgroup.controllers"), "cpuset cpu io memory pids\n");
  writeFileSync(path.join(cg, "cgroup.subtree_control"), "memory\n");
  writeFileSync(path.join(cg, "cgroup.procs"), "1\n");
  writeFileSync(path.join(cg, "memory.swap.max"), "max\n");
  writeFileSync(path.join(procfs, "self", "cgroup"), "0::/\n");
  writeFileSync(path.join(procfs, "meminfo"), "MemTotal:       24000000 kB\nSwapTotal:             0 kB\n");
  writeFileSync(path.join(procfs, "vmstat"), options.vmstat ?? "nr_free_pages 1\npswpin 0\npswpout 0\n");
  if (options.psi !== null) {
    writeFileSync(path.join(procfs, "pressure", "memory"), options.psi ?? "some avg10=0.12 avg60=0.05 avg300=0.01 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n");
  }
  return { procfs, sysfs, root };
}

const roots: string[] = [];
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })));

describe("drill doctor", () => {
  it("prints one JSON document with checks and a verdict, reading only the fake tree", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--json", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; value: unknown; detail: string }>; verdict: string; serving: { refuse: boolean } };
    const byName = new Map(doc.checks.map((c) => [c.name, c]));
    for (const c of doc.checks) expect(Object.keys(c).sort()).toEqual(["detail", "name", "status", "value"]);
    expect(byName.get("cgroup layout")?.value).toBe("v2");
    expect(byName.get("host PSI")).toMatchObject({ status: "pass", value: 0.12 });
    expect(byName.get("swap-in counters")?.status).toBe("pass");
    expect(["ready", "ready_with_warnings", "refused"]).toContain(doc.verdict);
    expect(typeof doc.serving.refuse).toBe("boolean");
    // exit 3 only on a fail row
    expect(r.exitCode).toBe(doc.checks.some((c) => c.status === "fail") ? 3 : 0);
  });

  it.each([
    ["missing", null],
    ["empty", ""],
    ["garbage", "avg10=0.22=55\n"],
  ])("refuses (exit 3) when host PSI is %s, naming the file", async (_name, psi) => {
    const host = fakeHost({ psi });
    roots.push(host.root);
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "doctor", "--json", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; detail: string }>; verdict: string };
    const psiRow = doc.checks.find((c) => c.name === "host PSI");
    expect(psiRow?.status).toBe("fail");
    expect(psiRow?.detail).toContain(path.join(host.procfs, "pressure", "memory"));
    expect(doc.verdict).toBe("refused");
    expect(r.exitCode).toBe(3);
    expect(r.stderr).toMatch(/^drill: doctor refused: .*host PSI/m);
  });

  // QA: a garbled PSI file was blamed on the kernel ("Boot with psi=1"), which only fits a missing one.
  it.each([
    ["missing", null, /: missing; the gate would reject every job \(psi=missing\)\. Boot with psi=1 \(CONFIG_PSI\)$/],
    ["a negative avg10", "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n", /memory is there but unreadable or garbled: bad number avg10=-1\.00 in some line; the gate would reject every job \(psi=missing\)$/],
    ["an avg10 above 100", "some avg10=999.00 avg60=0.00 avg300=0.00 total=0\n", /memory is there but unreadable or garbled: avg10=999\.00 above 100% in some line; the gate/],
  ])("host PSI %s: the boot advice only for a missing file", async (_name, psi, detail) => {
    const host = fakeHost({ psi });
    roots.push(host.root);
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--json", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; detail: string }> };
    const row = doc.checks.find((c) => c.name === "host PSI");
    expect(row?.status).toBe("fail");
    expect(row?.detail).toMatch(detail);
    if (psi !== null) expect(row?.detail).not.toContain("psi=1");
  });

  // QA: with /proc/self/cgroup garbage, the probe cgroup was never made, yet 'swap disabled in cgroup'
  // passed ("the host has no swap at all") and 'cgroup PSI' warned "no per-cgroup memory.pressure".
  it("--parent self with a garbage /proc/self/cgroup: the probe's rows say they were not checked, and why", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    writeFileSync(path.join(host.procfs, "self", "cgroup"), "garbage here\n");
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--json", "--parent", "self", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; value: unknown; detail: string }> };
    const notChecked = `not checked: the probe cgroup could not be made (cannot read ${path.join(host.procfs, "self", "cgroup")}: unparseable line "garbage here"`;
    for (const name of ["swap disabled in cgroup", "cgroup PSI", "cgroup.kill"]) {
      expect(doc.checks.find((c) => c.name === name)).toMatchObject({ status: "warn", value: null, detail: expect.stringContaining(notChecked) });
    }
    expect(r.exitCode).toBe(3);
  });

  it("no cgroup.kill, and only a v1 freezer hierarchy (teardown uses cgroup.freeze): the row says rollback SIGKILLs by pid, not that it freezes", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    mkdirSync(path.join(host.sysfs, "fs", "cgroup", "freezer"));
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--json", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; detail: string }> };
    const kill = doc.checks.find((c) => c.name === "cgroup.kill");
    expect(kill?.status).toBe("warn");
    expect(kill?.detail).toMatch(/^no cgroup.kill and no cgroup.freeze: rollback SIGKILLs each pid/);
    expect(kill?.detail).not.toMatch(/freezes|thaw/);
  });

  it("refuses a layout with no memory controller", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    rmSync(path.join(host.sysfs, "fs", "cgroup"), { recursive: true });
    mkdirSync(path.join(host.sysfs, "fs", "cgroup"), { recursive: true });
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "doctor", "--file-dir", host.root]);
    expect(r.exitCode).toBe(3);
    expect(r.stdout).toMatch(/cgroup layout\s*│\s*FAIL/);
  });

  it("--parent naming a cgroup that does not exist is a typo (exit 2 naming --parent and the dir), not an unsafe host", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--parent", "/nonexistent/path", "--file-dir", host.root]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toBe(`drill: --parent /nonexistent/path: no such cgroup: ${path.join(host.sysfs, "fs", "cgroup", "nonexistent", "path")} does not exist (create it, or use / or self)`);
    expect(r.stdout).toBe("");
  });

  it("--parent naming an existing cgroup probes there", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    mkdirSync(path.join(host.sysfs, "fs", "cgroup", "drills"));
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "doctor", "--json", "--parent", "/drills", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; value: unknown }> };
    expect(doc.checks.find((c) => c.name === "memory controller writable")).toMatchObject({ status: "pass", value: path.join(host.sysfs, "fs", "cgroup", "drills") });
  });

  // statfs answers for a regular file too: the row passed, and inject and worker failed on it mid-drill.
  // QA: a missing --file-dir was exit 3 here (an unsafe host) while up said exit 2 (a typo): both are
  // bad input, as a --parent that does not exist is, named once on stderr before anything is probed.
  it.each([
    ["a regular file", (root: string) => { const plain = path.join(root, "plain-file"); writeFileSync(plain, ""); return plain; }, "is not a directory"],
    ["a dir that does not exist", (root: string) => path.join(root, "nonexistent"), "does not exist"],
  ])("--file-dir that is %s: exit 2 naming --file-dir, as up says it", async (_n, make, problem) => {
    const host = fakeHost({});
    roots.push(host.root);
    const dir = make(host.root);
    const args = ["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state")];
    const r = await runDrill([...args, "doctor", "--json", "--file-dir", dir]);
    expect(r.exitCode, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toBe(`drill: --file-dir: ${dir} ${problem}; give an existing directory on a disk filesystem`);
    expect(r.stdout).toBe("");
    const up = await runDrill([...args, "up", "--file-dir", dir]);
    expect(up.exitCode, up.stdout + up.stderr).toBe(2);
    expect(up.stderr).toBe(r.stderr);
  });

  // QA: the row said "cannot reach redis://…: Connection is closed." (ioredis's), not why.
  it("--redis nobody listens on: the redis row names the connection's error (ECONNREFUSED), not ioredis's 'Connection is closed.'", async () => {
    const host = fakeHost({});
    roots.push(host.root);
    const url = `redis://127.0.0.1:${await freePort()}`;
    const r = await runDrill(["--procfs", host.procfs, "--sysfs", host.sysfs, "--state-dir", path.join(host.root, "state"), "--redis", url, "doctor", "--json", "--file-dir", host.root]);
    const doc = JSON.parse(r.stdout) as { checks: Array<{ name: string; status: string; detail: string }> };
    expect(doc.checks.find((c) => c.name === "redis reachable")).toMatchObject({ status: "fail", detail: expect.stringMatching(new RegExp(`^cannot reach ${url}: connect ECONNREFUSED 127\\.0\\.0\\.1:\\d+$`)) });
  });

  it("prints a table and the serving verdict on this machine", async () => {
    const r = await runDrill(["doctor"]);
    expect([0, 3]).toContain(r.exitCode);
    expect(r.stdout).toMatch(/│ check\s+│ status/);
    expect(r.stdout).toContain("refuse the free-host bet");
    expect(r.stdout).toMatch(/^drill: (ready|REFUSED)/m);
  });
});
