import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, runDrill } from "../helpers/cli.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { freePort, startRedisServer, type RedisServer } from "../helpers/redisServer.js";
import { writeWatchTree } from "../helpers/watchTree.js";

/**
 * Output for the operator's terminal, run as an operator would: under a
 * locale that is not UTF-8 (LANG=C, LC_ALL=POSIX) not one byte outside ASCII
 * (box drawing, trend bars, arrows), and doctor's table as wide as the
 * terminal (`script` gives it a pty, sized with stty), or piped COLUMNS
 * (a positive integer) or 80 columns.
 */

/** Every locale variable unset (each test sets the ones it is about): the runner's own locale does not leak in. */
const NO_LOCALE = { LANG: undefined, LC_ALL: undefined, LC_CTYPE: undefined };
// eslint-disable-next-line no-control-regex
const ESCAPES = /\x1b\[[0-9;?]*[A-Za-z]/g;
const NOT_ASCII = /[\u0080-\u{10ffff}]/u;

let root = "";
let redisUrl = "";
let server: RedisServer;
beforeAll(async () => {
  root = mkdtempSync(path.join(tmpdir(), "drill-ascii-"));
  // avg10 over 1.00: doctor's host PSI detail says `≥ 1.00`.
  writeWatchTree(root, "some avg10=17.41 avg60=0.05 avg300=0.01 total=5000\nfull avg10=16.16 avg60=0.00 avg300=0.00 total=10\n");
  redisUrl = `redis://127.0.0.1:${await freePort()}`; // nothing listens: doctor's redis row fails, watch says so
  server = await startRedisServer();
}, 60_000);
afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
const hostArgs = (): string[] => ["--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl];
const doctorArgs = (): string[] => [...hostArgs(), "doctor", "--file-dir", root];

let runs = 0;
/**
 * drill on a pty `columns` wide: what the terminal got on stdout, with the
 * pty's \r\n as \n, and stderr apart (an error line is one line, for grep,
 * and the terminal wraps it, as any command's).
 */
async function onTerminal(args: string[], locale: Record<string, string | undefined>, columns: number): Promise<{ exitCode: number | undefined; out: string; err: string }> {
  const errFile = path.join(root, `stderr-${++runs}`);
  const shell = `stty cols ${columns} rows 50; ${["node", drillBin, ...args].map(quote).join(" ")} 2>${quote(errFile)}`;
  const r = await execa("script", ["-qfec", shell, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", NO_COLOR: "1", ...NO_LOCALE, ...locale } });
  return { exitCode: r.exitCode, out: String(r.stdout).replaceAll("\r\n", "\n"), err: readFileSync(errFile, "utf8") };
}

const lines = (text: string): string[] => text.replace(ESCAPES, "").split("\n");
const widest = (text: string): number => Math.max(...lines(text).map((l) => [...l].length));

describe("doctor", () => {
  // QA: at 40 columns the table was 64 wide, box drawing under LANG=C.
  it.each([{ LANG: "C" }, { LC_ALL: "POSIX", LANG: "C.UTF-8" }, { LC_CTYPE: "C", LANG: "en_US.UTF-8" }])("%j on a 40-column terminal: ASCII only, no line wider than 40", async (locale) => {
    const r = await onTerminal(doctorArgs(), locale, 40);
    expect(r.exitCode, r.out).toBe(3); // the redis row fails
    expect(r.out).toMatch(/^\+-+\+-+\+$/m);
    expect(r.out).toMatch(/^\| host PSI +\| warn +\|$/m);
    expect(r.out + r.err).not.toMatch(NOT_ASCII);
    expect(r.err).toContain("drill: doctor refused: ");
    expect(widest(r.out), r.out).toBeLessThanOrEqual(40);
  });

  it("UTF-8 on a 40-column terminal: the box drawing, still 40 wide", async () => {
    const r = await onTerminal(doctorArgs(), { LANG: "C.UTF-8" }, 40);
    expect(r.out).toMatch(/^┌─+┬─+┐$/m);
    expect(r.out).toContain("already ≥");
    expect(widest(r.out), r.out).toBeLessThanOrEqual(40);
  });

  // QA: piped, the table was 100 columns wide.
  it.each([
    ["LANG=C", { LANG: "C" }, /^\+-+\+/],
    ["no locale variable at all: UTF-8", {}, /^┌─+┬/],
  ])("piped, %s: 80 columns", async (_name, locale, border) => {
    const r = await runDrill(doctorArgs(), { env: { ...NO_LOCALE, ...locale, COLUMNS: undefined } });
    expect(r.stdout.split("\n")[0]).toMatch(border);
    expect(widest(r.stdout), r.stdout).toBe(80);
    if ("LANG" in locale) expect(r.stdout + r.stderr).not.toMatch(NOT_ASCII);
  });

  it.each([
    ["120", 120],
    ["0", 80],
    ["wide", 80],
  ])("piped, COLUMNS=%s: %i columns", async (columns, width) => {
    const r = await runDrill(doctorArgs(), { env: { ...NO_LOCALE, LANG: "C", COLUMNS: columns } });
    expect(r.stdout.split("\n")[0]).toMatch(/^\+-+\+/);
    expect(widest(r.stdout), r.stdout).toBe(width);
  });

  it("--json under LANG=C is the same document as under UTF-8: JSON is data, not terminal text", async () => {
    const ascii = await runDrill([...doctorArgs(), "--json"], { env: { ...NO_LOCALE, LANG: "C" } });
    const utf8 = await runDrill([...doctorArgs(), "--json"], { env: { ...NO_LOCALE, LANG: "C.UTF-8" } });
    const doc = JSON.parse(ascii.stdout) as { checks: Array<{ name: string; detail: string }> };
    expect(doc.checks.find((c) => c.name === "host PSI")?.detail).toContain("≥ 1.00");
    const withoutProbes = (text: string) => text.replace(/drill-doctor-\d+/g, "");
    expect(withoutProbes(ascii.stdout)).toBe(withoutProbes(utf8.stdout));
  });
});

describe("watch's live view", () => {
  it.each([{ LANG: "C" }, { LC_ALL: "POSIX", LANG: "C.UTF-8" }])("%j: ASCII trends and text, every byte ASCII", async (locale) => {
    const r = await onTerminal([...hostArgs(), "watch", "--interval", "100ms", "--count", "6"], locale, 80);
    expect(r.exitCode, r.out).toBe(0);
    expect(r.out).toMatch(/^psi host .*[_.:\-=+*#]{6}$/m);
    expect(r.out + r.err).not.toMatch(NOT_ASCII);
  });

  it("UTF-8: the Unicode bars, as before", async () => {
    const r = await onTerminal([...hostArgs(), "watch", "--interval", "100ms", "--count", "6"], { LANG: "en_US.UTF-8" }, 80);
    expect(r.exitCode, r.out).toBe(0);
    expect(r.out).toMatch(/^psi host .*[▁▂▃▄▅▆▇█]{6}$/m);
  });
});

describe("report", () => {
  it("text under LANG=C: the window's arrow spelled ->, every byte ASCII; UTF-8 keeps the →", async () => {
    const args = ["--state-dir", path.join(root, "state"), "--redis", server.url, "report", "--queue", "asciiq"];
    const ascii = await runDrill(args, { env: { ...NO_LOCALE, LANG: "C" } });
    expect(ascii.exitCode, ascii.stderr).toBe(0);
    expect(ascii.stdout).toMatch(/^ {2}window: .*Z -> \S+Z/m);
    expect(ascii.stdout + ascii.stderr).not.toMatch(NOT_ASCII);
    const utf8 = await runDrill(args, { env: { ...NO_LOCALE, LANG: "C.UTF-8" } });
    expect(utf8.stdout).toMatch(/^ {2}window: .*Z → \S+Z/m);
  });
});

// QA: under LANG=C the rollback hint for a drill in another state dir printed
// `--state-dir '/tmp/x-?'`, which pasted names a dir that does not exist.
describe("a command to paste, naming a path that is not ASCII", () => {
  it("LANG=C: the hint spells the path as $'...' with its bytes escaped, and bash reads back the path itself; prose keeps ?", async () => {
    const stateDir = path.join(root, "state-é");
    writeFakeDrill(stateDir, "elsw", "eq", "redis://127.0.0.1:1", { runId: "elsw-20260101000000-abcdef" });
    const proc = path.join(root, "proc-paste", "4244");
    mkdirSync(proc, { recursive: true });
    writeFileSync(path.join(proc, "stat"), readFileSync("/proc/self/stat", "utf8").replace(/^\d+ /, "4244 "));
    writeFileSync(path.join(proc, "environ"), `DRILL_RUN_ID=elsw-20260101000000-abcdef\0DRILL_STATE_DIR=${stateDir}\0`);
    const args = ["--state-dir", path.join(root, "empty"), "--procfs", path.join(root, "proc-paste"), "rollback"];

    const ascii = await runDrill(args, { env: { ...NO_LOCALE, LANG: "C" } });
    expect(ascii.exitCode, ascii.stdout + ascii.stderr).toBe(4);
    expect(ascii.stdout + ascii.stderr).not.toMatch(NOT_ASCII);
    expect(ascii.stdout).toContain("(state dir " + path.join(root, "state-?") + ")");
    const hint = /roll it back: (drill --state-dir (\S+) rollback --name elsw)$/m.exec(ascii.stdout);
    expect(hint, ascii.stdout).not.toBeNull();
    expect(hint![2]).toMatch(/^\$'.*\\303\\251'$/);
    const pasted = await execa("bash", ["-c", `printf %s ${hint![2]}`], { encoding: "buffer" });
    expect(Buffer.from(pasted.stdout).toString("utf8")).toBe(stateDir);

    // UTF-8: the path as it is; --json under LANG=C too (a document, not terminal text).
    const utf8 = await runDrill(args, { env: { ...NO_LOCALE, LANG: "C.UTF-8" } });
    expect(utf8.stdout).toContain(`roll it back: drill --state-dir ${stateDir} rollback --name elsw`.replace(stateDir, `'${stateDir}'`));
    const json = await runDrill(["--json", ...args], { env: { ...NO_LOCALE, LANG: "C" } });
    expect((JSON.parse(json.stdout) as { running: Array<{ hint: string }> }).running[0]?.hint).toBe(`drill --state-dir '${stateDir}' rollback --name elsw`);
  });

  // Node reads argv and the environment as UTF-8: an invalid byte became U+FFFD, and drill acted on
  // (and named, in every hint) /tmp/x\357\277\275, another dir than the one typed.
  it.each([{ LANG: "C" }, { LANG: "C.UTF-8" }])("%j: a --state-dir (or DRILL_STATE_DIR) with bytes that are not UTF-8 is exit 2, nothing made", async (locale) => {
    const typed = `$'${path.join(root, "bad-\\377")}'`;
    const replaced = path.join(root, "bad-\ufffd");
    for (const how of [`--state-dir ${typed} rollback`, `rollback`]) {
      const env = { FORCE_COLOR: "0", ...NO_LOCALE, ...locale, ...(how === "rollback" ? {} : { DRILL_STATE_DIR: undefined }) };
      const shell = how === "rollback" ? `DRILL_STATE_DIR=${typed} exec node ${quote(drillBin)} rollback` : `exec node ${quote(drillBin)} ${how}`;
      const r = await execa("bash", ["-c", shell], { reject: false, timeout: 30_000, env });
      expect(r.exitCode, r.stdout + r.stderr).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^drill: (--state-dir|DRILL_STATE_DIR): .* holds bytes that are not UTF-8`));
      expect(existsSync(replaced)).toBe(false);
    }
  });
});
