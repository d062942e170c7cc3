import { appendFileSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { followLines, LineTail } from "../../src/drill/tail.js";

const dir = mkdtempSync(path.join(tmpdir(), "drill-tail-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.useRealTimers());

// inject's own summary line; "≥" is e2 89 a5 in UTF-8.
const LINE = "cgroup peak ≥32.2MiB";
const bytes = Buffer.from(`${LINE}\n`);
const cut = bytes.indexOf(0xe2) + 1; // after the first byte of "≥"

describe("LineTail", () => {
  it("a character the writer had half written when read comes out whole on the next read", () => {
    const file = path.join(dir, "half-char.log");
    const tail = new LineTail(file);
    expect(tail.read()).toEqual([]); // not there yet
    appendFileSync(file, bytes.subarray(0, cut));
    expect(tail.read()).toEqual([]);
    appendFileSync(file, Buffer.concat([bytes.subarray(cut), Buffer.from("next\n")]));
    expect(tail.read()).toEqual([LINE, "next"]);
    expect(tail.read()).toEqual([]);
  });
});

describe("LineTail on a file replaced mid-run", () => {
  it("a directory in its place reads as no new line, not an EISDIR thrown out of up's schedule (QA)", () => {
    const file = path.join(dir, "replaced.jsonl");
    const tail = new LineTail(file);
    appendFileSync(file, "one\n");
    expect(tail.read()).toEqual(["one"]);
    renameSync(file, `${file}.moved`);
    mkdirSync(file);
    expect(tail.read()).toEqual([]);
  });
});

describe("LineTail: the file removed or replaced under it", () => {
  // QA: up's watch.jsonl deleted mid-run lost the sidecar's samples with no word.
  it("says so once, and reads nothing after: what is under the name then is not its writer's output", () => {
    const file = path.join(dir, "removed.jsonl");
    const tail = new LineTail(file);
    expect(tail.read()).toEqual([]);
    expect(tail.takeLoss()).toBeNull(); // not there yet is no loss
    appendFileSync(file, "one\n");
    expect(tail.read()).toEqual(["one"]);
    rmSync(file);
    expect(tail.read()).toEqual([]);
    expect(tail.takeLoss()).toBe("removed");
    expect(tail.takeLoss()).toBeNull();
    expect(tail.lost).toBe(true);
    appendFileSync(file, "two\n");
    expect(tail.read()).toEqual([]);
  });

  // QA: a copy of gate.out put in its place was printed again as new decisions.
  it("a file replaced between two reads is said, and its content is not read as new lines", () => {
    const file = path.join(dir, "replaced-copy.out");
    const tail = new LineTail(file);
    appendFileSync(file, "admit job=1\n");
    expect(tail.read()).toEqual(["admit job=1"]);
    renameSync(file, `${file}.old`);
    appendFileSync(file, "admit job=1\nadmit job=2\n");
    expect(tail.read()).toEqual([]);
    expect(tail.takeLoss()).toBe("replaced");
  });
});

describe("followLines (inject's detached hog log)", () => {
  it("a line split inside a character across two polls is passed on once, whole", () => {
    vi.useFakeTimers();
    const file = path.join(dir, "follow.log");
    const seen: string[] = [];
    const stop = followLines(file, (line) => seen.push(line), 100);
    appendFileSync(file, Buffer.concat([Buffer.from("touched 4096\n"), bytes.subarray(0, cut)]));
    vi.advanceTimersByTime(100);
    expect(seen).toEqual(["touched 4096"]);
    appendFileSync(file, bytes.subarray(cut));
    stop(); // reads what is left
    expect(seen).toEqual(["touched 4096", LINE]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
