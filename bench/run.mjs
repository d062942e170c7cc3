#!/usr/bin/env node
// `npm run bench`: builds drill when dist/ is missing or older than src/,
// then runs the watch-vs-shell benchmark (arguments pass through).
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

function newestMtimeMs(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtimeMs(file) : statSync(file).mtimeMs);
  }
  return newest;
}

const built = path.join(repo, "dist", "main.js");
if (!existsSync(built) || statSync(built).mtimeMs < newestMtimeMs(path.join(repo, "src"))) {
  console.log("bench: building drill (npm run build)");
  const build = spawnSync("npm", ["run", "build"], { cwd: repo, stdio: "inherit" });
  if (build.status !== 0) process.exit(build.status ?? 1);
}
const bench = spawnSync("node", [path.join(repo, "bench", "watch-vs-shell.mjs"), ...process.argv.slice(2)], { cwd: repo, stdio: "inherit" });
process.exit(bench.status ?? 1);
