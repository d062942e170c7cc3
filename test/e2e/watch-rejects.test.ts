// QA: `drill watch` never showed the gate's reject lines, though DESIGN.md's
// loop says "Watch it live; read reject lines as they happen." A real gate
// rejects jobs (host PSI 12.40 from a fake procfs) while the built `drill
// watch` runs: its lines show up in the gate's own words, on stdout before the
// sample line when piped, on stderr with --json; the rejects from before
// watch started are drill report's history, not shown.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { execa, type ResultPromise } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drillBin, runDrill } from "../helpers/cli.js";
import { HOT_PSI } from "../helpers/psiText.js";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.js";

let server: RedisServer;
let root = "";
let hotProc = "";
let n = 0;
const children = new Set<ResultPromise>();

beforeAll(async () => {
  server = await startRedisServer();
  root = mkdtempSync(path.join(tmpdir(), "drill-watch-rejects-"));
  hotProc = path.join(root, "proc");
  mkdirSync(path.join(hotProc, "pressure"), { recursive: true });
  writeFileSync(path.join(hotProc, "pressure", "memory"), HOT_PSI);
});
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await Promise.allSettled([...children]);
  await server?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

const ISO_SAMPLE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z queue_len=/;
const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

async function packAndGate(queue: string, jobs: number, gateArgs: string[] = []): Promise<string[]> {
  const pack = await runDrill(["--redis", server.url, "pack", "--jobs", String(jobs), "--queue", queue]);
  expect(pack.exitCode, pack.stderr).toBe(0);
  const gate = await runDrill(["--redis", server.url, "--procfs", hotProc, "gate", "--queue", queue, "--interval", "200ms", "--idle-exit", "500ms", ...gateArgs]);
  expect(gate.exitCode, gate.stderr).toBe(0);
  return lines(gate.stdout);
}

/** drill watch in the background; `ready` once its first sample is out (where its reject lines start). */
function startWatch(queue: string, json: boolean) {
  const child = execa("node", [drillBin, "--redis", server.url, ...(json ? ["--json"] : []), "watch", "--queue", queue, "--interval", "100ms"], {
    reject: false,
    timeout: 60_000,
    env: { FORCE_COLOR: "0", NO_COLOR: "1" },
  });
  children.add(child);
  void child.finally(() => children.delete(child));
  let stdout = "";
  let stderr = "";
  let firstSample: () => void;
  const ready = new Promise<void>((resolve) => (firstSample = resolve));
  child.stdout!.on("data", (chunk: Buffer) => {
    stdout += chunk.toString("utf8");
    if (stdout.includes("\n")) firstSample();
  });
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  return { child, ready, out: () => stdout, err: () => stderr };
}

async function waitFor(what: string, probe: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("drill watch shows the gate's reject lines as they happen", () => {
  it("piped: one line each on stdout, before the sample line, no colour; the earlier ones are history", async () => {
    const queue = `wr${++n}`;
    const history = await packAndGate(queue, 1);
    expect(history).toEqual(["reject_host_pressure job=1 psi=12.40 route=retry"]);
    const watch = startWatch(queue, false);
    await watch.ready;
    const rejected = await packAndGate(queue, 3);
    expect(rejected).toEqual(["2", "3", "4"].map((id) => `reject_host_pressure job=${id} psi=12.40 route=retry`));
    // The last reject line, then a sample line after it.
    await waitFor("the reject lines and a sample after them", () => {
      const out = lines(watch.out());
      const last = out.lastIndexOf(rejected.at(-1)!);
      return last >= 0 && out.slice(last + 1).some((l) => ISO_SAMPLE.test(l));
    });
    watch.child.kill("SIGINT");
    const r = await watch.child;
    expect(r.exitCode).toBe(130);
    const out = lines(watch.out());
    // This host's own alarm lines (PAGE/CLEAR) may be there too: only the gate's lines are this test's.
    expect(out.filter((l) => /^(reject_|\(\d+ more)/.test(l))).toEqual(rejected);
    // Before the sample line (alarm lines, if any, come between).
    expect(out.slice(out.indexOf(rejected.at(-1)!) + 1).find((l) => !/^(PAGE|CLEAR) /.test(l))).toMatch(ISO_SAMPLE);
    expect(watch.out()).not.toMatch(/\x1b\[/); // eslint-disable-line no-control-regex
    expect(watch.err()).not.toContain("reject_");
  }, 60_000);

  it("--json: stdout stays one sample a line; the reject lines go to stderr", async () => {
    const queue = `wr${++n}`;
    await packAndGate(queue, 1);
    const watch = startWatch(queue, true);
    await watch.ready;
    const rejected = await packAndGate(queue, 2, ["--retry-budget", "0"]);
    expect(rejected).toEqual(["2", "3"].map((id) => `reject_host_pressure job=${id} psi=12.40 route=dead`));
    await waitFor("the reject lines on stderr", () => watch.err().includes(rejected.at(-1)!));
    watch.child.kill("SIGINT");
    const r = await watch.child;
    expect(r.exitCode).toBe(130);
    for (const line of lines(watch.out())) expect(() => JSON.parse(line) as unknown, line).not.toThrow();
    expect(watch.out()).not.toContain("reject_host_pressure job=");
    expect(lines(watch.err()).filter((l) => l.startsWith("reject_"))).toEqual(rejected);
  }, 60_000);

  it("--once: none of the rejects already there (only those during its one interval)", async () => {
    const queue = `wr${++n}`;
    await packAndGate(queue, 2);
    const r = await runDrill(["--redis", server.url, "watch", "--once", "--interval", "100ms", "--queue", queue]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(lines(r.stdout)).toHaveLength(1);
    expect(lines(r.stdout)[0]).toMatch(ISO_SAMPLE);
  });
});
