/**
 * The CLI bundle (bin/cli-bundle.js) that bin/rvbox.js runs for the operator
 * commands: never stale after an edit, and the same sources and Node as the
 * tsx path. (Not a protocol requirement; the start-up path of issue 11.)
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { BIN, ROOT } from "../shells/e2e/helpers.js";

// @ts-expect-error plain JS module without declarations
const bundle = (await import("../../bin/cli-bundle.js")) as {
  buildBundle(o: { root: string; entry: string; dir: string; unbundled?: string[] }): Promise<string | undefined>;
  currentBundle(dir: string): string | undefined;
  cacheDirFor(root: string, cacheRoot?: string): string;
};

const tmp = mkdtempSync(path.join(tmpdir(), "rvbox-bundle-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function project(name: string): { root: string; dir: string; dep: string } {
  const root = path.join(tmp, name);
  mkdirSync(path.join(root, "src"), { recursive: true });
  writeFileSync(path.join(root, "tsconfig.json"), "{}\n");
  writeFileSync(path.join(root, "src/main.ts"), 'import { value } from "./dep.js";\nconst n: number = value;\nconsole.log(`value ${n}`);\n');
  const dep = path.join(root, "src/dep.ts");
  writeFileSync(dep, "export const value = 1;\n");
  return { root, dir: path.join(root, "cache"), dep };
}

function run(entry: string): string {
  return execFileSync(process.execPath, [entry], { encoding: "utf8" }).trim();
}

async function entryFor(p: { root: string; dir: string }): Promise<string> {
  const cached = bundle.currentBundle(p.dir);
  if (cached !== undefined) return cached;
  const built = await bundle.buildBundle({ root: p.root, entry: "src/main.ts", dir: p.dir });
  expect(built).toBeDefined();
  return built!;
}

describe("CLI bundle cache", () => {
  it("is reused while nothing changed, and rebuilt after an edit of the same size whose mtime is put back", async () => {
    const p = project("same-size");
    const first = await entryFor(p);
    expect(run(first)).toBe("value 1");
    expect(bundle.currentBundle(p.dir)).toBe(first);
    const before = statSync(p.dep);
    writeFileSync(p.dep, "export const value = 2;\n"); // same length
    utimesSync(p.dep, before.atime, before.mtime); // mtime as it was: only ctime tells
    expect(statSync(p.dep).size).toBe(before.size);
    expect(bundle.currentBundle(p.dir)).toBeUndefined();
    const second = await entryFor(p);
    expect(second).not.toBe(first);
    expect(run(second)).toBe("value 2");
  });

  it("is rebuilt when an input is deleted or the tsconfig changes; a build that fails returns undefined", async () => {
    const p = project("deleted");
    await entryFor(p);
    writeFileSync(path.join(p.root, "tsconfig.json"), '{ "compilerOptions": {} }\n');
    expect(bundle.currentBundle(p.dir)).toBeUndefined();
    await entryFor(p);
    expect(bundle.currentBundle(p.dir)).toBeDefined();
    rmSync(p.dep);
    expect(bundle.currentBundle(p.dir)).toBeUndefined();
    expect(await bundle.buildBundle({ root: p.root, entry: "src/main.ts", dir: p.dir })).toBeUndefined(); // ./dep.js is gone
    expect(readdirSync(p.dir).filter((n) => n.endsWith(".tmp"))).toEqual([]);
  });

  it("keys the cache by the tree's real path, so two worktrees sharing node_modules never share a manifest", () => {
    expect(bundle.cacheDirFor("/work/a", "/c")).not.toBe(bundle.cacheDirFor("/work/b", "/c"));
  });
});

describe("rvbox through the bundle", () => {
  const env: NodeJS.ProcessEnv = { ...process.env, RVBOX_SERVER: "http://127.0.0.1:1" };
  delete env.RVBOX_BUNDLE;

  it("`rvbox --version` and `rvbox version` print the version and this Node, bundled and through tsx alike", () => {
    for (const argv of [["--version"], ["version"]]) {
      for (const extra of [{}, { RVBOX_BUNDLE: "0" }]) {
        const r = spawnSync(process.execPath, [BIN, ...argv], { cwd: ROOT, env: { ...env, ...extra }, encoding: "utf8" });
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toMatch(/^rvbox \d+\.\d+\.\d+ on Node v\d+/);
        expect(r.stdout).toContain(`(${process.execPath})`);
      }
    }
  });

  it("an operator command loads the current bundle, and neither tsx, ink, react nor any .ts file", () => {
    // What the bundle's own process loads: ask it, from a preload that reports loaded files at exit.
    const hook = path.join(tmp, "loaded.mjs");
    writeFileSync(
      hook,
      'import { registerHooks } from "node:module";\nconst seen = [];\nregisterHooks({ load(url, ctx, next) { seen.push(url); return next(url, ctx); } });\nprocess.on("exit", () => process.stderr.write("LOADED " + JSON.stringify(seen) + "\\n"));\n',
    );
    const t = spawnSync(process.execPath, ["--import", hook, BIN, "clients", "--help"], { cwd: ROOT, env, encoding: "utf8" });
    expect(t.status, t.stderr).toBe(0);
    const loaded = JSON.parse(/LOADED (.*)/.exec(t.stderr)![1]!) as string[];
    expect(loaded.some((u) => u.includes("/rvbox-cli/"))).toBe(true);
    expect(loaded.filter((u) => /\/(tsx|ink|react)\//.test(u) || u.endsWith(".ts"))).toEqual([]);
    const entry = bundle.currentBundle(bundle.cacheDirFor(ROOT));
    expect(entry).toBeDefined();
    expect(loaded).toContain(pathToFileURL(realpathSync(entry!)).href);
  });
});
