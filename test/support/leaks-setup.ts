// Names the running test file in the environment every process it starts
// inherits (RVBOX_TEST_FILE), so that leaks-global.ts can say which file left
// a process running after the run.
import * as path from "node:path";
import { beforeAll, expect } from "vitest";

beforeAll(() => {
  const file = expect.getState().testPath;
  if (file) process.env.RVBOX_TEST_FILE = path.relative(path.join(import.meta.dirname, "../.."), file);
});
