// The import direction of every folder (issue 13 item 4). Each file's
// relative imports (static, dynamic, type-only and re-exports alike, read
// with the TypeScript compiler's own pre-processor) must land in a layer its
// rule allows; a folder without a rule fails, so a new folder gets one. And
// core/ has no import cycle beyond the ones listed in KNOWN_CORE_CYCLES.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");
const SOURCE_DIRS = ["core", "protos", "client", "shells", "sim", "tui", "bin", "scripts", "test"];

/** Layer names: a top-level folder, or shells/<x> and protos/<x> (one daemon part each). */
type Rule = { allow: readonly string[] | "anything"; why: string };

const RULES: Record<string, Rule> = {
  core: { allow: ["protos/gen"], why: "the pure core: reducers and the reader semantics, driven by shells and the simulator, never the other way" },
  "protos/gen": { allow: [], why: "generated protobuf-es code of the wire and control API" },
  client: {
    allow: ["core", "protos/gen"],
    why: "the operator client library (control API client, plain views, marker words) shared by the CLI and the TUI; knows no daemon, no terminal UI",
  },
  "shells/zstd": { allow: [], why: "compression backends, a leaf" },
  "shells/store": { allow: [], why: "the durable single-file database, a leaf under the storage layer" },
  "shells/storage": { allow: ["core", "shells/store"], why: "the nodes' key-value tables over the durable store" },
  "shells/runtime": { allow: ["core", "shells/zstd"], why: "the node loop that runs a reducer and executes its effects" },
  "shells/exec": {
    allow: ["core", "shells/agent"],
    why: "process spawning; the spawn helper records process identities with the agent's ProcRegistry (shells/agent/proc-identity.ts)",
  },
  "shells/agent": {
    allow: ["core", "protos/gen", "shells/exec", "shells/runtime", "shells/storage", "shells/store", "shells/zstd"],
    why: "the agent daemon: its core reducer over sockets, processes and disk; never a client or UI",
  },
  "shells/server": {
    allow: ["core", "protos/gen", "shells/runtime", "shells/storage", "shells/store", "shells/zstd"],
    why: "the server daemon and its control API; never a client or UI",
  },
  "shells/cli": {
    allow: ["core", "shells/agent", "shells/server", "shells/runtime", "shells/demo", "shells/operator"],
    why: "the daemons' command lines (server, agent) and shell completion, which reads the operator CLI's flag tables (shells/operator)",
  },
  "shells/demo": {
    allow: ["protos/gen", "shells/agent", "shells/server", "shells/runtime", "shells/cli"],
    why: "`rvbox demo`: a server and agents in one process, driven over the control API",
  },
  "shells/operator": {
    allow: ["client", "core", "protos/gen", "tui", "sim", "shells/agent", "shells/server", "shells/runtime", "shells/zstd"],
    why: "the operator CLI on the client library; `rvbox tui` injects the TUI's source (tui-open.ts: a server, the simulator's, or a demo fleet of daemons, demo-fleet.ts); `logs` and `run --follow` decode the server's stored zstd frames (follow-zstd.ts)",
  },
  tui: { allow: ["client", "core", "protos/gen"], why: "the terminal UI renders a DataSource it is given; never the simulator or a daemon" },
  sim: { allow: ["core", "protos/gen"], why: "the deterministic simulator runs the pure core; no shell, no client" },
  bin: { allow: "anything", why: "the entry points compose everything" },
  scripts: { allow: "anything", why: "benchmarks and generators" },
  test: { allow: "anything", why: "tests reach any layer" },
};

/** Single files allowed more than their folder, each with why. */
const FILE_EXCEPTIONS: Record<string, Rule> = {
  "sim/tui-source.ts": {
    allow: ["client", "tui"],
    why: "the TUI's simulator source: a tui DataSource over a recorded simulated world (injected by shells/operator/tui-open.ts)",
  },
};

/**
 * Import cycles in core/ that predate the layer test (issue 13 item 2 removes
 * them: the helpers' refactors of core/agent and core/server). Listed, printed
 * and allowed as they are; any other cycle, or one of these grown by a file,
 * fails. Remove an entry once its cycle is gone (the test says so).
 */
const KNOWN_CORE_CYCLES: readonly (readonly string[])[] = [];

/** Files whose import closure is a daemon's: no UI, client or simulator in it. */
const DAEMON_ENTRIES = [
  "shells/server/server-daemon.ts",
  "shells/agent/agent-daemon.ts",
  "shells/cli/server-cli.ts",
  "shells/cli/agent-cli.ts",
  "shells/exec/spawn-helper.ts",
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    if (f === "node_modules" || f.startsWith(".")) return [];
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return /\.(ts|tsx|js|mjs)$/.test(f) && !f.endsWith(".d.ts") && f !== "compiled.mjs" ? [p] : [];
  });
}

