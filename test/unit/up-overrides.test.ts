import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { applyOverrides } from "../../src/commands/up.js";
import { parseDrillFile } from "../../src/drill/drillFile.js";
import { outputName } from "../../src/drill/up.js";
import { repoRoot } from "../helpers/cli.js";

const smoke = parseDrillFile(readFileSync(path.join(repoRoot, "drills", "smoke.yaml"), "utf8"), "smoke.yaml");
const base = { detach: false, name: "infer", queue: "jobs", fileDir: "/var/tmp" };

describe("drill up flags override the drill file (rewrite the thresholds, not the story)", () => {
  it.each([
    [{ duration: "30s" }, (d: typeof smoke) => d.duration, 30_000],
    [{ memoryMax: "256M" }, (d: typeof smoke) => d.cgroup.memory_max, 256 * 1024 ** 2],
    [{ psiLimit: "5" }, (d: typeof smoke) => d.gate.psi_limit, 5],
    [{ psiRateLimit: "2.5" }, (d: typeof smoke) => d.gate.psi_rate_limit, 2.5],
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
    [{ psiLimit: "-1" }, /^--psi-limit: /],
    [{ packedTokenLimit: "1.5" }, /^--packed-token-limit: /],
  ])("bad %j is exit 2 naming the flag", (flags, message) => {
    expect(() => applyOverrides(smoke, { ...base, ...flags })).toThrow(message);
  });

  it("the sidecar's output is the recording the report reads", () => {
    expect(outputName("watch")).toBe("watch.jsonl");
    expect(outputName("gate")).toBe("gate.out");
  });
});
