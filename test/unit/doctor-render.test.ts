import { Chalk } from "chalk";
import { describe, expect, it } from "vitest";
import type { Check, ServingVerdict } from "../../src/doctor/checks.js";
import { breakWord, doctorColumnWidths, renderDoctor } from "../../src/doctor/render.js";

const CG = "/sys/fs/cgroup/memory/process_api/2df7181f456901e35edc65efc7f82105";
const checks: Check[] = [
  { name: "root", status: "pass", value: 0, detail: "running as root" },
  { name: "memory controller writable", status: "pass", value: CG, detail: "created and removed a probe cgroup" },
  { name: "swap disabled in cgroup", status: "pass", value: `${CG}/drill-doctor-4242/memory.memsw.limit_in_bytes`, detail: "memory.memsw.limit_in_bytes = limit disables swap (plus swappiness=0); v1 swap-off is best effort" },
  { name: "host PSI", status: "warn", value: 3.65, detail: "/proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill: neighbours will confound its numbers, and gate mode admit will refuse" },
  { name: "redis-server on PATH", status: "fail", value: null, detail: "not found: with no --redis given, drill up cannot start its embedded Redis" },
];
const serving: ServingVerdict = {
  refuse: true,
  reasons: [
    { rule: "You cannot disable swap inside the worker cgroup", holds: false, why: `${CG}/drill-doctor-4242/memory.memsw.limit_in_bytes is available` },
    { rule: "The job has a user-facing first-token deadline", holds: null, why: "a property of your workload: if yes, refuse" },
  ],
};
const plain = new Chalk({ level: 0 });

describe("renderDoctor widths", () => {
  it.each([80, 100, 120])("at %d columns every line fits, table lines exactly", (width) => {
    const lines = renderDoctor(checks, serving, plain, width).split("\n");
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(width);
    expect([...lines[0]!].length).toBe(width); // the table's top border spans the terminal
  });

  it("80 columns: long values are broken, never cut off with …, and every word of the details is there", () => {
    const text = renderDoctor(checks, serving, plain, 80);
    expect(text).not.toContain("…");
    const valueColumn = text
      .split("\n")
      .filter((l) => l.startsWith("│"))
      .map((l) => l.split("│")[3]!.trim())
      .join("");
    expect(valueColumn).toContain(`${CG}/drill-doctor-4242/memory.memsw.limit_in_bytes`);
    for (const word of checks[3]!.detail.split(" ")) expect(text).toContain(word);
    expect(text).toMatch(/^ {2}no {3}You cannot disable swap/m);
    expect(text).toMatch(/^ {2}ask {2}The job has/m);
    expect(text).toMatch(/^ {2}verdict: refuse the free-host bet/m);
  });

  it("column widths add up to the terminal (5 border characters), with a floor for tiny ones", () => {
    for (const width of [80, 100, 132]) expect(doctorColumnWidths(width).reduce((a, b) => a + b, 0) + 5).toBe(width);
    expect(doctorColumnWidths(20)).toEqual(doctorColumnWidths(64));
  });

  it("breakWord cuts a path after a slash when one is near, else at the width", () => {
    expect(breakWord("/sys/fs/cgroup/memory/x", 16)).toEqual(["/sys/fs/cgroup/", "memory/x"]);
    expect(breakWord("2df7181f456901e35edc", 8)).toEqual(["2df7181f", "456901e3", "5edc"]);
    expect(breakWord("short", 8)).toEqual(["short"]);
  });
});

describe("renderDoctor on a narrow terminal and under a non-UTF-8 locale", () => {
  const NON_ASCII = /[^\x20-\x7e]/u;

  // QA: at 40 columns the table was 64 wide (its floor), and every line wrapped in the terminal.
  it.each([24, 40, 63])("at %d columns every line fits: check and status columns, the value and detail under the check", (width) => {
    const text = renderDoctor(checks, serving, plain, width);
    const lines = text.split("\n");
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(width);
    expect([...lines[0]!].length).toBe(width);
    expect(lines[1]).toMatch(/^│ check +│ status │$/);
    // Nothing cut: each check's value and detail are there whole, wrapped or broken but in order.
    const cells = lines
      .filter((l) => l.startsWith("│"))
      .map((l) => l.split("│")[1]!)
      .join("")
      .replaceAll(" ", "");
    for (const c of checks) expect(cells).toContain(`${c.name}${c.value ?? ""}${c.detail}`.replaceAll(" ", ""));
  });

  it.each([40, 80, 100])("ASCII at %d columns: borders of - | +, no byte outside printable ASCII, every line fits", (width) => {
    const text = renderDoctor(checks, serving, plain, width, false);
    const lines = text.split("\n");
    for (const line of lines) {
      expect(line, line).not.toMatch(NON_ASCII);
      expect(line.length, line).toBeLessThanOrEqual(width);
    }
    expect(lines[0]).toMatch(/^\+-+\+-+\+/);
    expect(lines[1]).toMatch(/^\| check +\| status \|/);
    expect(text).toContain(" >= "); // the detail's ≥, spelled out before the layout measured it
  });

  it("UTF-8 keeps the box drawing", () => {
    expect(renderDoctor(checks, serving, plain, 80, true).split("\n")[0]).toMatch(/^┌─+┬/);
  });
});
