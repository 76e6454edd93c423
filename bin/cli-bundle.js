// The fast start of the short-lived `rvbox` commands (the operator commands,
// `version`, help): bin/rvbox.ts bundled by esbuild into one ESM file plus
// lazily loaded chunks, built on first use into node_modules/.cache/rvbox-cli/
// and reused while none of its inputs changed. The daemons, the demo, the TUI
// and the simulator keep running the sources through tsx (bin/rvbox.js).
//
// Why: through tsx, `rvbox clients` spent most of its time loading tsx,
// transforming ~100 TypeScript files and resolving ~150 module files of
// ConnectRPC and protobuf-es; the bundle is a handful of files that V8's
// compile cache (module.enableCompileCache, same directory) then skips
// parsing as well. Figures: docs/PERFORMANCE.md, "CLI start-up".
//
// Never stale: the manifest records, for every file esbuild read (each one is
// read through this file's onLoad hook, stat taken *before* the read), its
// inode, size, mtime and ctime in nanoseconds, plus the tsconfig files, this
// file and esbuild's own package.json. Any write to a file changes its ctime
// (which, unlike mtime, user space cannot set back), so one differing field
// rebuilds; an input that no longer exists rebuilds. A build that fails (a
// syntax error, a read-only cache) returns undefined and the caller runs the
// sources through tsx, which reports the error as before.
//
// Environment: RVBOX_BUNDLE=0 skips the bundle (tsx always);
// RVBOX_BUNDLE_DEBUG=1 prints esbuild's own errors when a build fails
// (silent by default: the tsx fallback reports the same error).
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import path from "node:path";
import { inputsCurrent, stamp } from "./cli-stamps.js";

const MANIFEST_VERSION = 2;
const KEEP_BUILDS = 3;
/** esbuild loaders by file extension (also the snapshot builder's, bin/cli-snapshot.js). */
export const LOADERS = { ".ts": "ts", ".mts": "ts", ".cts": "ts", ".tsx": "tsx", ".js": "js", ".mjs": "js", ".cjs": "js", ".jsx": "jsx", ".json": "json" };

/** Never resolved inside the bundle: packages the bundled commands do not load (the TUI's, native/wasm ones). */
export const EXTERNAL_PACKAGES = ["ink", "ink-*", "react", "react/*", "react-devtools-core", "sql.js", "zstd-codec", "fzstd", "ws"];

/** The cache directory of one source tree (the tree's real path, made a file name: no hashing on the fast path). */
export function cacheDirFor(root, cacheRoot = path.join(root, "node_modules/.cache/rvbox-cli")) {
  let real = root;
  try {
    real = realpathSync(root);
  } catch {
    // not there (yet): its path as given
  }
  return path.join(cacheRoot, real.replace(/[^A-Za-z0-9._-]/g, "_"));
}

/**
 * The bundle's entry file if the cached one is current, else undefined.
 * Costs one read of the manifest and one stat per input (~150 files).
 */
export function currentBundle(dir) {
  let m;
  try {
    m = JSON.parse(readFileSync(path.join(dir, "manifest.json"), "utf8"));
  } catch {
    return undefined;
  }
  if (m.version !== MANIFEST_VERSION || typeof m.entry !== "string" || !inputsCurrent(m.inputs)) return undefined;
  return path.join(dir, m.entry);
}

/**
 * Builds `entry` (a path inside `root`) into a new directory under `dir`,
 * records its inputs, and returns the new entry file; undefined on failure.
 * `unbundled` names import specifiers left out of the bundle (modules of the
 * commands that run through tsx instead; importing one from the bundle fails).
 */
