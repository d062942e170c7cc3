import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { loadDrillFile, parseDrillFile } from "../../src/drill/drillFile.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { workerCommand } from "../../src/commands/worker.js";
import { UsageError } from "../../src/errors.js";
import { resolvePackOptions } from "../../src/commands/pack.run.js";
import type { RawPackOptions } from "../../src/commands/pack.js";
import { repoRoot } from "../helpers/cli.js";

const drillsDir = path.join(repoRoot, "drills");
const smoke = readFileSync(path.join(drillsDir, "smoke.yaml"), "utf8");
const packDefaults: RawPackOptions = { queue: "jobs", jobs: "8", files: "8", promptTokens: "24000", completionTokens: "256", deadline: "8s", upstreamAge: "0s", hostClass: "shared-free" };

describe("drill files", () => {
  it.each(readdirSync(drillsDir).filter((f) => f.endsWith(".yaml")))("shipped %s is valid", (file) => {
    const drill = parseDrillFile(readFileSync(path.join(drillsDir, file), "utf8"), file);
    expect(drill.phases.length).toBeGreaterThan(0);
  });

  it("the packing drill is the seed's declared workload", () => {
    const d = parseDrillFile(readFileSync(path.join(drillsDir, "packing.yaml"), "utf8"), "packing.yaml");
    expect(d.cgroup.memory_max).toBe(2 * 1024 ** 3);
    expect(d.cgroup.swap_max).toBe(0);
    const pack = d.phases[0]!.pack!;
    expect([pack.jobs, pack.files, pack.prompt_tokens, pack.deadline]).toEqual([8, 8, 24000, 8000]);
    expect(d.phases.find((p) => p.inject)?.inject).toMatchObject({ mode: "anon", size: 3 * 1024 ** 3 });
  });

  // QA: `kv_bytes_per_token: 4K` was refused while `drill worker --kv-bytes-per-token 4K` took it: one parser for both.
  it.each([["4K", 4096], ["4KiB", 4096], ["256", 256], ["0", 0], ["1M", 1024 ** 2]])("kv_bytes_per_token %s reads as the flag reads it: %i bytes", (text, bytes) => {
    const { worker } = parseDrillFile(smoke.replace("kv_bytes_per_token: 256", `kv_bytes_per_token: ${text}`), "smoke.yaml");
    expect(worker.kv_bytes_per_token).toBe(bytes);
    const flag = workerCommand(() => ({}) as never);
    expect(flag.options.find((o) => o.long === "--kv-bytes-per-token")?.flags).toMatch(/<size>/);
  });

  // One set of worker defaults: a drill file that leaves them out ran a worker
  // with no KV memory and another decode rate than `drill worker` alone.
  it("a drill file without kv_bytes_per_token, decode_tokens_per_s or prefill_tokens_per_pass gets drill worker's defaults", () => {
    const bare = smoke.replace(/^\s+(kv_bytes_per_token|decode_tokens_per_s|prefill_tokens_per_pass):.*\n/gm, "");
    expect(bare).not.toMatch(/kv_bytes_per_token|decode_tokens_per_s|prefill_tokens_per_pass/);
    const { worker } = parseDrillFile(bare, "smoke.yaml");
    const flagDefault = (flag: string) => workerCommand(() => ({}) as never).options.find((o) => o.long === flag)?.defaultValue;
    expect(worker.kv_bytes_per_token).toBe(Number(flagDefault("--kv-bytes-per-token")));
    expect(worker.decode_tokens_per_s).toBe(Number(flagDefault("--decode-tokens-per-s")));
    expect(worker.prefill_tokens_per_pass).toBe(Number(flagDefault("--prefill-tokens-per-pass")));
    expect([worker.kv_bytes_per_token, worker.decode_tokens_per_s, worker.prefill_tokens_per_pass]).toEqual([4096, 30, 2048]);
  });

  it("decode_tokens_per_s: 0 means no cap, as --decode-tokens-per-s 0 does", () => {
    expect(parseDrillFile(smoke.replace(/decode_tokens_per_s: \d+/, "decode_tokens_per_s: 0"), "smoke.yaml").worker.decode_tokens_per_s).toBe(0);
  });

  it("plain decimal numbers are read as written: 12, 12.5, .5, 0", () => {
    const d = parseDrillFile(smoke.replace("psi_limit: 10", "psi_limit: 12.5").replace("psi_rate_limit: 5", "psi_rate_limit: .5").replace("decode_tokens_per_s: 200", "decode_tokens_per_s: 0"), "x.yaml");
    expect([d.gate.psi_limit, d.gate.psi_rate_limit, d.worker.decode_tokens_per_s]).toEqual([12.5, 0.5, 0]);
    // As --psi-rate-limit takes it: `5%` (YAML text) is 5, and `150%` is still over 100.
    expect(parseDrillFile(smoke.replace("psi_rate_limit: 5", "psi_rate_limit: 5%"), "x.yaml").gate.psi_rate_limit).toBe(5);
    expect(() => parseDrillFile(smoke.replace("psi_rate_limit: 5", "psi_rate_limit: 150%"), "x.yaml")).toThrow(/^x\.yaml: gate\.psi_rate_limit: "150%" is a percentage \(0-100\)/);
  });

  // QA: pack --completion-tokens 0 was accepted and the same job in a drill file refused: one rule, the job schema's.
  it("completion_tokens takes what the job schema (and pack --completion-tokens) takes: 0 to 10000000", () => {
    const withTokens = (n: string) => smoke.replace("completion_tokens: 64", `completion_tokens: ${n}`);
    expect(parseDrillFile(withTokens("0"), "smoke.yaml").phases[0]!.pack!.completion_tokens).toBe(0);
    expect(parseDrillFile(withTokens("10000000"), "smoke.yaml").phases[0]!.pack!.completion_tokens).toBe(10_000_000);
    expect(resolvePackOptions({ ...packDefaults, completionTokens: "0" }).completionTokens).toBe(0);
    for (const bad of ["-1", "10000001", "1.5"]) {
      expect(() => parseDrillFile(withTokens(bad), "x.yaml"), bad).toThrow(/^x\.yaml: phases\.0\.pack\.completion_tokens: /);
      expect(() => resolvePackOptions({ ...packDefaults, completionTokens: bad }), bad).toThrow(/^--completion-tokens: /);
    }
  });

  // QA: prompt_tokens 20000000 in a drill file was accepted and every job it packed went to dead; pack --prompt-tokens refused it.
  it.each([
    ["prompt_tokens", "--prompt-tokens", "prompt_tokens: 24000", "promptTokens", 10_000_000],
    ["files", "--files", "files: 8,", "files", 1_000_000],
  ] as const)("%s takes what the job schema (and pack %s) takes: 1 to its cap", (field, flag, written, rawKey, max) => {
    const withCount = (n: string) => smoke.replace(written, written.replace(/\d+/, n));
    expect(parseDrillFile(withCount("1"), "smoke.yaml").phases[0]!.pack![field]).toBe(1);
    expect(parseDrillFile(withCount(String(max)), "smoke.yaml").phases[0]!.pack![field]).toBe(max);
    expect(resolvePackOptions({ ...packDefaults, [rawKey]: String(max) })[rawKey]).toBe(max);
    for (const bad of [String(max + 1), "20000000", "0", "-1", "1.5"]) {
      expect(() => parseDrillFile(withCount(bad), "x.yaml"), bad).toThrow(new RegExp(`^x\\.yaml: phases\\.0\\.pack\\.${field}: `));
      expect(() => resolvePackOptions({ ...packDefaults, [rawKey]: bad }), bad).toThrow(new RegExp(`^${flag}: `));
    }
    expect(() => parseDrillFile(withCount(String(max + 1)), "x.yaml")).toThrow(`x.yaml: phases.0.pack.${field}: must be at most ${max}, not ${max + 1}`);
  });

  // pack --upstream-age refused an age past the epoch (enqueue_ts <= 0 is a dead job); the drill file took it.
  describe("upstream_age takes what the job schema's enqueue_ts (and pack --upstream-age) takes", () => {
    const NOW = 1_000_000;
    afterEach(() => vi.useRealTimers());
    const withAge = (age: string) => smoke.replace("upstream_age: 7s", `upstream_age: ${age}`);

    it("an age up to now − 1 ms is accepted: enqueue_ts 1", () => {
      vi.useFakeTimers({ now: NOW });
      expect(parseDrillFile(withAge(`${NOW - 1}ms`), "x.yaml").phases[1]!.pack!.upstream_age).toBe(NOW - 1);
      expect(resolvePackOptions({ ...packDefaults, upstreamAge: `${NOW - 1}ms` }, NOW).upstreamAgeMs).toBe(NOW - 1);
    });

    it.each([`${NOW}ms`, "1000000h"])("%s is exit 2 naming the file, the phase and the field", (age) => {
      vi.useFakeTimers({ now: NOW });
      expect(() => parseDrillFile(withAge(age), "x.yaml")).toThrow(
        new RegExp(`^x\\.yaml: phases\\.1\\.pack\\.upstream_age: reaches back to 1970 or earlier: every job's enqueue_ts \\(now − upstream_age\\) would be -?\\d+, which the gate sends to dead`),
      );
      expect(() => resolvePackOptions({ ...packDefaults, upstreamAge: age }, NOW)).toThrow(/^--upstream-age: /);
    });
  });

  it("smoke finishes in under a minute", () => {
    expect(parseDrillFile(smoke, "smoke.yaml").duration).toBeLessThan(60_000);
  });

  it.each(["self", "/", "/drills", "drills/lab"])("cgroup.parent %s is accepted as written", (parent) => {
    const d = parseDrillFile(smoke.replace("  swap_max: 0\n", `  swap_max: 0\n  parent: "${parent}"\n`), "x.yaml");
    expect(d.cgroup.parent).toBe(parent);
  });

  it.each([
    ["not YAML", "name: [", /^x\.yaml(:\d+)?: not valid YAML/],
    ["missing duration", smoke.replace(/^duration: .*$/m, ""), /^x\.yaml: duration: /],
    ["bad size", smoke.replace("memory_max: 160M", "memory_max: 160Q"), /^x\.yaml: cgroup\.memory_max: .*not a size/],
    ["bad duration", smoke.replace("duration: 40s", "duration: forty"), /^x\.yaml: duration: .*not a duration/],
    ["unknown field", smoke.replace("cgroup:\n", "cgroup:\n  memory_maxx: 1G\n"), /^x\.yaml: cgroup\.memory_maxx: unknown key$/],
    // memory.max 0 is taken by the kernel: the worker was OOM-killed at once and up exited 0.
    ["memory_max 0", smoke.replace("memory_max: 160M", "memory_max: 0"), /^x\.yaml: cgroup\.memory_max: is below one page \(4096 bytes\)/],
    ["memory_max under a page", smoke.replace("memory_max: 160M", "memory_max: 4095"), /^x\.yaml: cgroup\.memory_max: is below one page/],
    // The hog refused it with "exited 2: bad arguments" once the drill was up.
    ["inject size past what the hog can map", smoke.replace("size: 256M", "size: 100T"), /^x\.yaml: phases\.2\.inject\.size: is more than the page toucher can map/],
    ["weights past what the worker can map", smoke.replace("weights: 64M", "weights: 100T"), /^x\.yaml: worker\.weights: is more than the page toucher can map/],
    ["bad name", smoke.replace("name: smoke", "name: ../etc"), /^x\.yaml: name: "\.\.\/etc" is not letters, digits, '_', '\.', '-'/],
    // QA: "tasks" and "memory.max" are letters and '.', yet got "name: letters, digits, '_', '.', '-' (at most 64)...":
    // the message names the value and what is wrong with it.
    ["a name that is a cgroup file", smoke.replace("name: smoke", "name: tasks"), /^x\.yaml: name: "tasks" is a cgroup interface file name \(a drill's name must be usable as a cgroup and queue name\)$/],
    ["a name like a controller file", smoke.replace("name: smoke", "name: memory.max"), /^x\.yaml: name: "memory\.max" looks like a memory interface file/],
    ["phase with both", smoke.replace("  - at: 9s\n    inject:", "  - at: 9s\n    pack: { jobs: 1, prompt_tokens: 1 }\n    inject:"), /^x\.yaml: phases\.2: a phase has exactly one/],
    ["negative tokens", smoke.replace("prompt_tokens: 24000", "prompt_tokens: -5"), /^x\.yaml: phases\.0\.pack\.prompt_tokens: /],
    ["phase after the end", smoke.replace("- at: 24s", "- at: 50s"), /^x\.yaml: phases: a phase starts at 50000ms/],
    // The --parent rules, checked before up starts anything (not blamed on --parent after Redis is up).
    ["parent with ..", smoke.replace("  swap_max: 0\n", "  swap_max: 0\n  parent: ../x\n"), /^x\.yaml: cgroup\.parent: component "\.\." of "\.\.\/x" is a relative path component$/],
    ["empty parent", smoke.replace("  swap_max: 0\n", "  swap_max: 0\n  parent: ''\n"), /^x\.yaml: cgroup\.parent: is empty/],
    // What up hands its children must pass their flag checks: a value gate or
    // watch refuses with exit 2 left a drill running without its gate (up exit 0).
    ["psi_rate_limit over 100", smoke.replace("psi_rate_limit: 5", "psi_rate_limit: 150"), /^x\.yaml: gate\.psi_rate_limit: /],
    ["a pack of more jobs than one pack pushes", smoke.replace("jobs: 3,", "jobs: 100000000,"), /^x\.yaml: phases\.0\.pack\.jobs: more than one pack pushes \(at most 1000000\)/],
    ["psi_limit over 100", smoke.replace("psi_limit: 10", "psi_limit: 150"), /^x\.yaml: gate\.psi_limit: /],
    ["gate interval under the gate's minimum", smoke.replace("interval: 1s", "interval: 10ms"), /^x\.yaml: gate\.interval: must be at least 50ms/],
    ["retry_host_class not a key name", smoke.replace("packed_token_limit: 32000", "packed_token_limit: 32000\n  retry_host_class: 'a:b'"), /^x\.yaml: gate\.retry_host_class: /],
    ["pack host_class not a key name", smoke.replace("deadline: 8s, label: packed burst", "deadline: 8s, host_class: 'a b', label: packed burst"), /^x\.yaml: phases\.0\.pack\.host_class: /],
    ["pack deadline 0s", smoke.replace("deadline: 8s, label: packed burst", "deadline: 0s, label: packed burst"), /^x\.yaml: phases\.0\.pack\.deadline: must be more than 0/],
    ["pack deadline past a job's 7 days", smoke.replace("deadline: 8s, label: packed burst", "deadline: 200h, label: packed burst"), /^x\.yaml: phases\.0\.pack\.deadline: must be at most 168h/],
    ["weights under a page", smoke.replace("weights: 64M", "weights: 100"), /^x\.yaml: worker\.weights: is less than one page/],
    ["missing section", smoke.replace(/^worker:\n( {2}.*\n)+/m, ""), /^x\.yaml: worker: missing \(required\)$/],
    ["missing field", smoke.replace("prompt_tokens: 24000, ", ""), /^x\.yaml: phases\.0\.pack\.prompt_tokens: missing \(required\)$/],
    ["not a mapping", "- just\n- a list\n", /^x\.yaml: not a drill: a YAML mapping/],
    ["inject size under a page", smoke.replace("size: 256M", "size: 0"), /^x\.yaml: phases\.2\.inject\.size: is less than one page/],
    // YAML reads these as numbers: `psi_limit: 0x10` was a limit of 16 nobody wrote.
    ["hex psi_limit", smoke.replace("psi_limit: 10", "psi_limit: 0x10"), /^x\.yaml: gate\.psi_limit: "0x10" is not a plain decimal number \(write e\.g\. 10 or 2\.5; a size or a duration takes its unit: 512M, 8s\)$/],
    ["exponent psi_rate_limit", smoke.replace("psi_rate_limit: 5", "psi_rate_limit: 1e1"), /^x\.yaml: gate\.psi_rate_limit: "1e1" is not a plain decimal number/],
    ["octal jobs", smoke.replace("jobs: 3,", "jobs: 0o3,"), /^x\.yaml: phases\.0\.pack\.jobs: "0o3" is not a plain decimal number/],
    ["hex memory_max in bytes", smoke.replace("memory_max: 160M", "memory_max: 0x10000000"), /^x\.yaml: cgroup\.memory_max: "0x10000000" is not a plain decimal number/],
    ["infinite decode rate", smoke.replace("decode_tokens_per_s: 200", "decode_tokens_per_s: .inf"), /^x\.yaml: worker\.decode_tokens_per_s: "\.inf" is not a plain decimal number/],
    ["trailing point", smoke.replace("kv_bytes_per_token: 256", "kv_bytes_per_token: 256."), /^x\.yaml: worker\.kv_bytes_per_token: "256\." is not a plain decimal number/],
    // Was zod's bare "Invalid input", and " 128 M " passed as 128M while --memory-max " 5 " style typos are exit 2.
    ["fractional bytes", smoke.replace("memory_max: 160M", "memory_max: 134217728.5"), /^x\.yaml: cgroup\.memory_max: "134217728\.5" is not a whole number of bytes$/],
    ["negative bytes", smoke.replace("memory_max: 160M", "memory_max: -1"), /^x\.yaml: cgroup\.memory_max: "-1" is not a size/],
    // QA: a bare number got zod's "expected string, received number"; the flag's reason says what to write.
    ["bare number for a duration", smoke.replace(/^duration: .*$/m, "duration: 20"), /^x\.yaml: duration: "20" is not a duration \(use e\.g\. 8s, 1500ms, 10m\)$/],
    // QA: zod's own words, which did not say what the key takes ("Invalid input", "expected int, received number",
    // "Too small: expected array to have >=1 items", "received Buffer"): the file's words from one error map.
    ["a null size", smoke.replace("swap_max: 0", "swap_max: ~"), /^x\.yaml: cgroup\.swap_max: null is not a size \(use e\.g\. 0, 512M, 2G\)$/],
    ["a fractional count", smoke.replace("jobs: 3,", "jobs: 2.5,"), /^x\.yaml: phases\.0\.pack\.jobs: 2\.5 is not a whole number$/],
    ["no phases", smoke.replace(/^phases:\n[\s\S]*$/m, "phases: []\n"), /^x\.yaml: phases: at least one phase \(a pack or an inject\)$/],
    ["a binary duration", smoke.replace(/^duration: .*$/m, "duration: !!binary aGVsbG8="), /^x\.yaml: duration: binary data is not a duration \(use e\.g\. 8s, 1500ms, 10m\)$/],
    ["a null duration", smoke.replace(/^duration: .*$/m, "duration: ~"), /^x\.yaml: duration: null is not a duration/],
    ["a mapping for a percentage", smoke.replace("psi_rate_limit: 5", "psi_rate_limit: { a: 1 }"), /^x\.yaml: gate\.psi_rate_limit: a mapping is not a percentage \(use e\.g\. 10 or 10%\)$/],
    ["text for a number", smoke.replace("psi_limit: 10", "psi_limit: ten"), /^x\.yaml: gate\.psi_limit: takes a number, not "ten"$/],
    ["a negative number", smoke.replace("decode_tokens_per_s: 200", "decode_tokens_per_s: -1"), /^x\.yaml: worker\.decode_tokens_per_s: must be at least 0, not -1$/],
    // A size, as --kv-bytes-per-token reads it.
    ["a negative kv_bytes_per_token", smoke.replace("kv_bytes_per_token: 256", "kv_bytes_per_token: -1"), /^x\.yaml: worker\.kv_bytes_per_token: "-1" is not a size/],
    ["a rate of 0", smoke.replace("deadline: 8s, rate: 1, label: jobs during reclaim }\n  - at: 24s", "deadline: 8s, rate: 0, label: jobs during reclaim }\n  - at: 24s"), /^x\.yaml: phases\.3\.pack\.rate: must be more than 0, not 0$/],
    ["a psi_limit over 100", smoke.replace("psi_limit: 10", "psi_limit: 150"), /^x\.yaml: gate\.psi_limit: must be at most 100, not 150$/],
    ["an unknown inject mode", smoke.replace("mode: thrash", "mode: foo"), /^x\.yaml: phases\.2\.inject\.mode: takes "anon" or "thrash", not "foo"$/],
    ["a null section", smoke.replace(/^cgroup:\n( {2}.*\n)+/m, "cgroup: ~\n"), /^x\.yaml: cgroup: takes a mapping, not null$/],
    ["a number for the name", smoke.replace("name: smoke", "name: 5"), /^x\.yaml: name: takes text, not 5$/],
    // QA: "(0 is not \"no limit\")" on a value of 160: a size without a unit is bytes.
    ["memory_max 160 in bytes", smoke.replace("memory_max: 160M", "memory_max: !!int 160"), /^x\.yaml: cgroup\.memory_max: is below one page \(4096 bytes\): every task in the cgroup would be OOM-killed at its first page \(a size without a unit is bytes: write 160M for MiB\)$/],
    ["size with spaces", smoke.replace("memory_max: 160M", 'memory_max: " 128 M "'), /^x\.yaml: cgroup\.memory_max: " 128 M " is not a size/],
    ["parent through an interface file", smoke.replace("  swap_max: 0\n", "  swap_max: 0\n  parent: /drills/memory.max\n"), /^x\.yaml: cgroup\.parent: component "memory\.max"/],
  ])("%s is exit 2 naming file and field", (_n, text, message) => {
    try {
      parseDrillFile(text, "x.yaml");
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(message);
    }
  });
});

describe("drill file errors: every problem, each named", () => {
  function message(text: string, limits?: Parameters<typeof parseDrillFile>[2]): string {
    try {
      parseDrillFile(text, "x.yaml", limits);
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      return (err as Error).message;
    }
    return expect.unreachable();
  }

  // QA: a one-line `name: [unclosed` file was "x.yaml:2: … at line 2, column 1": yaml's end of input, one past the last line.
  it.each([
    ["a one-line file ending in a newline", "name: [unclosed\n", 1],
    ["trailing blank lines", "name: ok\nphases: [unclosed\n\n  \n", 2],
    ["CRLF line ends", "name: ok\r\nphases: [unclosed\r\n", 2],
  ])("YAML that ends unclosed (%s) points at the file's last line with text", (_n, text, line) => {
    expect(message(text)).toBe(`x.yaml:${line}: not valid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at the end of the file (line ${line})`);
  });

  it.each([
    ["an error inside the file", "a: b: c\nname: x\n", "x.yaml:1: not valid YAML: Nested mappings are not allowed in compact mappings at line 1, column 4"],
    ["the end of input on the last line (no newline)", "name: [unclosed", "x.yaml:1: not valid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at line 1, column 16"],
  ])("YAML errors within the file keep yaml's line and message (%s)", (_n, text, want) => {
    expect(message(text)).toBe(want);
  });

  it("lists every problem, not only the first", () => {
    const text = smoke
      .replace("memory_max: 160M", "memory_max: 0")
      .replace(/^worker:\n( {2}.*\n)+/m, "")
      .replace("prompt_tokens: 24000", "prompt_tokns: 24000")
      .replace("size: 256M", "size: 100T");
    expect(message(text).split("\n")).toEqual([
      "x.yaml: 5 problems:",
      '  cgroup.memory_max: is below one page (4096 bytes): every task in the cgroup would be OOM-killed at its first page (0 is not "no limit")',
      "  worker: missing (required)",
      "  phases.0.pack.prompt_tokens: missing (required)",
      "  phases.0.pack.prompt_tokns: unknown key (did you mean prompt_tokens?)",
      "  phases.2.inject.size: is more than the page toucher can map (fewer than 2^32 pages: under 16TiB)",
    ]);
    expect(message(text)).not.toMatch(/expected object|received undefined/);
  });

  it("a number YAML read from 0x10 or 1e1 is listed with the other problems", () => {
    const text = smoke.replace("psi_limit: 10", "psi_limit: 0x10").replace("prompt_tokens: 24000", "prompt_tokens: 2.4e4").replace("memory_max: 160M", "memory_max: 0");
    expect(message(text).split("\n")).toEqual([
      "x.yaml: 3 problems:",
      '  gate.psi_limit: "0x10" is not a plain decimal number (write e.g. 10 or 2.5; a size or a duration takes its unit: 512M, 8s)',
      '  phases.0.pack.prompt_tokens: "2.4e4" is not a plain decimal number (write e.g. 10 or 2.5; a size or a duration takes its unit: 512M, 8s)',
      '  cgroup.memory_max: is below one page (4096 bytes): every task in the cgroup would be OOM-killed at its first page (0 is not "no limit")',
    ]);
  });

  it("a typo is an unknown key with the key it most likely meant, at every level", () => {
    expect(message(smoke.replace("prompt_tokens: 24000", "prompt_tokns: 24000"))).toContain("phases.0.pack.prompt_tokns: unknown key (did you mean prompt_tokens?)");
    expect(message(smoke.replace("psi_rate_limit: 5", "psi_rate_limt: 5"))).toBe("x.yaml: gate.psi_rate_limt: unknown key (did you mean psi_rate_limit?)");
    expect(message(smoke.replace("duration: 40s", "duration: 40s\ndurration: 40s"))).toBe("x.yaml: durration: unknown key");
    expect(message(smoke.replace("duration: 40s", "duraton: 40s"))).toContain("duraton: unknown key (did you mean duration?)");
    expect(message(smoke.replace("size: 256M", "sise: 256M"))).toContain("phases.2.inject.sise: unknown key (did you mean size?)");
    expect(message(smoke.replace("name: smoke", "name: smoke\ncolour: red"))).toBe("x.yaml: colour: unknown key");
  });

  const GiB = 1024 ** 3;
  it("an inject size or weights over this host's RAM + swap is refused; up to it is accepted", () => {
    const host = { hostMemoryBytes: 2 * GiB };
    expect(message(smoke.replace("size: 256M", "size: 3G"), host)).toBe("x.yaml: phases.2.inject.size: is more than this host's RAM + swap (2.0GiB): the host could never hold it");
    expect(message(smoke.replace("weights: 64M", "weights: 3G"), host)).toBe("x.yaml: worker.weights: is more than this host's RAM + swap (2.0GiB): the host could never hold it");
    expect(parseDrillFile(smoke.replace("size: 256M", "size: 2G"), "x.yaml", host).phases[2]!.inject!.size).toBe(2 * GiB);
    // Unknown host memory: only the page toucher's own bound.
    expect(parseDrillFile(smoke.replace("size: 256M", "size: 3G"), "x.yaml", { hostMemoryBytes: null }).phases[2]!.inject!.size).toBe(3 * GiB);
  });

  it("loadDrillFile bounds sizes by MemTotal + SwapTotal under --procfs", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "drill-cli-meminfo-"));
    try {
      writeFileSync(path.join(dir, "meminfo"), "MemTotal:        1048576 kB\nMemFree:          524288 kB\nSwapTotal:        1048576 kB\n");
      const file = path.join(dir, "big.yaml");
      writeFileSync(file, smoke.replace("size: 256M", "size: 3G"));
      expect(() => loadDrillFile(file, new HostRoots(dir, "/sys"))).toThrow(/phases\.2\.inject\.size: is more than this host's RAM \+ swap \(2\.0GiB\)/);
      writeFileSync(file, smoke.replace("size: 256M", "size: 2G"));
      expect(loadDrillFile(file, new HostRoots(dir, "/sys")).phases[2]!.inject!.size).toBe(2 * GiB);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
