import path from "node:path";
import { fileURLToPath } from "node:url";
import { execa, type Options } from "execa";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const drillBin = path.join(repoRoot, "bin", "drill.js");

export interface CliResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs the built binary the way an operator would: no colour, never throws, bounded. */
export async function runDrill(args: string[], options: Options = {}): Promise<CliResult> {
  const result = await execa("node", [drillBin, ...args], {
    reject: false,
    timeout: 60_000,
    ...options,
    env: { FORCE_COLOR: "0", NO_COLOR: "1", ...(options.env ?? {}) },
  });
  return { exitCode: result.exitCode ?? -1, stdout: String(result.stdout ?? ""), stderr: String(result.stderr ?? "") };
}
