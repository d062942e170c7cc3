import { spawnSync } from "node:child_process";
import { execa } from "execa";
import { drillBin } from "./cli.js";

/**
 * The argv bash splits a printed command into, pasted as is: its words after
 * quoting, expansion and globbing (`drill` first).
 */
export function pastedArgv(command: string): string[] {
  const run = spawnSync("bash", ["-c", `printf '%s\\0' ${command}`], { encoding: "utf8" });
  if (run.status !== 0) throw new Error(`bash could not read ${command}: ${run.stderr}`);
  return run.stdout.split("\0").slice(0, -1);
}

/** A printed command run as pasted into bash, its `drill` the built binary. */
export async function runPasted(command: string, env: NodeJS.ProcessEnv = {}): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const result = await execa("bash", ["-c", `drill() { node ${drillBin} "$@"; }; ${command}`], { reject: false, timeout: 60_000, env: { FORCE_COLOR: "0", NO_COLOR: "1", ...env } });
  return { exitCode: result.exitCode ?? -1, stdout: String(result.stdout), stderr: String(result.stderr) };
}