export async function buildBundle({ root, entry, dir, unbundled = [], external = EXTERNAL_PACKAGES, self = new URL(import.meta.url).pathname }) {
  let esbuild;
  try {
    esbuild = await import("esbuild");
  } catch {
    return undefined;
  }
  const inputs = new Map();
  const pre = [self, path.join(root, "tsconfig.json"), path.join(root, "tsconfig.base.json")];
  try {
    pre.push(path.join(path.dirname(new URL(import.meta.resolve("esbuild")).pathname), "..", "package.json"));
  } catch {
    // esbuild without a resolvable package.json: its version still shows in the build's output
  }
  for (const f of pre) {
    try {
      inputs.set(f, stamp(f));
    } catch {
      // an optional file (tsconfig.base.json) that is not there
    }
  }
  const id = `b${Date.now().toString(36)}-${process.pid}`;
  const tmp = path.join(dir, `${id}.tmp`);
  try {
    mkdirSync(dir, { recursive: true });
    await esbuild.build({
      absWorkingDir: root,
      entryPoints: [path.resolve(root, entry)],
      bundle: true,
      splitting: true,
      format: "esm",
      platform: "node",
      target: "node22",
      outdir: tmp,
      entryNames: "[name]",
      external,
      // Every free \`Headers\` in the bundle (ConnectRPC's) is the CLI's own class:
      // Node's global one loads all of undici on first use (shells/operator/headers.ts).
      inject: [path.join(root, "shells/operator/headers.ts")].filter((f) => existsSync(f)),
      logLevel: process.env.RVBOX_BUNDLE_DEBUG ? "error" : "silent",
      plugins: [
        {
          name: "rvbox-inputs",
          setup(b) {
            if (unbundled.length > 0) {
              const re = new RegExp(`^(${unbundled.map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})$`);
              b.onResolve({ filter: re }, (a) => ({ path: `rvbox-unbundled:${a.path}`, external: true }));
            }
            // Node's built-in modules through process.getBuiltinModule instead of
            // ESM imports: an ESM import of a built-in builds a facade that reads
            // every export, lazy getters included (node:http's loads undici, about
            // 40 ms; node:util's, 30 ms). Only data properties are re-exported; a
            // name the sources import that is a getter fails the build (then tsx).
            b.onResolve({ filter: /^(node:)?[a-z0-9_/]+$/ }, (a) =>
              isBuiltin(a.path) && process.getBuiltinModule(a.path) ? { path: a.path.replace(/^node:/, ""), namespace: "rvbox-builtin" } : undefined,
            );
            b.onLoad({ filter: /.*/, namespace: "rvbox-builtin" }, (a) => {
              const spec = JSON.stringify(`node:${a.path}`);
              const mod = process.getBuiltinModule(`node:${a.path}`);
              const names = Object.keys(mod).filter(
                (k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== "default" && "value" in (Object.getOwnPropertyDescriptor(mod, k) ?? {}),
              );
              return {
                contents: `const m = process.getBuiltinModule(${spec});\nexport default m;\n${names.map((n) => `export const ${n} = m.${n};`).join("\n")}\n`,
                loader: "js",
              };
            });
            b.onLoad({ filter: /.*/ }, (a) => {
              if (a.namespace !== "file") return undefined;
              const st = stamp(a.path); // before the read: an edit after it changes ctime, so the next start rebuilds
              const contents = readFileSync(a.path);
              inputs.set(a.path, st);
              return { contents, loader: LOADERS[path.extname(a.path)] ?? "default" };
            });
          },
        },
      ],
    });
    renameSync(tmp, path.join(dir, id));
    const name = `${path.basename(entry).replace(/\.[cm]?[jt]sx?$/, "")}.js`;
    const manifest = { version: MANIFEST_VERSION, entry: `${id}/${name}`, inputs: [...inputs.values()] };
    const mtmp = path.join(dir, `manifest.json.${process.pid}`);
    writeFileSync(mtmp, JSON.stringify(manifest));
    renameSync(mtmp, path.join(dir, "manifest.json"));
    pruneBuilds(dir, id, "b");
    return path.join(dir, manifest.entry);
  } catch {
    rmSync(tmp, { recursive: true, force: true });
    return undefined;
  } finally {
    // esbuild's service process would otherwise live as long as this one: a
    // resident client (RVBOX_PERSIST) started by a build kept it for its whole life.
    await esbuild.stop?.();
  }
}

/**
 * Old builds go; the newest few stay, for a process still loading from one.
 * `prefix`: "b" for bundles, "s" for start-up snapshots (bin/cli-snapshot.js).
 */
export function pruneBuilds(dir, current, prefix) {
  try {
    const re = new RegExp(`^${prefix}[0-9a-z]+-\\d+(\\.tmp)?$`);
    const builds = readdirSync(dir)
      .filter((n) => re.test(n) && n !== current)
      .sort();
    for (const n of builds.slice(0, Math.max(0, builds.length - (KEEP_BUILDS - 1)))) rmSync(path.join(dir, n), { recursive: true, force: true });
  } catch {
    // pruning is best effort
  }
}
