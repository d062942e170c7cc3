import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { drillBin } from "./cli.js";

/**
 * A small tmpfs to fill, for a state dir that refuses writes (ENOSPC) at a
 * chosen moment. `inodes` bounds its files too (a full tmpfs still makes
 * empty files and dirs; fillInodes then refuses those).
 */
export function mountTmpfs(mount: string, size: string, inodes?: number): void {
  const options = `size=${size}${inodes === undefined ? "" : `,nr_inodes=${inodes}`}`;
  const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", options, "tmpfs", mount], { encoding: "utf8" });
  if (mounted.status !== 0) throw new Error(`mount tmpfs: ${mounted.stderr}`);
}

/** Fills the filesystem at `dir` until it refuses (ENOSPC): its blocks; with `inodes`, its inodes too (empty files and dirs refused). */
export function fill(dir: string, { inodes = false } = {}): void {
  let i = 0;
  for (; ; i++) {
    try {
      writeFileSync(path.join(dir, `filler-${i}`), Buffer.alloc(4096));
    } catch {
      break;
    }
  }
  if (!inodes) return;
  for (; ; i++) {
    try {
      writeFileSync(path.join(dir, `filler-${i}`), "");
    } catch {
      return;
    }
  }
}

export function unfill(dir: string): void {
  for (const name of readdirSync(dir)) if (name.startsWith("filler-")) rmSync(path.join(dir, name), { force: true });
}

/** `drill <args>` with DRILL_CRASH_AT set, its output kept as it comes. */
export function spawnDrill(args: string[], crashAt: string): { child: ChildProcess; said: () => { stdout: string; stderr: string }; exited: Promise<number | null> } {
  const child = spawn("node", [drillBin, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0", DRILL_CRASH_AT: crashAt } });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
  return { child, said: () => ({ stdout, stderr }), exited };
}

/** Waits (bounded) until `pid` is stopped (state T: DRILL_CRASH_AT=<step>:stop reached). */
export async function untilStopped(pid: number, what: () => string, timeoutMs = 60_000): Promise<void> {
  await until(() => {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("T");
  }, () => `pid ${pid} did not stop: ${what()}`, timeoutMs);
}

/** Waits (bounded) until `done()`; `what()` says what was awaited when it does not come. */
export async function until(done: () => boolean, what: () => string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(what());
    await new Promise((r) => setTimeout(r, 50));
  }
}
