import path from "node:path";
import { execa } from "execa";
import { repoRoot } from "./cli.js";

/** setpriv's arguments that drop to nobody (uid and gid 65534, no groups): a non-root drill beside root's processes. */
export const NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/** Why nobody cannot run the built binary (bin/drill.js runs dist/bundle/main.js) under the repo, or null when it can. */
export async function nobodyCannotRun(): Promise<string | null> {
  const probe = await execa("setpriv", [...NOBODY, process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(path.join(repoRoot, "dist", "bundle", "main.js"))})`], { reject: false });
  return probe.exitCode === 0 ? null : `nobody cannot run the built binary under ${repoRoot} (${String(probe.stderr).split("\n")[0]})`;
}
