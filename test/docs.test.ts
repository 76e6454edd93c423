import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { generate } from "../scripts/spec-coverage.js";

const root = resolve(import.meta.dirname, "..");

const specFile = resolve(root, "../shared/spec/requirements.md");
// Without the spec the check below cannot run: it fails, saying so, unless the run says it has no spec.
const noSpecAllowed = process.env.RVBOX_NO_SPEC === "1";
if (!existsSync(specFile) && noSpecAllowed) console.warn(`docs.test.ts: SKIPPED the SPEC-COVERAGE check: no spec at ${specFile} (RVBOX_NO_SPEC=1)`);

describe("docs", () => {
  it.skipIf(!existsSync(specFile) && noSpecAllowed)("SPEC-COVERAGE.md is current with the requirements and the test names", () => {
    expect(existsSync(specFile), `the spec is not at ${specFile}: check out ../shared/spec beside the tree, or set RVBOX_NO_SPEC=1 to skip this check`).toBe(
      true,
    );
    expect(readFileSync(resolve(root, "docs/SPEC-COVERAGE.md"), "utf8")).toBe(generate());
  });
});

describe("SPEC-COVERAGE code pointers", () => {
  it("every file a requirement's code pointer names exists, and each function named after it is defined there", async () => {
    const { CODE } = await import("../scripts/spec-coverage.js");
    const stale: string[] = [];
    for (const [id, text] of Object.entries(CODE)) {
      // "core/server/ingest.ts `handleCommandEvent` (…), `releaseAck`; shells/zstd/decompress.ts `decompressValidated`"
      for (const part of text.split(";")) {
        const m = /((?:core|shells|sim|client|tui|bin|scripts)\/[\w./-]+\.tsx?)/.exec(part);
        if (!m) continue;
        const file = resolve(root, m[1]!);
        if (!existsSync(file)) {
          stale.push(`${id}: ${m[1]} does not exist`);
          continue;
        }
        const src = readFileSync(file, "utf8");
        // The names up to the next file named, outside parentheses (which describe, not name).
        const after = part
          .slice(m.index + m[1]!.length)
          .split(/\b[\w-]+\.tsx?\b/)[0]!
          .replace(/\([^)]*\)/g, "");
        for (const [, name] of after.matchAll(/`([A-Za-z_$][\w$]*)`/g)) {
          if (!new RegExp(`\\b${name}\\b`).test(src)) stale.push(`${id}: \`${name}\` is not in ${m[1]}`);
        }
      }
    }
    expect(stale).toEqual([]);
  });
});

describe("docs/CONFIG.md", () => {
  const text = readFileSync(resolve(__dirname, "../docs/CONFIG.md"), "utf8");
  /** The rows of the table under a heading: key -> default column. */
  const table = (heading: string): Map<string, string> => {
    const start = text.indexOf(`\n${heading}\n`);
    expect(start, heading).toBeGreaterThan(0);
    const rows = new Map<string, string>();
    for (const line of text.slice(start + heading.length + 2).split("\n")) {
      if (line.startsWith("#")) break;
      const m = /^\| `([^`]+)` \| [^|]* \| ([^|]*) \|/.exec(line);
      if (m) rows.set(m[1]!, m[2]!.trim());
    }
    return rows;
  };

  it("lists every flag of both daemons", async () => {
    const { SERVER_OPTIONS } = await import("../shells/cli/server-cli.js");
    const { AGENT_OPTIONS } = await import("../shells/cli/agent-cli.js");
    expect([...table("## Server (`rvbox server`)").keys()].sort()).toEqual(Object.keys(SERVER_OPTIONS).sort());
    expect([...table("## Agent (`rvbox agent`)").keys()].sort()).toEqual(Object.keys(AGENT_OPTIONS).sort());
  });

  it("lists every configurable limit of both daemons with its actual default", async () => {
    const { defaultServerConfig, defaultAgentConfig } = await import("../core/index.js");
    for (const [heading, limits] of [
      // historyInStore is the store's to set, not a configurable limit.
      ['### Server limits (`"limits": {…}`)', (({ historyInStore: _, ...rest }) => rest)(defaultServerConfig().limits)],
      ['### Agent limits (`"limits": {…}`)', defaultAgentConfig("x").limits],
    ] as const) {
      const rows = table(heading);
      expect([...rows.keys()].sort(), heading).toEqual(Object.keys(limits).sort());
      for (const [k, v] of Object.entries(limits)) expect(Number(/^\d+/.exec(rows.get(k)!)?.[0]), `${heading} ${k}`).toBe(v);
    }
  });
});

describe("small facts the docs state (issue 41 item 7)", () => {
  it("OPERATOR.md's key table names every TUI tab and its number key", async () => {
    const { TABS } = await import("../tui/views/header.js");
    const doc = readFileSync(resolve(root, "docs/OPERATOR.md"), "utf8");
    const row = doc.split("\n").find((l) => l.startsWith("| `tab` / `shift-tab`"));
    expect(row).toBe(`| \`tab\` / \`shift-tab\`, \`1\`–\`${TABS.length}\` | ${TABS.join(", ")} |`);
  });

  it("the README's count of EBADENGINE warnings is the lockfile's packages that refuse Node 20 (Debian's), the project included", () => {
    const semver = createRequire(import.meta.url)("semver") as { satisfies(v: string, range: string): boolean };
    const lock = JSON.parse(readFileSync(resolve(root, "package-lock.json"), "utf8")) as {
      packages: Record<string, { engines?: { node?: string }; os?: string[]; cpu?: string[] }>;
    };
    // npm ci on linux-x64 installs (and checks) every package but those for another os or cpu.
    const refusing = Object.values(lock.packages).filter(
      (p) =>
        p.engines?.node !== undefined && (p.os?.includes("linux") ?? true) && (p.cpu?.includes("x64") ?? true) && !semver.satisfies("20.19.0", p.engines.node),
    ).length;
    const readme = readFileSync(resolve(root, "README.md"), "utf8");
    expect(/`npm ci` prints (\d+) `EBADENGINE`/.exec(readme)?.[1]).toBe(String(refusing));
  });
});

describe("README: a real fleet (issue 41 item 8)", () => {
  const readme = readFileSync(resolve(root, "README.md"), "utf8");
  const start = readme.indexOf("## A real fleet");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));

  it("sets RVBOX_SERVER and RVBOX_TOKEN_FILE, and says plainly that Ctrl-C and | head leave the command running unless --cancel-on-interrupt", () => {
    expect(start).toBeGreaterThan(0);
    expect(section).toMatch(/export RVBOX_SERVER=\S+ RVBOX_TOKEN_FILE=/);
    expect(section).toMatch(/Ctrl-C detaches/);
    expect(section).toMatch(/\| head/);
    expect(section).toMatch(/--cancel-on-interrupt/);
  });

  it("its daemons' flags are flags the daemons have", async () => {
    const { SERVER_OPTIONS } = await import("../shells/cli/server-cli.js");
    const { AGENT_OPTIONS } = await import("../shells/cli/agent-cli.js");
    const joined = section.replace(/\\\n\s*/g, " ");
    const lines = joined.split("\n").filter((l) => /^rvbox (server|agent) /.test(l));
    expect(lines).toHaveLength(3);
    for (const l of lines) {
      const known = l.startsWith("rvbox server") ? SERVER_OPTIONS : AGENT_OPTIONS;
      for (const [, flag] of l.matchAll(/ --([a-z-]+)/g)) expect(Object.keys(known), `${flag} in ${l}`).toContain(flag);
    }
  });
});