function layerOf(file: string): string {
  const parts = file.split("/");
  return parts[0] === "shells" || parts[0] === "protos" ? parts.slice(0, 2).join("/") : parts[0]!;
}

/** A relative specifier as a repo file (a `.js` specifier names its `.ts`/`.tsx` source); null: not found. */
function resolveImport(from: string, spec: string): string | null {
  const base = resolve(ROOT, dirname(from), spec);
  const stem = base.replace(/\.(js|jsx|mjs)$/, "");
  for (const c of [base, `${stem}.ts`, `${stem}.tsx`, join(base, "index.ts")]) if (existsSync(c) && statSync(c).isFile()) return relative(ROOT, c);
  return null;
}

interface Graph {
  files: string[];
  imports: Map<string, string[]>;
  unresolved: string[];
}

function readGraph(): Graph {
  const files = SOURCE_DIRS.filter((d) => existsSync(join(ROOT, d))).flatMap((d) => sourceFiles(join(ROOT, d)).map((f) => relative(ROOT, f)));
  const imports = new Map<string, string[]>();
  const unresolved: string[] = [];
  for (const f of files) {
    const info = ts.preProcessFile(readFileSync(join(ROOT, f), "utf8"), true, true);
    const out: string[] = [];
    for (const { fileName } of info.importedFiles) {
      if (!fileName.startsWith(".")) continue;
      const t = resolveImport(f, fileName);
      if (t) out.push(t);
      else if (!f.startsWith("test/")) unresolved.push(`${f}: ${fileName}`);
    }
    imports.set(f, out);
  }
  return { files, imports, unresolved };
}

/** Strongly connected components with a cycle (more than one file, or a file importing itself). */
function cycles(nodes: string[], edges: (n: string) => string[]): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges(v)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || edges(v).includes(v)) out.push(scc.sort());
  };
  for (const n of nodes) if (!index.has(n)) visit(n);
  return out;
}

const graph = readGraph();

describe("layers", () => {
  it("every relative import resolves to a file of the repository", () => {
    // Shipped generated or vendored modules without a source file here are named explicitly.
    const known = new Set(["shells/zstd/compress.ts: ./zstd-codec.js"]);
    expect(graph.unresolved.filter((u) => !known.has(u))).toEqual([]);
  });

  it("every folder has a rule, and every import goes the way its rule allows", () => {
    const noRule = [...new Set(graph.files.map(layerOf))].filter((l) => !RULES[l]);
    expect(noRule, "folders without a rule in RULES").toEqual([]);
    const wrong: string[] = [];
    for (const [f, targets] of graph.imports) {
      const from = layerOf(f);
      const rule = RULES[from]!;
      if (rule.allow === "anything") continue;
      const extra = FILE_EXCEPTIONS[f]?.allow;
      for (const t of targets) {
        const to = layerOf(t);
        if (to === from || rule.allow.includes(to) || (extra !== undefined && extra !== "anything" && extra.includes(to))) continue;
        wrong.push(`${f} -> ${t} (${from} may import only ${rule.allow.join(", ") || "nothing outside itself"}: ${rule.why})`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("the daemons' import closures hold no terminal UI, operator client or simulator", () => {
    const seen = new Set<string>();
    const todo = [...DAEMON_ENTRIES];
    for (const e of DAEMON_ENTRIES) expect(graph.imports.has(e), e).toBe(true);
    while (todo.length > 0) {
      const f = todo.pop()!;
      if (seen.has(f)) continue;
      seen.add(f);
      todo.push(...(graph.imports.get(f) ?? []));
    }
    expect([...seen].filter((f) => ["tui", "client", "sim", "shells/operator", "shells/demo"].includes(layerOf(f)))).toEqual([]);
  });

  it("core/ has no import cycle other than the known ones (KNOWN_CORE_CYCLES, to be emptied)", () => {
    const core = graph.files.filter((f) => layerOf(f) === "core");
    const found = cycles(core, (n) => (graph.imports.get(n) ?? []).filter((t) => layerOf(t) === "core"));
    const key = (c: readonly string[]): string => [...c].sort().join(" <-> ");
    const known = new Set(KNOWN_CORE_CYCLES.map(key));
    if (KNOWN_CORE_CYCLES.length > 0) console.log(`KNOWN_CORE_CYCLES (allowed until removed):\n${KNOWN_CORE_CYCLES.map((c) => `  ${key(c)}`).join("\n")}`);
    expect(
      found.map(key).filter((k) => !known.has(k)),
      "new import cycles in core/",
    ).toEqual([]);
    const stale = [...known].filter((k) => !found.map(key).includes(k));
    expect(stale, "cycles in KNOWN_CORE_CYCLES that are gone: remove them from the list").toEqual([]);
  });
});
