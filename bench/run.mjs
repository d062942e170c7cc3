#!/usr/bin/env node
// `npm run bench [startup|gate|watch] [-- flags]`: builds drill when dist/ is
// missing or older than src/, then runs the named benchmark (flags pass
// through), or all three one after the other (about 12 minutes).
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

const built = path.join(repo, "dist", "bundle", "main.js");
if (!existsSync(built) || statSync(built).mtimeMs < newestMtimeMs(path.join(repo, "src"))) {
  console.log("bench: building drill (npm run build)");
  const build = spawnSync("npm", ["run", "build"], { cwd: repo, stdio: "inherit" });
  if (build.status !== 0) process.exit(build.status ?? 1);
}
const benches = { startup: "startup.mjs", gate: "gate-throughput.mjs", watch: "watch-vs-shell.mjs" };
const [first, ...rest] = process.argv.slice(2);
const chosen = first !== undefined && first in benches ? [first] : Object.keys(benches);
const flags = first !== undefined && first in benches ? rest : process.argv.slice(2);
if (chosen.length > 1 && flags.length > 0) {
  console.error(`bench: flags go to one benchmark: npm run bench -- ${Object.keys(benches).join("|")} ${flags.join(" ")}`);
  process.exit(2);
}
for (const name of chosen) {
  console.log(`\n== bench ${name} (bench/${benches[name]})`);
  const bench = spawnSync("node", [path.join(repo, "bench", benches[name]), ...flags], { cwd: repo, stdio: "inherit" });
  if (bench.status !== 0) process.exit(bench.status ?? 1);
}
