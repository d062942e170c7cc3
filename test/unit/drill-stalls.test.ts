import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { HostRoots } from "../../src/host/kernelFile.js";
import { cgroupTaskRole, readStalls, stalledParts, StallWatch, stillThere } from "../../src/drill/stalls.js";

const root = mkdtempSync(path.join(tmpdir(), "drill-stalls-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** /proc/<pid>/stat and comm as the kernel writes them: state is field 3, starttime field 22. */
function proc(pid: number, comm: string, state: string): void {
  const dir = path.join(root, "proc", String(pid));
  mkdirSync(dir, { recursive: true });
  const fields = [state, "1", ...Array.from({ length: 17 }, () => "0"), "4242", ...Array.from({ length: 30 }, () => "0")];
  writeFileSync(path.join(dir, "stat"), `${pid} (${comm}) ${fields.join(" ")}\n`);
  writeFileSync(path.join(dir, "comm"), `${comm}\n`);
}

describe("up's stalled parts (QA: a SIGSTOPped worker, a frozen cgroup, a stopped gate were never named)", () => {
  it("a stopped process and a frozen cgroup are named with how to resume them; running ones are not", () => {
    const parts = stalledParts(
      [
        { role: "gate", pid: 10, state: "T", comm: "node" },
        { role: "watch", pid: 11, state: "S" },
        { role: "worker", pid: 12, state: null },
      ],
      ["/sys/fs/cgroup/unified/drill-x-1"],
    );
    expect(parts.map((p) => p.stalled)).toEqual([
      "gate pid 10 (node) is stopped (state T: SIGSTOP or a debugger): it answers nothing until `kill -CONT 10`",
      "the worker cgroup /sys/fs/cgroup/unified/drill-x-1 is frozen (cgroup.events: frozen 1): its worker and hog take nothing until `echo 0 > /sys/fs/cgroup/unified/drill-x-1/cgroup.freeze`",
    ]);
  });

  it("the command that thaws a frozen cgroup quotes its path for the shell (a --name is any name but a path)", () => {
    const [part] = stalledParts([], ["/sys/fs/cgroup/my cg"]);
    expect(part?.stalled).toContain("until `echo 0 > '/sys/fs/cgroup/my cg/cgroup.freeze'`");
  });

  it("read from the host: up's children and the cgroup's tasks; each said once as it stalls and once as it resumes", () => {
    const roots = new HostRoots(path.join(root, "proc"), path.join(root, "sys"));
    const v1 = path.join(root, "memory", "w");
    const twin = path.join(root, "unified", "drill-w-1");
    mkdirSync(v1, { recursive: true });
    mkdirSync(twin, { recursive: true });
    writeFileSync(path.join(v1, "cgroup.procs"), "30\n");
    writeFileSync(path.join(twin, "cgroup.events"), "populated 1\nfrozen 0\n");
    proc(20, "node", "S");
    proc(30, "node", "T");
    const watch = new StallWatch();
    const read = () => watch.poll(readStalls(roots, [{ role: "gate", pid: 20 }], [v1, twin]), (part) => stillThere(roots, part));
    expect(read()).toEqual(["task in the worker cgroup pid 30 (node) is stopped (state T: SIGSTOP or a debugger): it answers nothing until `kill -CONT 30`"]);
    expect(read()).toEqual([]);
    writeFileSync(path.join(twin, "cgroup.events"), "populated 1\nfrozen 1\n");
    proc(30, "node", "S");
    expect(read()).toEqual([
      `the worker cgroup ${twin} is frozen (cgroup.events: frozen 1): its worker and hog take nothing until \`echo 0 > ${path.join(twin, "cgroup.freeze")}\``,
      "task in the worker cgroup pid 30 runs again",
    ]);
    writeFileSync(path.join(twin, "cgroup.events"), "populated 1\nfrozen 0\n");
    expect(read()).toEqual([`the worker cgroup ${twin} is thawed`]);
    // QA: a stopped gate killed (gone, or a zombie until reaped) is not "running again": up says how it exited.
    proc(20, "node", "T");
    expect(read()).toEqual(["gate pid 20 (node) is stopped (state T: SIGSTOP or a debugger): it answers nothing until `kill -CONT 20`"]);
    proc(20, "node", "Z");
    expect(read()).toEqual([]);
    proc(30, "node", "T");
    expect(read()).toHaveLength(1);
    rmSync(path.join(root, "proc", "30"), { recursive: true });
    writeFileSync(path.join(v1, "cgroup.procs"), "");
    expect(read()).toEqual([]);
    // QA: the worker itself (up records its launcher, outside the cgroup) said as "task in the worker cgroup".
    writeFileSync(path.join(v1, "cgroup.procs"), "31\n");
    proc(31, "node", "T");
    writeFileSync(path.join(root, "proc", "31", "cmdline"), "node\0/opt/drill/bin/drill.js\0--state-dir\0/var/lib/drill\0worker\0--queue\0jobs\0");
    expect(read()).toEqual(["worker pid 31 (node) is stopped (state T: SIGSTOP or a debugger): it answers nothing until `kill -CONT 31`"]);
    proc(31, "node", "S");
    expect(read()).toEqual(["worker pid 31 runs again"]);
  });

  it("a cgroup task's role from its argv: worker, hog, the worker's weights toucher, else a task", () => {
    expect(cgroupTaskRole(["node", "/opt/drill/bin/drill.js", "--json", "worker", "--queue", "jobs"])).toBe("worker");
    expect(cgroupTaskRole(["/opt/drill/native/build/pagetoucher", "thrash", "--size", "1"])).toBe("hog");
    expect(cgroupTaskRole(["python3", "/opt/drill/native/pagetoucher.py", "anon", "--size", "1"])).toBe("hog");
    expect(cgroupTaskRole(["/opt/drill/native/build/pagetoucher", "serve", "--file", "w"])).toBe("the worker's weights toucher");
    expect(cgroupTaskRole(["sleep", "300"])).toBe("task in the worker cgroup");
    expect(cgroupTaskRole([])).toBe("task in the worker cgroup");
  });
});
