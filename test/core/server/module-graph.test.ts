// The server core's module graph (docs/ARCHITECTURE.md "Server node"): no
// import cycle among core/server's files, and io.ts, store.ts, metadata.ts
// and server-types.ts are leaves that import no behaviour of their siblings.
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";

const DIR = path.join(__dirname, "../../../core/server");

function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const f of readdirSync(DIR).filter((n) => n.endsWith(".ts"))) {
    const text = readFileSync(path.join(DIR, f), "utf8");
    const deps = [...text.matchAll(/from "\.\/([\w-]+)\.js"/g)].map((m) => `${m[1]}.ts`);
    g.set(f, deps);
  }
  return g;
}

function cycles(g: Map<string, string[]>): string[][] {
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (u: string): void => {
    state.set(u, 1);
    stack.push(u);
    for (const v of g.get(u) ?? []) {
      if (state.get(v) === 1) found.push([...stack.slice(stack.indexOf(v)), v]);
      else if (!state.has(v)) visit(v);
    }
    stack.pop();
    state.set(u, 2);
  };
  for (const u of g.keys()) if (!state.has(u)) visit(u);
  return found;
}

describe("core/server module graph", () => {
  it("has no import cycle", () => {
    const g = graph();
    expect(g.size).toBeGreaterThan(10);
    expect(cycles(g)).toEqual([]);
  });

  it("keeps io.ts, store.ts, metadata.ts and server-types.ts leaves (types from server-types.ts only)", () => {
    const g = graph();
    expect(g.get("server-types.ts")).toEqual([]);
    for (const leaf of ["io.ts", "store.ts", "metadata.ts"]) expect({ leaf, deps: g.get(leaf) }).toEqual({ leaf, deps: ["server-types.ts"] });
  });
});
