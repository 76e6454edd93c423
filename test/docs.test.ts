import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { generate } from "../scripts/spec-coverage.js";

const root = resolve(import.meta.dirname, "..");

describe("docs", () => {
  it.skipIf(!existsSync(resolve(root, "../shared/spec/requirements.md")))("SPEC-COVERAGE.md is current with the requirements and the test names", () => {
    expect(readFileSync(resolve(root, "docs/SPEC-COVERAGE.md"), "utf8")).toBe(generate());
  });
});
