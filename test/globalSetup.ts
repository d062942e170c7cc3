import { spawnSync } from "node:child_process";

/**
 * e2e tests run the built binary: build it once from the tree under test.
 * tsc emits even with type errors; `npm run typecheck` is the gate for those,
 * so a type error here is a warning, not a reason to run no test at all.
 */
export default function setup(): void {
  // Built already: by scripts/test.mjs for the vitests it runs side by side,
  // or by this file for the root project (vitest runs it once per project).
  if (process.env.DRILL_TEST_BUILT === "1") return;
  process.env.DRILL_TEST_BUILT = "1";
  const tsc = spawnSync("npx", ["tsc", "-p", "tsconfig.build.json"], { encoding: "utf8" });
  if (tsc.status !== 0) process.stderr.write(`globalSetup: tsc reported errors (run npm run typecheck):\n${tsc.stdout.slice(0, 2000)}\n`);
  // The bundle is what bin/drill.js runs (scripts/bundle.mjs).
  const bundle = spawnSync("node", ["scripts/bundle.mjs"], { stdio: "inherit" });
  if (bundle.error) throw bundle.error;
  if (bundle.status !== 0) throw new Error(`globalSetup: scripts/bundle.mjs exited ${bundle.status}`);
  const native = spawnSync("node", ["scripts/build-native.mjs"], { stdio: "inherit" });
  if (native.error) throw native.error;
}
