import { copyFileSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeFakeHost, type FakeHost } from "../helpers/cgroupFixtures.js";
import { drillBin, repoRoot } from "../helpers/cli.js";

/**
 * Node decodes argv as UTF-8, each byte that is not as U+FFFD: `--name
 * $'bad\xff'` made a cgroup `bad\u{fffd}`, `--record $'/tmp/x\xffy.jsonl'`
 * appended to another file, `--drill` read another drill file (QA). Every
 * flag holding such a byte is exit 2, naming the flag, before anything is
 * made. The shell passes the raw byte (`$'\xff'`), as an operator's would.
 */
describe("a flag holding bytes that are not UTF-8: exit 2 naming the flag, nothing made", () => {
  let host: FakeHost;
  /** What drill would have acted on instead: each named with U+FFFD where the byte was, and there. */
  let replacedDir = "";
  beforeAll(() => {
    host = makeFakeHost("v2");
    replacedDir = path.join(host.root, "files-\ufffd");
    mkdirSync(replacedDir);
    copyFileSync(path.join(repoRoot, "drills", "smoke.yaml"), path.join(host.root, "drill-\ufffd.yaml"));
  });
  afterAll(() => host.cleanup());

  const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
  /** `$'@/name'`: bash's `$'…'`, its `\xff` the raw byte, `@` the fake host's root (known once it is made). */
  const underRoot = (args: string): string => args.replaceAll("$'@/", () => `$'${host.root.replaceAll("'", "\\'")}/`);
  // No Redis answers on port 1: nothing of a test host's (never 6379) is reached, before the fix or after.
  const run = (args: string) =>
    execa("bash", ["-c", `exec node ${quote(drillBin)} --sysfs ${quote(host.sysfs)} --procfs ${quote(host.procfs)} --state-dir ${quote(host.stateDir)} --redis redis://127.0.0.1:1 ${underRoot(args)}`], {
      reject: false,
      timeout: 30_000,
      env: { FORCE_COLOR: "0", NO_COLOR: "1", LANG: "C.UTF-8" },
    });

  it.each([
    ["--name", "cgroup setup", `cgroup setup --parent self --name $'bad\\xff'`],
    ["--parent", "cgroup setup", `cgroup setup --parent $'drills\\xff' --name utf8check`],
    ["--record", "watch", `watch --once --interval 10ms --record $'@/rec-\\xff.jsonl'`],
    ["--drill", "up", `up --parent self --name utf8check --drill $'@/drill-\\xff.yaml'`],
    ["--file-dir", "up", `up --parent self --name utf8check --file-dir $'@/files-\\xff'`],
    ["--file-dir", "inject", `inject --parent self --name utf8check --mode thrash --size 1M --file-dir $'@/files-\\xff'`],
    ["--file-dir", "worker", `worker --parent self --name utf8check --max-jobs 1 --file-dir $'@/files-\\xff'`],
    ["--weights-dir", "worker", `worker --parent self --name utf8check --max-jobs 1 --weights-dir $'@/files-\\xff'`],
    ["--name", "rollback", `rollback --name $'smoke\\xff'`],
    ["--queue", "pack", `pack --jobs 1 --queue $'jobs\\xff'`],
  ])("%s of %s", async (flag, _command, args) => {
    const r = await run(args);
    expect(r.stderr).toMatch(new RegExp(`^drill: ${flag}: .* is not valid UTF-8`));
    expect(r.exitCode, r.stderr).toBe(2);
    // Nothing made: no state dir, no cgroup, no recording, no file in the dir the byte would have named.
    expect(existsSync(host.stateDir)).toBe(false);
    expect(readdirSync(path.join(host.cgroupRoot, "process_api", "abc")).filter((f) => !f.includes("."))).toEqual([]);
    expect(existsSync(path.join(host.root, "rec-\ufffd.jsonl"))).toBe(false);
    expect(readdirSync(replacedDir)).toEqual([]);
  });

  it("--redis (and DRILL_REDIS_URL) with a password: named with the password masked, as everywhere drill shows a URL", async () => {
    const typed = await run(`--redis $'redis://:s3cret@127.0.0.1:1/0\\xff' pack --jobs 1`);
    expect(typed.exitCode, typed.stderr).toBe(2);
    expect(typed.stderr).toMatch(/^drill: --redis: redis:\/\/:\*\*\*@127\.0\.0\.1:1\/0.* is not valid UTF-8/);
    const fromEnv = await execa("bash", ["-c", `DRILL_REDIS_URL=$'redis://:s3cret@127.0.0.1:1/0\\xff' exec node ${quote(drillBin)} --state-dir ${quote(host.stateDir)} pack --jobs 1`], {
      reject: false,
      timeout: 30_000,
      env: { FORCE_COLOR: "0", NO_COLOR: "1", LANG: "C.UTF-8" },
    });
    expect(fromEnv.exitCode, fromEnv.stderr).toBe(2);
    expect(fromEnv.stderr).toMatch(/^drill: DRILL_REDIS_URL: redis:\/\/:\*\*\*@127\.0\.0\.1:1\/0.* is not valid UTF-8/);
    for (const r of [typed, fromEnv]) expect(r.stderr).not.toContain("s3cret");
  });
});
