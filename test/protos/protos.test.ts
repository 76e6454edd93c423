// The wire schema is the contract: the spec's names and field numbers must be
// there unchanged, and the checked-in generated code must be what buf
// generates now. Anything beyond the spec is an append-only addition of a
// negotiated minor version (R-T4/R-T5), listed in ADDED with its minor.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, cpSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "../..");
const specProto = resolve(root, "../shared/spec/agent.proto");

/** message -> field name -> number (oneof members included). */
function fields(src: string): Map<string, Map<string, number>> {
  const noComments = src.replace(/\/\/.*$/gm, "");
  const out = new Map<string, Map<string, number>>();
  const msgRe = /message\s+(\w+)\s*\{/g;
  let m: RegExpExecArray | null;
  while ((m = msgRe.exec(noComments))) {
    let depth = 1;
    let i = msgRe.lastIndex;
    while (depth > 0 && i < noComments.length) {
      if (noComments[i] === "{") depth++;
      else if (noComments[i] === "}") depth--;
      i++;
    }
    const body = noComments.slice(msgRe.lastIndex, i - 1);
    const f = new Map<string, number>();
    for (const fm of body.matchAll(/(?:repeated\s+|optional\s+)?[\w.]+\s+(\w+)\s*=\s*(\d+)\s*;/g)) f.set(fm[1]!, Number(fm[2]));
    out.set(m[1]!, f);
  }
  return out;
}

/** Fields agent.proto adds to the spec's messages: message -> field -> [number, protocol minor that added it]. */
const ADDED: Record<string, Record<string, [number, number]>> = {
  StdinWrite: { resize: [5, 1] },
};

describe("protos", () => {
  it.skipIf(!existsSync(specProto))("R-T5: agent.proto has the spec's messages, field names and numbers; additions are append-only and listed", () => {
    const spec = fields(readFileSync(specProto, "utf8"));
    const ours = fields(readFileSync(join(root, "protos/rvbox/v1/agent.proto"), "utf8"));
    expect([...ours.keys()].sort()).toEqual([...spec.keys()].sort());
    for (const [name, f] of spec) {
      const added = ADDED[name] ?? {};
      const want = { ...Object.fromEntries(f), ...Object.fromEntries(Object.entries(added).map(([k, [n]]) => [k, n])) };
      expect(Object.fromEntries(ours.get(name)!), name).toEqual(want);
      // Append-only: a new field takes a number above every one the spec gave that message.
      const specMax = Math.max(0, ...f.values());
      for (const [field, [n, minor]] of Object.entries(added)) {
        expect(n, `${name}.${field}`).toBeGreaterThan(specMax);
        expect(minor, `${name}.${field}`).toBeGreaterThan(0);
      }
    }
  });

  it("buf lint passes and regenerating the code changes nothing", () => {
    const buf = join(root, "node_modules/.bin/buf");
    execFileSync(buf, ["lint", "protos"], { cwd: root, stdio: "pipe" });
    const tmp = mkdtempSync(join(tmpdir(), "rvbox-gen-"));
    cpSync(join(root, "protos"), join(tmp, "protos"), { recursive: true, filter: (s) => !s.includes(`${join("protos", "gen")}`) });
    execFileSync(buf, ["generate"], {
      cwd: join(tmp, "protos"),
      stdio: "pipe",
      env: { ...process.env, PATH: `${join(root, "node_modules/.bin")}:${process.env.PATH}` },
    });
    const gen = join(root, "protos/gen/rvbox/v1");
    for (const f of readdirSync(gen)) {
      expect(readFileSync(join(tmp, "protos/gen/rvbox/v1", f), "utf8"), f).toBe(readFileSync(join(gen, f), "utf8"));
    }
  }, 120_000);
});
