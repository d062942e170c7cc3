import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, describe, expect, it } from "vitest";
import { UsageError } from "../../src/errors.js";
import { Recording, RecordingRemoved } from "../../src/sampler/recording.js";

const repoRoot = path.resolve(import.meta.dirname, "../..");
const root = mkdtempSync(path.join(tmpdir(), "drill-recording-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A sample line of `length` bytes, newline included. */
const sampleLine = (tag: string, length: number): string => {
  const head = `{"tag":"${tag}","pad":"`;
  return `${head}${"x".repeat(length - head.length - 3)}"}\n`;
};

// util-linux's prlimit sets RLIMIT_FSIZE: write() past it is short, the next one EFBIG (node ignores SIGXFSZ),
// the way a filling disk takes part of a line and then says ENOSPC.
const noPrlimit = spawnSync("prlimit", ["--version"]).error !== undefined;
if (noPrlimit) console.warn("skipping the failed-write Recording cases: prlimit (util-linux) is not installed");

/** Runs `body` (with `Recording` and `fs` in scope) in a node whose files stop growing at `fsize` bytes; its stdout. */
async function underFileSizeLimit(fsize: number, body: string): Promise<string> {
  const script = `
    const fs = await import("node:fs");
    const { Recording } = await import(${JSON.stringify(path.join(repoRoot, "dist", "sampler", "recording.js"))});
    ${body}`;
  const r = await execa("prlimit", [`--fsize=${fsize}`, "--", "node", "--input-type=module", "-e", script], { reject: false });
  expect(r.exitCode, r.stderr).toBe(0);
  return r.stdout;
}

describe("Recording: a write that fails part way", () => {
  // QA (two watches into one file, a full disk): each cut back to its own byte count; the file ended
  // with a sample glued to a torn one, and whole lines of the other watch were gone.
  it.skipIf(noPrlimit)("two recordings into one file: only what the failed append wrote is cut off, both watches' lines stay whole", async () => {
    const file = path.join(root, "two.jsonl");
    const a1 = sampleLine("a1", 60);
    const b1 = sampleLine("b1", 60);
    const big = sampleLine("big", 200);
    const out = await underFileSizeLimit(
      a1.length + b1.length + 50,
      `const file = ${JSON.stringify(file)};
      const a = Recording.open(file);
      const b = Recording.open(file);
      a.append(${JSON.stringify(a1)});
      b.append(${JSON.stringify(b1)});
      for (const r of [a, b]) {
        try { r.append(${JSON.stringify(big)}); } catch (err) { console.log(err.message); }
      }`,
    );
    expect(out.split("\n")).toEqual([`--record: cannot write ${file}: EFBIG: file too large, write`, `--record: cannot write ${file}: EFBIG: file too large, write`]);
    expect(readFileSync(file, "utf8")).toBe(a1 + b1);
  });

  // QA (`: > file` or logrotate's copytruncate mid-run, then a full disk): the cut went back to this
  // watch's own count, past the end: 43 161 NUL bytes and no newline, and report read 0 samples.
  it.skipIf(noPrlimit)("a file truncated from outside: the failed append's part is cut off, the file never grows", async () => {
    const file = path.join(root, "truncated.jsonl");
    const earlier = [sampleLine("e1", 100), sampleLine("e2", 100), sampleLine("e3", 100)].join("");
    writeFileSync(file, earlier);
    const after = sampleLine("after", 60);
    const out = await underFileSizeLimit(
      250,
      `const file = ${JSON.stringify(file)};
      const r = Recording.open(file);
      fs.truncateSync(file, 0);
      r.append(${JSON.stringify(after)});
      try { r.append(${JSON.stringify(sampleLine("big", 400))}); } catch (err) { console.log(err.message); }`,
    );
    expect(out).toBe(`--record: cannot write ${file}: EFBIG: file too large, write`);
    expect(readFileSync(file, "utf8")).toBe(after);
  });
});

describe("Recording: the file removed mid-run", () => {
  // QA: every later sample went to the deleted inode, silently, exit 0.
  it("the next append says which file was removed and writes nothing", () => {
    const file = path.join(root, "removed.jsonl");
    const r = Recording.open(file);
    try {
      r.append(sampleLine("one", 40));
      unlinkSync(file);
      const next = () => r.append(sampleLine("two", 40));
      expect(next).toThrow(RecordingRemoved);
      expect(next).toThrow(`--record: ${file} was removed while watch recorded into it`);
    } finally {
      r.close();
    }
  });
});

describe("Recording.open", () => {
  // QA: `--record ''` read "cannot open : ENOENT".
  it("an empty path is a usage error that says so", () => {
    expect(() => Recording.open("")).toThrow(UsageError);
    expect(() => Recording.open("")).toThrow("--record: is empty; give the file to append the samples to (JSON lines)");
  });
});
