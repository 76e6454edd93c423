// The fast start of the deployed CLI: `node dist/bin/rvbox.js` after
// `npm run build`. bin/cli-dist.js (the build's last step) bundles the CLI
// into dist/cli/<build>/ and writes <build> into dist/bin/rvbox.js
// (BUILT_CLI in bin/rvbox.ts); this file, copied beside it by tsc, runs the
// commands bin/cli-routes.js sends to the bundle from there, as bin/rvbox.js
// does in the source tree. dist/ is immutable once built, so nothing is
// checked but that name: `tsc` run alone rewrites dist/bin/rvbox.js without
// it, and the compiled files then run as before; another build's bundle has
// another name. Nothing is written under the install directory: V8's compile
// cache goes to the user's cache directory (userCacheDir), or nowhere.
//
// `node dist/bin/rvbox.js` has started Node without the build's start-up
// snapshot; for a command that runs from it (bin/cli-routes.js), it replaces
// itself (process.execve, same pid) with `node --snapshot-blob … dist/bin/rvbox.js`
// when the snapshot's hard-linked Node is this very binary: one more start of
// Node costs less than evaluating the bundle (docs/PERFORMANCE.md, "The
// deployed CLI"). With Node flags of its own (`node --inspect …`) it stays.
import { existsSync, statSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { runsFromBundle, runsFromSnapshot } from "./cli-routes.js";

/** $XDG_CACHE_HOME/rvbox, else ~/.cache/rvbox; undefined with neither (a daemon's account without a home). */
export function userCacheDir(env) {
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, "rvbox");
  return env.HOME && path.isAbsolute(env.HOME) ? path.join(env.HOME, ".cache", "rvbox") : undefined;
}

/**
 * Runs `rvbox ...args` from the bundle `build` beside `script` (dist/bin/rvbox.js)
 * and returns true once its module has started the command; false when the
 * command does not run from the bundle or that bundle is not there.
 */
export async function startBuilt(build, script, args, env = process.env) {
  if (!runsFromBundle(args[0], env)) return false;
  const dir = path.join(path.dirname(script), "..", "cli", build);
  const entry = path.join(dir, "rvbox.js");
  if (!existsSync(entry)) return false;
  if (runsFromSnapshot(args[0], env) && process.execArgv.length === 0 && typeof process.execve === "function") {
    const snap = path.join(dir, "snapshot");
    if (sameFile(path.join(snap, "node"), process.execPath) && existsSync(path.join(snap, "blob"))) {
      process.execve(process.execPath, [process.execPath, "--snapshot-blob", path.join(snap, "blob"), script, ...args], env);
    }
  }
  const cache = userCacheDir(env);
  if (cache !== undefined) process.getBuiltinModule("node:module").enableCompileCache?.(path.join(cache, "v8"));
  if (env.RVBOX_BUNDLE_DEBUG === "1") process.stderr.write(`rvbox: start: bundle ${path.resolve(dir)}\n`);
  await import(pathToFileURL(entry).href);
  return true;
}

function sameFile(a, b) {
  try {
    const x = statSync(a);
    const y = statSync(b);
    return x.ino === y.ino && x.dev === y.dev;
  } catch {
    return false;
  }
}
