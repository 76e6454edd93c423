// The test set Stryker runs against each mutant of core/: the core's own unit
// and property tests (fast, deterministic). The simulator campaign is not in
// it; its own "broken variants" test shows the simulator catches core bugs.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/core/**/*.test.ts", "test/regressions/**/*.test.ts"],
    exclude: ["test/core/purity.test.ts"],
    testTimeout: 60_000,
    pool: "forks",
    // Each mutant re-runs the tests that cover it: keep the random walk short here.
    env: { RVBOX_PROPERTY_SCALE: "0.05", RVBOX_WALK_RUNS: "20" },
  },
});
