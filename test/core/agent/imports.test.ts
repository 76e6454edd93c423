// The agent core's module shape (issue 13): no import cycle among the
// agent's and the session's modules, node.ts is the only router (nothing
// imports it but the public index), and io.ts is a leaf among its siblings.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = normalize(join(dirname(new URL(import.meta.url).pathname), "../../.."));

function coreImports(): Map<string, string[]> {
  const files: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(join(ROOT, d), { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith(".ts")) files.push(join(d, e.name));
    }
  };
  walk("core");
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const src = readFileSync(join(ROOT, f), "utf8");
    const deps: string[] = [];
    for (const m of src.matchAll(/(?:import|export)\s[^;]*?from\s+"(\.[^"]+)"/gs)) {
      const target = relative(ROOT, join(ROOT, dirname(f), m[1]!.replace(/\.js$/, ".ts")));
      if (files.includes(target)) deps.push(target);
    }
    graph.set(f, deps);
  }
  return graph;
}

/** A cycle through `start` among the files `inScope` accepts, or null. */
function cycleFrom(graph: Map<string, string[]>, start: string, inScope: (f: string) => boolean): string[] | null {
  const path: string[] = [];
  const seen = new Set<string>();
  const visit = (f: string): string[] | null => {
    for (const d of graph.get(f) ?? []) {
      if (!inScope(d)) continue;
      if (d === start) return [...path, f, d];
      if (seen.has(d)) continue;
      seen.add(d);
      path.push(f);
      const found = visit(d);
      path.pop();
      if (found) return found;
    }
    return null;
  };
  return visit(start);
}

describe("agent core module shape", () => {
  const graph = coreImports();
  const agentOrSession = (f: string): boolean => f.startsWith("core/agent/") || f.startsWith("core/session/") || f.startsWith("core/window/");

  it("has no import cycle among core/agent, core/session and core/window (type imports included)", () => {
    for (const f of graph.keys()) if (agentOrSession(f)) expect(cycleFrom(graph, f, agentOrSession), f).toBeNull();
  });

  it("io.ts imports none of its siblings but the agent's types", () => {
    const siblings = graph.get("core/agent/io.ts")!.filter((d) => d.startsWith("core/agent/"));
    expect(siblings).toEqual(["core/agent/agent-types.ts"]);
  });

  it("node.ts routes: no agent module imports it", () => {
    for (const [f, deps] of graph) if (f.startsWith("core/agent/")) expect(deps, f).not.toContain("core/agent/node.ts");
  });
});
