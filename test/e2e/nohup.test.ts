// `nohup drill … &` at logout: nohup ignores SIGHUP for drill, but node resets
// every ignored signal at start-up, so drill stopped (129) when the terminal
// closed, the one thing nohup is run for (QA AB 1). drill tells nohup by what
// it does to a terminal (stdin from /dev/null opened write-only, stdout to
// nohup.out) and keeps ignoring SIGHUP. A real nohup on a pty (`script`).
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startedByNohup } from "../../src/interrupt.js";
import { drillBin } from "../helpers/cli.js";
import { freePort } from "../helpers/redisServer.js";
import { writeWatchTree } from "../helpers/watchTree.js";

const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;

let root = "";
let redisUrl = "";
beforeAll(async () => {
  root = mkdtempSync(path.join(tmpdir(), "drill-nohup-"));
  writeWatchTree(root, "some avg10=0.00 avg60=0.00 avg300=0.00 total=5000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n");
  redisUrl = `redis://127.0.0.1:${await freePort()}`; // nothing listens: not what this file is about
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/**
 * `drill watch --json` started in the background on a pty, `prefix` before it
 * (nohup or nothing); once it has printed a sample, SIGHUP. Stopped by it, it
 * exits 129; ignoring it, it prints three more samples (the signal long
 * dispatched by then), and a SIGTERM after that ends it, 143. (Sent together,
 * node may dispatch SIGTERM first.)
 */
async function hungUpThenTerminated(prefix: string, dir: string) {
  mkdirSync(dir, { recursive: true });
  const drill = ["node", drillBin, "--procfs", path.join(root, "proc"), "--sysfs", path.join(root, "sys"), "--state-dir", path.join(dir, "state"), "--redis", redisUrl, "--json", "watch", "--interval", "100ms"];
  const out = prefix === "" ? " > out.jsonl" : "";
  const sampled = prefix === "" ? "out.jsonl" : "nohup.out";
  const shell = [
    `cd ${quote(dir)}`,
    `${prefix} ${drill.map(quote).join(" ")}${out} &`,
    "pid=$!",
    `for i in $(seq 400); do grep -q '^{' ${sampled} 2>/dev/null && break; sleep 0.05; done`,
    "kill -HUP $pid",
    `n=$(grep -c '^{' ${sampled})`,
    `for i in $(seq 400); do kill -0 $pid 2>/dev/null || break; [ $(grep -c '^{' ${sampled}) -ge $((n + 3)) ] && break; sleep 0.05; done`,
    "kill -0 $pid 2>/dev/null && kill -TERM $pid",
    "wait $pid; echo \"drill exited $?\"",
  ].join("\n");
  const r = await execa("script", ["-qfec", `bash -c ${quote(shell)}`, "/dev/null"], { reject: false, timeout: 40_000, env: { NO_COLOR: "1" } });
  return { out: r.stdout, exit: Number(/drill exited (\d+)/.exec(r.stdout)?.[1] ?? NaN), file: readFileSync(path.join(dir, sampled), "utf8") };
}

describe("drill under nohup", () => {
  it("a terminal's SIGHUP stops drill without nohup (129) and not under nohup: it goes on until SIGTERM (143)", async () => {
    const plain = await hungUpThenTerminated("", path.join(root, "plain"));
    expect(plain.exit, plain.out).toBe(129);
    const nohup = await hungUpThenTerminated("nohup", path.join(root, "nohup"));
    expect(nohup.out).toContain("nohup: appending output to 'nohup.out'");
    expect(nohup.exit, nohup.out + nohup.file).toBe(143);
    expect(nohup.file).toContain("drill: interrupted by SIGTERM");
    expect(nohup.file).not.toContain("SIGHUP");
  }, 90_000);

  it("nohup is told by /dev/null opened write-only on stdin or nohup.out on stdout, not by either alone redirected otherwise", () => {
    const tty = { target: "/dev/pts/3", accessMode: 2 };
    expect(startedByNohup({ stdin: { target: "/dev/null", accessMode: 1 }, stdout: tty })).toBe(true);
    expect(startedByNohup({ stdin: tty, stdout: { target: "/home/op/nohup.out", accessMode: 1 } })).toBe(true);
    // `< /dev/null` by hand opens it for reading: no sign of nohup.
    expect(startedByNohup({ stdin: { target: "/dev/null", accessMode: 0 }, stdout: { target: "/tmp/drill.log", accessMode: 1 } })).toBe(false);
    expect(startedByNohup({ stdin: null, stdout: null })).toBe(false);
    expect(startedByNohup({ stdin: tty, stdout: { target: "/tmp/not-nohup.out.txt", accessMode: 1 } })).toBe(false);
  });
});
