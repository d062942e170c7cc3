import { defineConfig } from "vitest/config";

/**
 * Files that run next to each other safely: no `drill up` (whose processes a
 * no-op rollback elsewhere counts as another drill on the host), no rollback,
 * no hog (memory pressure moves host PSI, which other files' gates read), and
 * every gate decision from a fake procfs. Each starts its own redis-server on
 * a free port; a real cgroup it makes is under --parent self, named after its
 * pid, with no hog in it (sleeps at most), and gone before the file ends: a
 * file beside it looks only at its own cgroups (cgroup.test's refused names
 * check the paths they would make, not the whole listing of the test's own
 * cgroup, where nonroot-teardown-root-tasks' cgroup once showed up in CI).
 * An `up` or `inject` refused at its flags (exit 2, doctor and file-dir) starts
 * nothing. (Left in `drills` though they qualify: redis-connect-refused, whose
 * CLIENT PAUSE of 1 s must outlast a 200 ms command timeout, which a busier
 * lane could stretch.)
 */
const QUIET_FILES = [
  "test/unit/**/*.test.ts",
  "test/e2e/ascii-locale.test.ts",
  "test/e2e/cgroup-teardown-interrupt-frozen.test.ts",
  "test/e2e/doctor.test.ts",
  "test/e2e/file-dir.test.ts",
  "test/e2e/nonroot-teardown-root-tasks.test.ts",
  "test/e2e/teardown-how.test.ts",
  "test/integration/cgroup-dir-mode.test.ts",
  "test/integration/sampler-held-files.test.ts",
  "test/integration/teardown-descendants.test.ts",
  "test/e2e/gate-cold-start.test.ts",
  "test/e2e/embedded-redis-shared.test.ts",
  "test/e2e/gate-dry-run.test.ts",
  "test/e2e/help.test.ts",
  "test/e2e/nohup.test.ts",
  "test/e2e/pack-gate.test.ts",
  "test/e2e/pack-refused.test.ts",
  "test/e2e/readonly-foreign-record.test.ts",
  "test/e2e/redis-loading.test.ts",
  "test/e2e/report-recording.test.ts",
  "test/e2e/report-seq-refused.test.ts",
  "test/e2e/report-up-ended.test.ts",
  "test/e2e/report-worker-exited.test.ts",
  "test/e2e/report.test.ts",
  "test/e2e/rollback-fake-procfs.test.ts",
  "test/e2e/rollback-held.test.ts",
  "test/e2e/rollback-other-redis.test.ts",
  "test/e2e/setup-hint.test.ts",
  "test/e2e/teardown-procs-unreadable.test.ts",
  "test/e2e/teardown-record-unlink-refused.test.ts",
  "test/e2e/startup.test.ts",
  "test/e2e/watch-hints.test.ts",
  "test/e2e/watch-rejects.test.ts",
  "test/e2e/watch-tty.test.ts",
  "test/e2e/watch.test.ts",
  "test/e2e/zero-durations.test.ts",
  "test/integration/doctor-redis.test.ts",
  "test/integration/drain-batch.test.ts",
  "test/integration/embedded-redis.test.ts",
  "test/integration/gate.test.ts",
  "test/integration/invariants.test.ts",
  "test/integration/queue.test.ts",
  "test/integration/redis-db.test.ts",
  "test/integration/redis-refusals.test.ts",
  "test/integration/watch-queue-scan.test.ts",
  "test/integration/watch-rejects.test.ts",
  "test/integration/worker-cleanup.test.ts",
  "test/integration/worker-stats.test.ts",
];

/**
 * Drills files that measure: a slowdown against a calm baseline, a page that
 * needs idle CPU, rejects from the host's own signals. They run last, alone,
 * also when `npm test` runs `quiet` beside `drills` (scripts/test.mjs).
 */
const ALONE_FILES = [
  "test/e2e/drill-loop.test.ts",
  "test/integration/inject.test.ts",
  "test/integration/pagetoucher.test.ts",
  "test/integration/watch-real.test.ts",
  "test/integration/worker.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ["default"],
    projects: [
      // Three at a time: one per core and one waiting on Redis or a child;
      // two when scripts/test.mjs runs it beside `drills`.
      { extends: true, test: { name: "quiet", include: QUIET_FILES, maxWorkers: Number(process.env.DRILL_TEST_QUIET_WORKERS ?? 3), sequence: { groupOrder: 0 } } },
      // One at a time: real drills, hogs and rollbacks share the two cores,
      // the page-fault budget and the host's PSI, and a rollback with nothing
      // to do looks at every drill on the host.
      {
        extends: true,
        test: { name: "drills", include: ["test/**/*.test.ts"], exclude: [...QUIET_FILES, ...ALONE_FILES], fileParallelism: false, sequence: { groupOrder: 1 } },
      },
      { extends: true, test: { name: "alone", include: ALONE_FILES, fileParallelism: false, sequence: { groupOrder: 2 } } },
    ],
  },
});
