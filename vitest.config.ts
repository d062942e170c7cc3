import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Real cgroups and real Redis servers: keep files from fighting over the
    // two cores and the page-fault budget.
    fileParallelism: false,
    reporters: ["default"],
  },
});
