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
  const build = spawnSync(process.execPath, ["scripts/build.mjs", "--type-errors-warn"], { stdio: "inherit" });
  if (build.error) throw build.error;
  if (build.status !== 0) throw new Error(`globalSetup: scripts/build.mjs exited ${build.status}`);
}
