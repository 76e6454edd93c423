import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { closest, didYouMean, editDistance } from "../../../shells/runtime/suggest.js";
import { cli } from "../../cli/helpers.js";

const ROOT = path.resolve(import.meta.dirname, "../../..");

describe("did you mean", () => {
  it("edit distance counts insertions, deletions, substitutions and neighbour swaps as one each", () => {
    expect(editDistance("clients", "clients")).toBe(0);
    expect(editDistance("clinets", "clients")).toBe(1); // swap
    expect(editDistance("folow", "follow")).toBe(1); // insertion
    expect(editDistance("logss", "logs")).toBe(1); // deletion
    expect(editDistance("lz", "ls")).toBe(1); // substitution
    expect(editDistance("", "abc")).toBe(3);
    expect(editDistance("abc", "")).toBe(3);
    expect(editDistance("kitten", "sitting")).toBe(3);
  });

  it("an over-long value is never run through the edit table (a candidate longer or shorter by more than the allowed edits is skipped)", () => {
    const long = "x".repeat(2_000_000);
    // Old code: a 2M x 2M edit table (hours); now the lengths alone rule it out.
    expect(closest(long, [`${long}abc`, "run", "logs"])).toBeUndefined();
    expect(didYouMean(long, ["run", "logs"])).toBe("");
  });

  it("suggests the one close candidate; nothing when none is close or two are equally close", () => {
    const cmds = ["run", "logs", "ls", "clients", "claims", "cancel", "get"];
    expect(closest("clinets", cmds)).toBe("clients");
    expect(closest("lgos", cmds)).toBe("logs");
    expect(closest("xyz", cmds)).toBeUndefined();
    // "lo" is one edit from "ls" and two from "logs"
    expect(closest("lo", cmds)).toBe("ls");
    // short names allow one edit only: "rnx" is two from "run"
    expect(closest("rnx", cmds)).toBeUndefined();
    // a tie: "gat" is one from "get" and one from "cat"
    expect(closest("gat", ["get", "cat"])).toBeUndefined();
    expect(didYouMean("folow", ["follow", "stdin"], "--")).toBe(" (did you mean --follow?)");
    expect(didYouMean("zzz", ["follow"], "--")).toBe("");
  });

  it("a mistyped flag is a usage error (exit 2) that names the flag meant", async () => {
    const r = await cli(["run", "web-1", "--folow", "--", "true"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown flag --folow (did you mean --follow?)");
    const l = await cli(["ls", "--limt", "3"], { env: { RVBOX_TOKEN_FILE: "/nonexistent" } });
    expect(l.code).toBe(2);
    expect(l.stderr).toContain("unknown flag --limt (did you mean --limit?)");
  });

  it("a mistyped command names the command meant (exit 2); a far-off one gets the command list only", () => {
    const run = (arg: string) => {
      try {
        execFileSync(path.join(ROOT, "bin/rvbox.js"), [arg], { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
        return { code: 0, stderr: "" };
      } catch (e) {
        const err = e as { status: number; stderr: string };
        return { code: err.status, stderr: err.stderr };
      }
    };
    const near = run("clinets");
    expect(near.code).toBe(2);
    expect(near.stderr).toContain('unknown command "clinets" (did you mean clients?)');
    const far = run("qqqqqq");
    expect(far.code).toBe(2);
    expect(far.stderr).toContain('unknown command "qqqqqq"\n');
    expect(far.stderr).not.toContain("did you mean");
  }, 120_000);
});
