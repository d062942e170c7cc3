import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statFieldsAfterComm } from "../../src/host/process.js";
import { drillBin } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";
import { writeWatchTree } from "../helpers/watchTree.js";

/**
 * The live view on a real terminal: `script` gives drill a pty (stdout and
 * stdin both terminals), sized with stty, and forwards what the test writes
 * to its stdin as keys.
 */

const write = (file: string, text: string) => {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
};

let root = "";
let redisUrl = "";
beforeAll(async () => {
  root = mkdtempSync(path.join(tmpdir(), "drill-watch-tty-"));
  writeWatchTree(root, "some avg10=17.41 avg60=0.05 avg300=0.01 total=5000\nfull avg10=16.16 avg60=0.00 avg300=0.00 total=10\n");
  redisUrl = `redis://127.0.0.1:${await freePort()}`; // nothing listens: not what this file is about
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;

/** drill watch on a pty of `size`; sends `keys` once the first frame is out; the shell then prints the tty's icanon flag. */
async function onTerminal(keys: string, size = { columns: 80, rows: 24 }) {
  const drill = ["node", drillBin, "--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl, "watch", "--interval", "100ms"];
  const shell = `stty cols ${size.columns} rows ${size.rows}; ${drill.map(quote).join(" ")}; rc=$?; echo; echo "mode $(stty -a | grep -o -- '-\\?icanon')"; exit $rc`;
  const child = execa("script", ["-qfec", shell, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
  let out = "";
  let sent = false;
  child.stdout!.on("data", (chunk: Buffer) => {
    out += chunk.toString("utf8");
    // After a few frames: the view is being redrawn in place, and the keyboard is being read.
    if (!sent && out.split("drill watch").length > 4) {
      sent = true;
      child.stdin!.write(keys);
    }
  });
  const r = await child;
  return { exitCode: r.exitCode, out };
}

describe("drill watch on a terminal", () => {
  // QA 17: on a TTY `q` did nothing; only Ctrl-C (exit 130) left the view.
  it("q quits the view cleanly: exit 0, no interrupt message, the terminal back in canonical mode", async () => {
    const r = await onTerminal("q");
    expect(r.exitCode, r.out).toBe(0);
    expect(r.out).not.toContain("interrupted");
    expect(r.out).toMatch(/mode icanon/);
  });

  // QA AB 8: a terminal that cannot move its cursor (an editor's shell buffer) got colours and redraws as text.
  it("TERM=dumb: plain lines, one per sample, no escape code", async () => {
    const drill = ["node", drillBin, "--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl, "watch", "--interval", "100ms", "--count", "3"];
    const r = await execa("script", ["-qfec", drill.map(quote).join(" "), "/dev/null"], { reject: false, timeout: 30_000, env: { TERM: "dumb", FORCE_COLOR: undefined, NO_COLOR: undefined } });
    expect(r.exitCode, r.stdout).toBe(0);
    expect(r.stdout).not.toContain("\x1b");
    expect(r.stdout.split("\n").filter((line) => line.startsWith("20")), r.stdout).toHaveLength(3);
  });

  it("Ctrl-C is still an interrupt: exit 130", async () => {
    const r = await onTerminal("\x03");
    expect(r.exitCode, r.out).toBe(130);
    expect(r.out).toContain("interrupted by SIGINT");
    expect(r.out).toMatch(/mode icanon/);
  });

  // Raw mode turns the terminal's own Ctrl-\ off, so drill sends SIGQUIT itself;
  // its default action skipped every cleanup and left the shell without echo.
  it("Ctrl-\\ quits hard (SIGQUIT, 131) and the terminal is back in canonical mode", async () => {
    const r = await onTerminal("\x1c");
    expect(r.exitCode, r.out).toBe(131);
    expect(r.out).toMatch(/mode icanon/);
  });

  // Raw mode turns the terminal's own Ctrl-Z off too: it did nothing, and the
  // operator could not suspend the view to use the shell.
  it("Ctrl-Z suspends it with the terminal back in canonical mode; `fg` redraws it, and q and the rates still work", async () => {
    // Its own /proc: the PSI total moves while drill is stopped.
    const proc = path.join(root, "proc-tstp");
    cpSync(path.join(root, "proc"), proc, { recursive: true });
    const drill = ["node", drillBin, "--procfs", proc, "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl, "watch", "--interval", "100ms"];
    const icanon = "$(stty -a | grep -o -- '-\\?icanon')";
    // A shell with job control, as an operator's: the stopped job gives it the terminal back, `fg` continues it (SIGCONT).
    const job = `set -m; stty cols 80 rows 24; ${drill.map(quote).join(" ")}; echo "suspended rc=$? pid=$(jobs -p) mode ${icanon}"; read -r go; fg >/dev/null; rc=$?; echo; echo "mode ${icanon}"; exit $rc`;
    const child = execa("script", ["-qfec", `bash -c ${quote(job)}`, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    let out = "";
    const ended = child.then(() => undefined);
    /** The first match of `pattern` in the output from `from` on; fails (not hangs) if the shell ends first. */
    const until = (pattern: RegExp, from = 0): Promise<RegExpExecArray> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          const m = pattern.exec(out.slice(from));
          if (m) {
            child.stdout!.off("data", check);
            resolve(m);
          }
        };
        child.stdout!.on("data", check);
        check();
        void ended.then(() => reject(new Error(`no ${pattern} before the shell ended:\n${out}`)));
      });
    child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));

    const state = (p: number): string | undefined => statFieldsAfterComm(readFileSync(`/proc/${p}/stat`, "utf8"))?.[0];
    let pid = 0;
    let done = false;
    try {
      await until(/(?:drill watch[^]*?){4}/); // a few frames: the view is redrawn in place and the keyboard read
      child.stdin!.write("\x1a");
      const suspended = await until(/suspended rc=(\d+) pid=(\d+) mode (\S+)/);
      const stoppedAt = Date.now();
      expect(suspended[1], out).toBe("148"); // 128 + SIGTSTP, as the shell reports any program stopped by Ctrl-Z
      pid = Number(suspended[2]);
      expect(state(pid), "state in /proc/<pid>/stat").toBe("T");
      expect(suspended[3], "the shell's terminal while drill is stopped").toBe("icanon");

      // 500 ms of stall while stopped for at least 1 s: the first sample after `fg`
      // spans the stop, so its rate is at most 50 %, not 500 ms over one 100 ms interval.
      write(path.join(proc, "pressure", "memory"), "some avg10=17.41 avg60=0.05 avg300=0.01 total=505000\nfull avg10=16.16 avg60=0.00 avg300=0.00 total=10\n");
      await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (Date.now() - stoppedAt))));
      expect(state(pid)).toBe("T");
      const resumedFrom = out.length;
      child.stdin!.write("go\n");
      // Drawn again at once (cleared screen), then sampling on: the stall shows as a rate.
      // eslint-disable-next-line no-control-regex
      await until(/\x1b\[H\x1b\[2J[^]*drill watch/, resumedFrom);
      const rated = await until(/psi host +some [\d.]+ +full [\d.]+ +rate ([1-9][\d.]*|0\.[1-9])%/, resumedFrom);
      expect(Number(rated[1]), rated[0]).toBeLessThanOrEqual(50);
      child.stdin!.write("q");
      const r = await child;
      done = true;
      expect(r.exitCode, out).toBe(0);
      expect(out.slice(resumedFrom)).not.toContain("interrupted");
      expect(out).toMatch(/mode icanon\s*$/);
    } finally {
      // A failed check leaves drill stopped under the shell: nothing of the test stays behind.
      if (!done) {
        try {
          if (pid > 0) process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
        child.kill("SIGKILL");
      }
    }
  });

  // QA: on a terminal --once drew the live view (cursor moves, the 10-line frame) where the README promises one line.
  it("--once on a terminal: one sample line, no view and no cursor moves", async () => {
    const drill = ["node", drillBin, "--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl, "watch", "--interval", "100ms", "--once"];
    const r = await execa("script", ["-qfec", `stty cols 80 rows 24; ${drill.map(quote).join(" ")}`, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    expect(r.exitCode, r.stdout).toBe(0);
    expect(r.stdout).not.toContain("\x1b[");
    expect(r.stdout).not.toContain("drill watch");
    expect(r.stdout.split(/\r?\n/).filter((l) => /^\d{4}-\d\d-\d\dT\S+Z queue_len=/.test(l)), r.stdout).toHaveLength(1);
  });

  it("run in the background of an interactive shell (`drill watch &`): it does not touch the keyboard, so it is not stopped (SIGTTOU)", async () => {
    const drill = ["node", drillBin, "--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(root, "state"), "--redis", redisUrl, "watch", "--interval", "100ms", "--count", "5"];
    const job = `set -m; ${drill.map(quote).join(" ")} 2>/dev/null & pid=$!; for i in $(seq 50); do sleep 0.1; kill -0 $pid 2>/dev/null || break; case $(ps -o stat= -p $pid) in T*) echo stopped; kill -KILL $pid; kill -CONT $pid;; esac; done; wait $pid; echo "bg-rc=$?"`;
    const r = await execa("script", ["-qfec", `bash -c ${quote(job)}`, "/dev/null"], { reject: false, timeout: 30_000, env: { FORCE_COLOR: "0", NO_COLOR: "1" } });
    expect(r.stdout).not.toContain("stopped");
    expect(r.stdout).toContain("bg-rc=0");
  });

  // QA 10: at 60x12 lines wrapped and each redraw left partial frames behind.
  it("a 60x12 terminal: no line of the view is wider than 60 columns and each frame is shorter than 12 lines", async () => {
    const r = await onTerminal("\x03", { columns: 60, rows: 12 });
    expect(r.exitCode, r.out).toBe(130);
    // eslint-disable-next-line no-control-regex
    const [beforeFirstFrame, ...rest] = r.out.split(/\x1b\[\d+F\x1b\[J/);
    const frames = rest.slice(0, -1);
    // Before the first frame, a line says when it comes (not a blank terminal for a whole interval).
    expect(beforeFirstFrame).toContain("first sample in 100ms");
    expect(frames.length).toBeGreaterThan(0);
    for (const frame of frames) {
      // The view's lines: a notice on stderr (`watch: Redis ... unreachable`) is printed between two frames, not in one.
      // eslint-disable-next-line no-control-regex
      const lines = frame.replace(/\x1b\[[0-9;]*m/g, "").split("\r\n").filter((l) => l !== "" && !l.startsWith("watch: "));
      expect(lines.length).toBeLessThan(12);
      for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(60);
      expect(frame).toContain("psi cg");
    }
  });
});
