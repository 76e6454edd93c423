import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "test/**/*.test.tsx"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Processes a test leaves running are named (with their test file) and killed after the run.
    globalSetup: ["test/support/leaks-global.ts"],
    setupFiles: ["test/support/leaks-setup.ts"],
    reporters: ["default"],
  },
});
