// core/ must stay free of clocks, randomness, timers, promises and I/O. The
// core tsconfig has no Node or DOM types (timers, node: imports fail to
// compile); Date and Math.random exist in plain ES, so they are checked here,
// in comments too (a comment naming process.* or a timer reads as a slip).
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const core = resolve(import.meta.dirname, "../../core");
function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}
const FORBIDDEN =
  /Date\.now|new Date\(|performance\.now|Math\.random|setTimeout|setInterval|setImmediate|queueMicrotask|process\.|require\(|\basync\b|\bawait\b|Promise|from ["'](node:|fs|net|http|https|crypto|child_process|ws|sql\.js|zstd-codec|fzstd)["']/;

describe("core purity", () => {
  it("no clock, randomness, timer, promise or I/O in core/", () => {
    const hits: string[] = [];
    for (const f of files(core)) {
      readFileSync(f, "utf8")
        .split("\n")
        .forEach((line, i) => {
          if (FORBIDDEN.test(line)) hits.push(`${f}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(hits).toEqual([]);
  });

  it("core/ compiles under its own tsconfig without Node types", () => {
    execFileSync("npx", ["tsc", "--noEmit", "-p", core], { stdio: "pipe" });
  }, 120_000);
});
