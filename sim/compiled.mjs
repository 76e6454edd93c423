// Run the simulator as precompiled JavaScript: `npm run sim` and
// `npm run sim:bench` land here.
//
//   node sim/compiled.mjs cli ARGS...      the simulator CLI (sim/cli.ts)
//   node sim/compiled.mjs bench ARGS...    the bench (sim/bench.ts)
//
// Under tsx every module is transformed at load, in the main thread and again
// in each campaign worker, and esbuild's keepNames wraps every function in a
// __name call. Here sim/cli.ts, sim/bench.ts and sim/campaign-worker.ts are
// bundled once with the esbuild tsx ships (no keepNames, source maps on)
// into a directory named by a SHA-256 of every source file they can load
// (sim/, core/, protos/gen/, package-lock.json) and of this file, and run
// from there: a changed source builds a new bundle, an unchanged one is
// reused. Same code, same seed, same trace hash as `npx tsx sim/cli.ts`.
//
// Environment: RVBOX_SIM_CACHE (default: the OS temp directory) holds the bundles.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = fileURLToPath(import.meta.url);
const root = resolve(dirname(here), "..");
const ENTRIES = ["cli", "bench", "campaign-worker"];

function files(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .flatMap((f) => {
      const p = join(dir, f);
      return statSync(p).isDirectory() ? files(p) : /\.(ts|mjs|js|json)$/.test(f) ? [p] : [];
    });
}

function sourceHash() {
  const h = createHash("sha256");
  for (const f of [here, join(root, "package-lock.json"), ...files(join(root, "sim")), ...files(join(root, "core")), ...files(join(root, "protos", "gen"))]) {
    if (!existsSync(f)) continue;
    h.update(relative(root, f)).update("\0").update(readFileSync(f)).update("\0");
  }
  return h.digest("hex").slice(0, 20);
}

async function ensureBuilt() {
  const dir = join(process.env.RVBOX_SIM_CACHE || tmpdir(), `rvbox-sim-${sourceHash()}`);
  if (existsSync(join(dir, "cli.js"))) return dir;
  // esbuild comes with tsx (a dev dependency): resolve it from there.
  const esbuild = createRequire(createRequire(import.meta.url).resolve("tsx"))("esbuild");
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  await esbuild.build({
    entryPoints: ENTRIES.map((e) => join(root, "sim", `${e}.ts`)),
    outdir: tmp,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node22",
    sourcemap: true,
    logLevel: "warning",
    // CommonJS code inside the bundle that require()s a Node built-in gets a real require.
    banner: { js: "import { createRequire as __rvboxCreateRequire } from 'node:module'; const require = __rvboxCreateRequire(import.meta.url);" },
  });
  try {
    renameSync(tmp, dir);
  } catch (e) {
    // Another process built the same sources first: use its bundle.
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(join(dir, "cli.js"))) throw e;
  }
  return dir;
}

const [entry, ...rest] = process.argv.slice(2);
if (entry !== "cli" && entry !== "bench") {
  console.error("usage: node sim/compiled.mjs cli|bench ARGS...");
  process.exit(2);
}
process.setSourceMapsEnabled(true);
const dir = await ensureBuilt();
if (entry === "bench") {
  process.argv = [process.argv[0], join(dir, "bench.js"), ...rest];
  await import(pathToFileURL(join(dir, "bench.js")).href);
} else {
  const cli = await import(pathToFileURL(join(dir, "cli.js")).href);
  cli.quietOnEpipe();
  process.exitCode = await cli.simMain(rest);
}
