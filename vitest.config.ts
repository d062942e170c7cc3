import { defineConfig } from "vitest/config";

/**
 * Files that run next to each other safely: no `drill up` (whose processes a
 * no-op rollback elsewhere counts as another drill on the host), no rollback,
 * no hog (memory pressure moves host PSI, which other files' gates read), and
 * every gate decision from a fake procfs. Each starts its own redis-server on
 * a free port and names its cgroups after its pid.
 */
const QUIET_FILES = [
  "test/unit/**/*.test.ts",
  "test/e2e/gate-cold-start.test.ts",
  "test/e2e/gate-dry-run.test.ts",
  "test/e2e/help.test.ts",
  "test/e2e/pack-gate.test.ts",
  "test/e2e/report-seq-refused.test.ts",
  "test/e2e/report-worker-exited.test.ts",
  "test/e2e/report.test.ts",
  "test/e2e/setup-hint.test.ts",
  "test/e2e/startup.test.ts",
  "test/e2e/watch-hints.test.ts",
  "test/e2e/watch-rejects.test.ts",
  "test/e2e/watch-tty.test.ts",
  "test/e2e/watch.test.ts",
  "test/e2e/zero-durations.test.ts",
  "test/integration/embedded-redis.test.ts",
  "test/integration/gate.test.ts",
  "test/integration/invariants.test.ts",
  "test/integration/queue.test.ts",
  "test/integration/redis-db.test.ts",
  "test/integration/watch-queue-scan.test.ts",
  "test/integration/watch-rejects.test.ts",
  "test/integration/worker-cleanup.test.ts",
  "test/integration/worker-stats.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ["default"],
    projects: [
      // First, two at a time: one per core.
      { extends: true, test: { name: "quiet", include: QUIET_FILES, maxWorkers: 3, sequence: { groupOrder: 0 } } },
      // Then one at a time: real drills, hogs and rollbacks fight over the two
      // cores, the page-fault budget and the host's PSI, and a rollback with
      // nothing to do looks at every drill on the host.
      {
        extends: true,
        test: { name: "drills", include: ["test/**/*.test.ts"], exclude: QUIET_FILES, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
