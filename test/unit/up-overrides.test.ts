import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { applyOverrides, resolveFileDir, weightsReclaimNote } from "../../src/commands/up.js";
import { resolveDrillPath } from "../../src/commands/up.run.js";
import { UsageError } from "../../src/errors.js";
import { parseDrillFile } from "../../src/drill/drillFile.js";
import { hogExitLine, hogOutcomeIn, outputName } from "../../src/drill/up.js";
import { repoRoot } from "../helpers/cli.js";
import { pack, tinyDrill } from "../helpers/drills.js";

const smoke = parseDrillFile(readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8"), "smoke.yaml");
const base = { detach: false, name: "infer", queue: "jobs", fileDir: "/var/tmp" };

describe("drill up flags override the drill file (rewrite the thresholds, not the story)", () => {
  it.each([
    [{ duration: "30s" }, (d: typeof smoke) => d.duration, 30_000],
    [{ memoryMax: "256M" }, (d: typeof smoke) => d.cgroup.memory_max, 256 * 1024 ** 2],
    [{ psiLimit: "5" }, (d: typeof smoke) => d.gate.psi_limit, 5],
    [{ psiRateLimit: "2.5" }, (d: typeof smoke) => d.gate.psi_rate_limit, 2.5],
    [{ psiRateLimit: "10%" }, (d: typeof smoke) => d.gate.psi_rate_limit, 10],
    [{ slackLimit: "2s" }, (d: typeof smoke) => d.gate.slack_limit, 2000],
    [{ packedTokenLimit: "16000" }, (d: typeof smoke) => d.gate.packed_token_limit, 16000],
  ])("%j", (flags, pick, expected) => {
    const d = applyOverrides(smoke, { ...base, ...flags });
    expect(pick(d)).toBe(expected);
    expect(pick(smoke)).not.toBe(expected); // the file's own value is untouched
  });

  it.each([
    [{ duration: "soon" }, /^--duration: /],
    [{ memoryMax: "lots" }, /^--memory-max: /],
    // memory.max 0 is taken by the kernel: the worker was OOM-killed at once and up exited 0.
    [{ memoryMax: "0" }, /^--memory-max: "0" is below one page \(4096 bytes\)/],
    [{ memoryMax: "4095" }, /^--memory-max: "4095" is below one page/],
    [{ psiLimit: "-1" }, /^--psi-limit: /],
    [{ psiLimit: "150" }, /^--psi-limit: "150" is a PSI avg10/],
    [{ psiRateLimit: "150" }, /^--psi-rate-limit: /],
    [{ packedTokenLimit: "1.5" }, /^--packed-token-limit: /],
  ])("bad %j is exit 2 naming the flag", (flags, message) => {
    expect(() => applyOverrides(smoke, { ...base, ...flags })).toThrow(message);
  });

  // QA: `if (flags.psiLimit)` took "" for "no override": `--drill ""` ran smoke.yaml, `--psi-limit ""` was dropped.
  it.each([
    [{ duration: "" }, /^--duration: "" is not a duration/],
    [{ memoryMax: "" }, /^--memory-max: /],
    [{ psiLimit: "" }, /^--psi-limit: /],
    [{ psiRateLimit: "" }, /^--psi-rate-limit: /],
    [{ slackLimit: "" }, /^--slack-limit: "" is not a duration/],
    [{ packedTokenLimit: "" }, /^--packed-token-limit: /],
  ])("an empty %j is exit 2 naming the flag, not the file's value", (flags, message) => {
    expect(() => applyOverrides(smoke, { ...base, ...flags })).toThrow(UsageError);
    expect(() => applyOverrides(smoke, { ...base, ...flags })).toThrow(message);
  });

  it("every bad override is named at once", () => {
    expect(() => applyOverrides(smoke, { ...base, psiLimit: "", memoryMax: "bogus" })).toThrow(/^--memory-max: .*; --psi-limit: /);
  });

  it("--drill \"\" is exit 2 naming the flag, not the default smoke.yaml", () => {
    expect(() => resolveDrillPath("")).toThrow(UsageError);
    expect(() => resolveDrillPath("")).toThrow(/^--drill: is empty/);
    // Made absolute (QA: the state and the report kept "drills/thrash.yaml" as typed).
    expect(resolveDrillPath("x.yaml")).toBe(path.resolve("x.yaml"));
    expect(resolveDrillPath("/a/b.yaml")).toBe("/a/b.yaml");
    expect(resolveDrillPath(undefined)).toMatch(/drills\/smoke\.yaml$/);
  });

  it.each(["0s", "0ms"])("--duration %s ends the drill before any phase: exit 2 naming the flag", (duration) => {
    expect(() => applyOverrides(smoke, { ...base, duration })).toThrow(UsageError);
    expect(() => applyOverrides(smoke, { ...base, duration })).toThrow(/^--duration: "0m?s" ends the drill before its first phase starts \(at 0s\); give more than 0s$/);
  });

  it("--duration must leave the first phase inside the drill; the later ones may fall out", () => {
    const late = { ...smoke, phases: smoke.phases.map((p) => ({ ...p, at: p.at + 5000 })) };
    expect(() => applyOverrides(late, { ...base, duration: "5s" })).toThrow(/^--duration: "5s" ends the drill before its first phase starts \(at 5s\)/);
    expect(applyOverrides(late, { ...base, duration: "5001ms" }).duration).toBe(5001);
  });

  // QA: `--duration 1ms` (a typo of 1m) ran a drill that recorded nothing.
  it("--duration under a second is exit 2 naming the flag; a second is enough", () => {
    expect(() => applyOverrides(smoke, { ...base, duration: "1ms" })).toThrow(/^--duration: "1ms" is under 1s: a drill that short records nothing \(a typo of 1m\?\)$/);
    expect(applyOverrides(smoke, { ...base, duration: "1s" }).duration).toBe(1000);
  });

  it("a drill file whose duration is under a second is exit 2 naming the file and the field", () => {
    const text = tinyDrill("short", { duration: "500ms", gate: "{ interval: 1s }", phases: [["0s", pack(1)]] });
    expect(() => parseDrillFile(text, "short.yaml")).toThrow(/^short\.yaml: duration: 500ms is under 1s: a drill that short records nothing \(a typo of 1m\?\)$/);
    expect(parseDrillFile(text.replace("duration: 500ms", "duration: 1s"), "short.yaml").duration).toBe(1000);
  });

  it("a drill file with duration 0 is exit 2 naming the file and the field", () => {
    const text = readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8").replace("duration: 40s", "duration: 0s");
    expect(() => parseDrillFile(text, "zero.yaml")).toThrow(UsageError);
    expect(() => parseDrillFile(text, "zero.yaml")).toThrow(/^zero\.yaml: duration: must be more than 0/);
  });

  it("the sidecar's output is the recording the report reads", () => {
    expect(outputName("watch")).toBe("watch.jsonl");
    expect(outputName("gate")).toBe("gate.out");
  });
});

describe("a memory_max below the worker's weights: allowed (a thrash rehearsal), and said", () => {
  const MiB = 1024 ** 2;
  const drill = (memoryMax: number, weights: number) => ({ cgroup: { ...smoke.cgroup, memory_max: memoryMax }, worker: { ...smoke.worker, weights } });

  it("says nothing when the weights fit: the shipped drills, and a limit equal to the weights", () => {
    expect(weightsReclaimNote(smoke, "cgroup.memory_max")).toBeNull();
    for (const file of ["packing.yaml", "thrash.yaml"]) {
      const d = parseDrillFile(readFileSync(path.join(repoRoot, "drills", file), "utf8"), file);
      expect(weightsReclaimNote(d, "cgroup.memory_max"), file).toBeNull();
    }
    expect(weightsReclaimNote(drill(64 * MiB, 64 * MiB), "cgroup.memory_max")).toBeNull();
  });

  it("one line naming the limit, where it came from, and the weights", () => {
    expect(weightsReclaimNote(drill(256 * MiB, 512 * MiB), "cgroup.memory_max")).toBe(
      "note: cgroup.memory_max 256MiB is below worker.weights 512MiB: the worker reclaims from its first token (intended for a thrash rehearsal)",
    );
    expect(weightsReclaimNote(drill(64 * MiB - 4096, 64 * MiB), "cgroup.memory_max")).toMatch(/^note: cgroup\.memory_max .* is below worker\.weights 64\.0MiB: /);
  });

  it("an --memory-max override is named as the flag, on the limit it sets", () => {
    const d = applyOverrides(smoke, { ...base, memoryMax: "32M" });
    expect(weightsReclaimNote(d, "--memory-max")).toBe(
      "note: --memory-max 32.0MiB is below worker.weights 64.0MiB: the worker reclaims from its first token (intended for a thrash rehearsal)",
    );
  });
});

describe("--file-dir is made absolute before anything records it", () => {
  it("a relative dir resolves against the caller's directory; a bad one is exit 2 naming the flag", () => {
    const root = mkdtempSync(path.join(tmpdir(), "drill-filedir-"));
    try {
      mkdirSync(path.join(root, "files"));
      writeFileSync(path.join(root, "plain"), "");
      expect(resolveFileDir("files", root)).toBe(path.join(root, "files"));
      expect(resolveFileDir("./files/", root)).toBe(path.join(root, "files"));
      expect(resolveFileDir(path.join(root, "files"), "/")).toBe(path.join(root, "files"));
      for (const [raw, message] of [["nope", `--file-dir: ${path.join(root, "nope")} does not exist`], ["plain", `--file-dir: ${path.join(root, "plain")} is not a directory`], ["", "--file-dir: is empty"]]) {
        expect(() => resolveFileDir(raw!, root)).toThrow(UsageError);
        expect(() => resolveFileDir(raw!, root)).toThrow(message);
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

// QA: "phase 1: hog exited (code 0); outcome in hog-1.out" while hog-1.out said "outcome":"oom_killed".
describe("up's line when a phase's hog is done", () => {
  const oomDocument = `${JSON.stringify({ outcome: "oom_killed", exit: { code: null, signal: "SIGKILL" }, cg_oom_kill_before: 0, cg_oom_kill_after: 1 })}\n`;

  it("an OOM-killed hog (inject exits 0 all the same) is said OOM-killed, from the document inject wrote", () => {
    expect(hogOutcomeIn(oomDocument)).toBe("oom_killed");
    const line = hogExitLine(1, "hog-1", 0, hogOutcomeIn(oomDocument));
    expect(line).toBe("phase 1: hog OOM-killed by the cgroup's OOM killer (inject code 0); outcome in hog-1.out");
    expect(line).not.toMatch(/hog exited/);
  });

  it("the other outcomes by name; without a document (inject killed), the exit code or signal alone", () => {
    expect(hogExitLine(2, "hog-2", 0, hogOutcomeIn(`${JSON.stringify({ outcome: "packed" })}\n`))).toBe("phase 2: hog packed and held, then exited (code 0); outcome in hog-2.out");
    expect(hogExitLine(2, "hog-2", 1, "failed")).toBe("phase 2: hog failed (code 1); outcome in hog-2.out");
    expect(hogExitLine(2, "hog-2", 1, "stopped")).toBe("phase 2: hog stopped from outside, by a rollback, a teardown or a kill (inject code 1); outcome in hog-2.out");
    expect(hogOutcomeIn("")).toBeNull();
    expect(hogOutcomeIn('{"outcome":"pack')).toBeNull();
    expect(hogExitLine(3, "hog-3", null, null)).toBe("phase 3: hog exited (killed by a signal); outcome in hog-3.out");
  });
});
