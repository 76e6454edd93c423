// `npm run build`'s last step, after tsc: the deployed CLI's fast start.
// `node bin/cli-dist.js [DIST]` (default dist/) writes
//   DIST/cli/<build>/rvbox.js + chunks   the CLI bundle (bin/cli-bundle.js's build of bin/rvbox.ts)
//   DIST/cli/<build>/snapshot/blob       its start-up snapshot (bin/cli-snapshot.js), made by
//   DIST/cli/<build>/snapshot/node       this Node, hard-linked here (a snapshot loads only into it)
// and stamps DIST/bin/rvbox.js with <build>: BUILT_CLI (bin/rvbox.ts), which
// `node DIST/bin/rvbox.js` reads to run the bundled commands from that bundle
// (bin/cli-built.js), and a first line that makes the file a program, as
// bin/rvbox.js's is: executed (a symlink on PATH, docs/DEPLOY.md), it starts
// node_modules/.bin/node from the snapshot when that is the binary that made
// it, and the daemons with their Node flags. Routing: bin/cli-routes.js.
//
// Never stale: <build> is new each build and named only by the stamped
// dist/bin/rvbox.js; a bare `tsc` rewrites that file unstamped (then no bundle
// runs), and a restored snapshot checks that its launcher names its build
// (bin/rvbox-snapshot.ts). Nothing under DIST is written after the build.
// Without esbuild (a pruned tree) or with a failing bundle, the build fails;
// without a snapshot (a file system without hard links), it says so and the
// bundle alone is used.
import { chmodSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildBundle } from "./cli-bundle.js";
import { DAEMON_ENV, DAEMON_NODE_FLAGS } from "./cli-child.js";
import { noSnapshotCases, UNBUNDLED_IMPORTS } from "./cli-routes.js";
import { buildSnapshot } from "./cli-snapshot.js";

/** What tsc emits for bin/rvbox.ts's BUILT_CLI; replaced once. */
const UNSTAMPED = 'const BUILT_CLI = "";';

/** The first line of a built dist/bin/rvbox.js (after `#!/bin/sh`); `build` names dist/cli/<build>. */
export function launcherLine(build) {
  const daemonEnv = Object.entries(DAEMON_ENV)
    .map(([k, v]) => `${k}="\${${k}:-${v}}"`)
    .join(" ");
  return [
    `":" //; s="$0"; [ -L "$s" ] && s=$(readlink -f "$s"); b="\${s%/*}"; n="$b/../../node_modules/.bin/node"; [ -x "$n" ] || n=node; c="$b/../cli/${build}/snapshot"`,
    `case "$RVBOX_BUNDLE$RVBOX_SNAPSHOT:$1" in ${noSnapshotCases()}) ;; *) [ -f "$c/blob" ] && [ "$c/node" -ef "$n" ] && RVBOX_LAUNCH=sh exec "$n" --snapshot-blob "$c/blob" "$s" "$@";; esac`,
    `case "$1" in server|agent) ${daemonEnv} exec "$n" ${DAEMON_NODE_FLAGS.join(" ")} "$s" "$@";; esac`,
    `exec "$n" "$s" "$@"`,
  ].join("; ");
}

/** Writes `build` into DIST/bin/rvbox.js (and shifts its source map by the two lines put in front). */
function stampLauncher(dist, build) {
  const file = path.join(dist, "bin/rvbox.js");
  const js = readFileSync(file, "utf8");
  if (js.split(UNSTAMPED).length !== 2) throw new Error(`${file}: expected one \`${UNSTAMPED}\` (run tsc -p tsconfig.build.json first)`);
  const header = `#!/bin/sh\n${launcherLine(build)}\n// ^ Executed as a program, a shell command (bin/cli-dist.js); to Node a string and a comment.\n`;
  writeFileSync(file, header + js.replace(UNSTAMPED, `const BUILT_CLI = ${JSON.stringify(build)};`));
  chmodSync(file, 0o755);
  const map = `${file}.map`;
  if (existsSync(map)) {
    const m = JSON.parse(readFileSync(map, "utf8"));
    m.mappings = `;;;${m.mappings}`;
    writeFileSync(map, JSON.stringify(m));
  }
}

/** Builds DIST's CLI bundle and snapshot and stamps its launcher; returns the build's name. */
export async function buildDistCli({ root, dist, debug = false }) {
  const cli = path.join(dist, "cli");
  rmSync(cli, { recursive: true, force: true });
  const entry = await buildBundle({ root, entry: "bin/rvbox.ts", dir: cli, unbundled: UNBUNDLED_IMPORTS });
  if (entry === undefined) throw new Error("the CLI bundle did not build (RVBOX_BUNDLE_DEBUG=1 shows esbuild's errors; is esbuild installed?)");
  // The source stamps of bin/rvbox.js's cache: a built dist/ is named by its launcher instead.
  rmSync(path.join(cli, "manifest.json"), { force: true });
  const build = path.basename(path.dirname(entry));
  const dir = path.join(cli, build);
  const id = await buildSnapshot({ root, dir, link: null, build, debug });
  if (id !== undefined) {
    renameSync(path.join(dir, id), path.join(dir, "snapshot"));
    rmSync(path.join(dir, "snapshot", "inputs.json"), { force: true });
  }
  stampLauncher(dist, build);
  return { build, snapshot: id !== undefined };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const dist = path.resolve(process.argv[2] ?? path.join(root, "dist"));
  const { build, snapshot } = await buildDistCli({ root, dist, debug: process.env.RVBOX_BUNDLE_DEBUG === "1" });
  process.stdout.write(
    `cli-dist: ${path.relative(process.cwd(), path.join(dist, "cli", build)) || "."}: CLI bundle${snapshot ? " and start-up snapshot" : " (no start-up snapshot: RVBOX_BUNDLE_DEBUG=1 says why)"}\n`,
  );
}
