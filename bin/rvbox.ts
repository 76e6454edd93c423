/**
 * rvbox's entry: runs the command line (bin/rvbox-main.ts) and exits with its code.
 *
 * Compiled, this is dist/bin/rvbox.js, which a deployment may start with any
 * `node` (`node /opt/rvbox/dist/bin/rvbox.js server …` on a host whose system
 * Node is Debian's 20). RVBox needs Node >= 22.15 (native zstd): on an older
 * Node this file re-executes itself under the project's own Node
 * (node_modules/.bin/node, installed by `npm ci`), as bin/rvbox.js does, with
 * signals and the exit code passed through; without one it says so and exits
 * 1. Nothing of the command line is loaded before that check.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { refuseNonUtf8Args } from "./argv-utf8.js";

// dist/bin/rvbox.js is started directly (the units); bin/rvbox.js checked already, the same bytes.
refuseNonUtf8Args();

/**
 * The CLI bundle `npm run build` made for this dist/ (bin/cli-dist.js writes its
 * name here, in dist/bin/rvbox.js only): the operator commands, `version` and
 * help run from dist/cli/<it>/ (bin/cli-built.js), the daemons from the compiled
 * files. "" in the sources, in the bundle itself, and after a bare `tsc`.
 */
const BUILT_CLI: string = "";

const MIN = [22, 15] as const;
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);

if (major < MIN[0] || (major === MIN[0] && minor < MIN[1])) {
  // dist/bin/rvbox.js: the tree's root is two levels up (bin/rvbox.js handles the source tree).
  const packaged = fileURLToPath(new URL("../../node_modules/.bin/node", import.meta.url));
  if (process.env.RVBOX_REEXEC === "1" || !existsSync(packaged)) {
    process.stderr.write(
      `rvbox: Node ${process.version} is too old; RVBox needs Node >= ${MIN[0]}.${MIN[1]} (24 LTS recommended).\n` +
        (existsSync(packaged)
          ? `rvbox: ${packaged} is older too; run \`npm ci\` again.\n`
          : "rvbox: `npm ci` installs Node 24 as node_modules/.bin/node on linux-x64; elsewhere run rvbox with Node 24 LTS.\n"),
    );
    process.exit(1);
  }
  const { reexecEnv, reexecFlags, runChild } = await import("./cli-child.js");
  const args = process.argv.slice(2);
  runChild(packaged, [...reexecFlags(process.execArgv, args), fileURLToPath(import.meta.url), ...args], { ...reexecEnv(process.env, args), RVBOX_REEXEC: "1" });
} else {
  // `node dist/bin/rvbox.js server|agent` without the daemons' Node flags and
  // environment replaces itself with a process that has them (cli-child.js).
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
  // Set by the first line of a built dist/bin/rvbox.js; nothing this process starts should see it.
  delete process.env.RVBOX_LAUNCH;
  const built = BUILT_CLI !== "" && (await (await import("./cli-built.js")).startBuilt(BUILT_CLI, fileURLToPath(import.meta.url), process.argv.slice(2)));
  if (!built) {
    const { main } = await import("./rvbox-main.js");
    main(process.argv.slice(2)).then(
      (code) => process.exit(code),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  }
}
