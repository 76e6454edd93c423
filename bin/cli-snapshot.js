// The CLI's start-up snapshot: the short-lived `rvbox` commands (the
// operator commands, `version`, help) restored from a V8 heap snapshot in
// which every module of the operator client is already loaded and evaluated
// (ConnectRPC, protobuf-es and the descriptors of the generated `_pb` files,
// the CLI itself). Node's own start takes the same time with or without it;
// what the snapshot removes is everything after (docs/PERFORMANCE.md, "CLI
// start-up"; docs/ARCHITECTURE.md, "Start-up of the CLI").
//
// Layout: builds go into the tree's CLI cache (cli-bundle.js's cacheDirFor),
//   s<id>/blob         the snapshot (`node --snapshot-blob blob --build-snapshot`)
//   s<id>/node         a hard link to the Node binary that built it
//   s<id>/inputs.json  {version, id, root, inputs: stamps of every file read}
// and node_modules/.cache/rvbox-cli/snapshot, a symlink swapped by rename,
// names the current one. That one link is per node_modules, not per tree, so
// that a shell line can find it without computing the tree's cache name;
// trees sharing one node_modules (git worktrees with a symlinked
// node_modules) take turns, and a snapshot of the other tree is simply not
// used (the restored process checks its root).
//
// Who uses it: bin/rvbox.js's first line, when run as a program (`rvbox`,
// `./bin/rvbox.js`, node_modules/.bin/rvbox). That line execs
// `node --snapshot-blob .../snapshot/blob bin/rvbox.js ARGS` only if the blob
// exists and `.../snapshot/node` is the same file as node_modules/.bin/node
// (`test -ef`: a snapshot only loads into the binary that made it; npm
// replacing the binary makes the check fail, never a start that fails). The
// restored process (bin/rvbox-snapshot.ts) then checks, before anything else,
// that the snapshot is of this tree and that every input still has its
// recorded stamp; if not, it runs the command the old way (a child
// `node bin/rvbox.js`), as it does for the environment variables that are
// read while modules load (LOAD_TIME_ENV). `node bin/rvbox.js ...` never
// uses the snapshot (Node has already started without it).
//
// Who builds it: bin/rvbox.js, for a bundled command that reached it through
// the first line without a usable snapshot, starts `node bin/cli-snapshot.js
// build ROOT DIR` detached in the background (one at a time: a lock file), so
// the command itself never waits; the next start uses it. A failed build
// leaves nothing behind and everything works as before.
//
// What may not go into a snapshot: Node's http, http2, tls, net (and undici)
// hold native handles that V8 cannot serialize. The snapshot bundle therefore
// reads every built-in module through a lazy facade: the module is loaded on
// the first use of one of its exports, at run time. The modules in
// SNAPSHOT_SAFE_BUILTINS are used while modules evaluate and are part of
// Node's own start-up snapshot anyway.
import { closeSync, linkSync, mkdirSync, openSync, readFileSync, realpathSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { EXTERNAL_PACKAGES, LOADERS, pruneBuilds } from "./cli-bundle.js";
import { LOAD_TIME_ENV, UNBUNDLED_COMMANDS, UNBUNDLED_IMPORTS } from "./cli-routes.js";
import { inputsCurrent, stamp } from "./cli-stamps.js";

export const SNAPSHOT_VERSION = 1;
/** A lock older than this is taken to be a builder that died. */
const LOCK_STALE_MS = 120_000;
/**
 * After a failed build (a file system without hard links, a Node without
 * --build-snapshot, a full disk) no background build is started for this long,
 * so that every command does not pay for another failing one.
 */
const FAILED_RETRY_MS = 3_600_000;
/** The most a snapshot build may take before it is abandoned. */
const BUILD_TIMEOUT_MS = 120_000;
/** (bin/cli-routes.js, which dist/bin/rvbox.js reads too.) */
export { LOAD_TIME_ENV };
const SNAPSHOT_SAFE_BUILTINS = new Set([
  "fs",
  "fs/promises",
  "path",
  "url",
  "os",
  "events",
  "util",
  "buffer",
  "string_decoder",
  "v8",
  "module",
  "process",
  "timers",
  "stream",
  "assert",
  "tty",
  "zlib",
  "crypto",
]);

/** The symlink naming the current snapshot: one per node_modules (what bin/rvbox.js's first line reads). */
export function snapshotLink(root) {
  return path.join(root, "node_modules/.cache/rvbox-cli/snapshot");
}

/** The current snapshot's inputs.json if it is of `root` (a real path), current, and for this Node; else undefined. */
export function currentSnapshot(link, root) {
  let m;
  try {
    m = JSON.parse(readFileSync(path.join(link, "inputs.json"), "utf8"));
  } catch {
    return undefined;
  }
  if (m.version !== SNAPSHOT_VERSION || m.root !== root || !inputsCurrent(m.inputs)) return undefined;
  try {
    if (!sameFile(path.join(link, "node"), process.execPath)) return undefined;
    statSync(path.join(link, "blob"));
  } catch {
    return undefined;
  }
  return m;
}

function sameFile(a, b) {
  const x = statSync(a);
  const y = statSync(b);
  return x.ino === y.ino && x.dev === y.dev;
}

/**
 * Builds a snapshot of `root`'s CLI into `dir` and makes it current; returns
 * its id, or undefined if any step failed (nothing is left behind then).
 * `node` is the binary that will load it (hard-linked beside the blob).
 * `build` (with `link` null): the id of a `npm run build` of dist/ that this
 * snapshot belongs to (bin/cli-dist.js); no link is made, and a restored
 * process uses it only when started for that build's dist/bin/rvbox.js.
 */
export async function buildSnapshot({
  root,
  dir,
  link = snapshotLink(root),
  unbundled = UNBUNDLED_IMPORTS,
  commands = [...UNBUNDLED_COMMANDS],
  node = process.execPath,
  debug = false,
  build = "",
}) {
  root = realpathSync(root);
  let esbuild;
  try {
    esbuild = await import("esbuild");
  } catch {
    return undefined;
  }
  const id = `s${Date.now().toString(36)}-${process.pid}`;
  const tmp = path.join(dir, `${id}.tmp`);
  const inputs = new Map();
  const self = fileURLToPath(import.meta.url);
  for (const f of [
    self,
    fileURLToPath(new URL("./cli-stamps.js", import.meta.url)),
    fileURLToPath(new URL("./cli-bundle.js", import.meta.url)),
    fileURLToPath(new URL("./cli-routes.js", import.meta.url)),
    path.join(root, "tsconfig.json"),
    path.join(root, "tsconfig.base.json"),
  ]) {
    try {
      inputs.set(f, stamp(f));
    } catch {
      // an optional file that is not there
    }
  }
  try {
    inputs.set("esbuild", stamp(path.join(path.dirname(fileURLToPath(import.meta.resolve("esbuild"))), "..", "package.json")));
  } catch {
    // esbuild's version still shows in what it builds
  }
  try {
    mkdirSync(tmp, { recursive: true });
    const built = await esbuild.build({
      absWorkingDir: root,
      entryPoints: [path.join(root, "bin/rvbox-snapshot.ts")],
      bundle: true,
      format: "cjs",
      metafile: true,
      platform: "node",
      target: "node22",
      outfile: path.join(tmp, "snapshot.cjs"),
      external: ["esbuild"],
      inject: [path.join(root, "shells/operator/headers.ts")],
      // import.meta.resolve, rewritten per file below (CommonJS has no import.meta), and
      // the packages left out of the bundle, loaded from the tree's node_modules when
      // first used (a restored process's own require loads only built-ins).
      banner: {
        js: [
          'var __rvboxResolve = (base, s) => require("node:url").pathToFileURL(require("node:module").createRequire(base).resolve(s)).href;',
          `var __rvboxRequire = (s) => require("node:module").createRequire(${JSON.stringify(path.join(root, "package.json"))})(s);`,
        ].join("\n"),
      },
      logLevel: debug ? "error" : "silent",
      plugins: [
        {
          name: "rvbox-snapshot",
          setup(b) {
            // The daemons' and the TUI's modules never run from the snapshot.
            if (unbundled.length > 0) {
              const re = new RegExp(`^(${unbundled.map((u) => u.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})$`);
              b.onResolve({ filter: re }, (a) => ({ path: a.path, external: true }));
            }
            const externals = new RegExp(
              `^(${EXTERNAL_PACKAGES.map((e) => e.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]+")).join("|")})(/.*)?$`,
            );
            b.onResolve({ filter: externals }, (a) => ({ path: a.path, namespace: "rvbox-external" }));
            b.onLoad({ filter: /.*/, namespace: "rvbox-external" }, (a) => ({
              contents: `module.exports = __rvboxRequire(${JSON.stringify(a.path)});\n`,
              loader: "js",
            }));
            b.onResolve({ filter: /^(node:)?[a-z0-9_/]+$/ }, (a) =>
              isBuiltin(a.path) && process.getBuiltinModule(a.path) ? { path: a.path.replace(/^node:/, ""), namespace: "rvbox-builtin" } : undefined,
            );
            b.onLoad({ filter: /.*/, namespace: "rvbox-builtin" }, (a) => {
              const spec = JSON.stringify(`node:${a.path}`);
              if (SNAPSHOT_SAFE_BUILTINS.has(a.path)) return { contents: `module.exports = process.getBuiltinModule(${spec});\n`, loader: "js" };
              const mod = process.getBuiltinModule(`node:${a.path}`);
              const names = Object.keys(mod).filter((k) => k !== "default");
              return {
                contents:
                  `let m;\nconst load = () => (m ??= process.getBuiltinModule(${spec}));\n` +
                  names
                    .map((n) => `Object.defineProperty(exports, ${JSON.stringify(n)}, { get: () => load()[${JSON.stringify(n)}], enumerable: true });`)
                    .join("\n") +
                  `\nObject.defineProperty(exports, "default", { get: load });\n`,
                loader: "js",
              };
            });
            b.onLoad({ filter: /.*/ }, (a) => {
              if (a.namespace !== "file") return undefined;
              const st = stamp(a.path); // before the read: an edit after it changes ctime
              let contents = readFileSync(a.path, "utf8");
              inputs.set(a.path, st);
              if (contents.includes("import.meta")) {
                const url = JSON.stringify(pathToFileURL(a.path).href);
                contents = contents
                  .replaceAll("import.meta.url", url)
                  .replaceAll("import.meta.dirname", JSON.stringify(path.dirname(a.path)))
                  .replaceAll("import.meta.filename", JSON.stringify(a.path))
                  .replaceAll("import.meta.resolve(", `__rvboxResolve(${url}, `);
              }
              return { contents, loader: LOADERS[path.extname(a.path)] ?? "default" };
            });
          },
        },
      ],
    });
    if (process.env.RVBOX_SNAPSHOT_META) writeFileSync(process.env.RVBOX_SNAPSHOT_META, JSON.stringify(built.metafile));
    const env = {
      ...process.env,
      RVBOX_SNAPSHOT_ROOT: root,
      RVBOX_SNAPSHOT_INPUTS: path.join(dir, id, "inputs.json"),
      RVBOX_SNAPSHOT_COMMANDS: commands.join(","),
      RVBOX_SNAPSHOT_LOAD_ENV: LOAD_TIME_ENV.join(","),
      RVBOX_SNAPSHOT_BUILD: build,
    };
    for (const k of LOAD_TIME_ENV) delete env[k];
    delete env.NODE_OPTIONS;
    const { spawnSync } = process.getBuiltinModule("node:child_process");
    const r = spawnSync(node, ["--snapshot-blob", path.join(tmp, "blob"), "--build-snapshot", path.join(tmp, "snapshot.cjs")], {
      cwd: tmp,
      env,
      stdio: ["ignore", "ignore", debug ? "inherit" : "ignore"],
      timeout: BUILD_TIMEOUT_MS,
    });
    if (r.status !== 0) throw new Error(`snapshot build exited ${r.status ?? r.signal}`);
    rmSync(path.join(tmp, "snapshot.cjs"));
    linkSync(realpathSync(node), path.join(tmp, "node"));
    writeFileSync(path.join(tmp, "inputs.json"), JSON.stringify({ version: SNAPSHOT_VERSION, id, root, inputs: [...inputs.values()] }));
    renameSync(tmp, path.join(dir, id));
    if (link === null) return id; // a build of dist/ (bin/cli-dist.js): its launcher names it
    const next = `${link}.${process.pid}.tmp`;
    mkdirSync(path.dirname(link), { recursive: true });
    rmSync(next, { force: true });
    symlinkSync(path.join(dir, id), next);
    renameSync(next, link);
    rmSync(path.join(dir, "snapshot.failed"), { force: true });
    pruneBuilds(dir, id, "s");
    return id;
  } catch (err) {
    if (debug) process.stderr.write(`rvbox: snapshot build failed: ${err instanceof Error ? err.message : String(err)}\n`);
    rmSync(tmp, { recursive: true, force: true });
    return undefined;
  }
}

/**
 * Starts a detached background build unless one is running (a lock file in
 * `dir`); returns at once. The command that asked never waits for it.
 */
export function buildSnapshotInBackground({ root, dir }) {
  const lock = path.join(dir, "snapshot.lock");
  try {
    if (Date.now() - statSync(path.join(dir, "snapshot.failed")).mtimeMs < FAILED_RETRY_MS) return false;
  } catch {
    // no recent failure
  }
  try {
    mkdirSync(dir, { recursive: true });
    try {
      closeSync(openSync(lock, "wx"));
    } catch {
      if (Date.now() - statSync(lock).mtimeMs < LOCK_STALE_MS) return false; // another build is running
      rmSync(lock, { force: true });
      closeSync(openSync(lock, "wx"));
    }
    // child_process is read here, not imported: this module is loaded on every
    // start that could not use a snapshot, and child_process costs ~12 ms.
    const { spawn } = process.getBuiltinModule("node:child_process");
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "build", root, dir, lock], {
      detached: true,
      stdio: "ignore",
      env: process.env,
    });
    child.on("error", () => rmSync(lock, { force: true }));
    child.unref();
    return true;
  } catch {
    return false;
  }
}

// `node bin/cli-snapshot.js build ROOT DIR [LOCK]`: what buildSnapshotInBackground runs.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url) && process.argv[2] === "build") {
  const [root, dir, lock] = process.argv.slice(3);
  try {
    const id = await buildSnapshot({ root, dir, debug: process.env.RVBOX_BUNDLE_DEBUG === "1" });
    if (process.env.RVBOX_BUNDLE_DEBUG === "1") process.stderr.write(`rvbox: snapshot ${id ?? "not built"}\n`);
    process.exitCode = id === undefined ? 1 : 0;
    if (id === undefined) {
      try {
        writeFileSync(path.join(dir, "snapshot.failed"), `${new Date().toISOString()}\n`);
      } catch {
        // nowhere to write it: the lock's age still spaces the attempts
      }
    }
  } finally {
    if (lock) rmSync(lock, { force: true });
  }
}
