// Which `rvbox` commands run from the CLI bundle and the start-up snapshot
// (the operator commands, `version`, help) and which run the sources through
// tsx (bin/rvbox.js, bin/cli-bundle.js, bin/cli-snapshot.js read this file;
// the first line of bin/rvbox.js repeats UNBUNDLED_COMMANDS in its `case`).
//
// Long-running or heavy commands run the sources through tsx as they always
// did; every other command (the operator commands, version, help) runs the
// esbuild bundle of bin/rvbox.ts that bin/cli-bundle.js keeps current, or tsx
// when it cannot build one. RVBOX_BUNDLE=0 forces tsx.
// `completion` reads the daemons' own option tables (it imports their CLIs), so it
// runs through tsx too: it runs once per install, not per keystroke (`__complete`,
// what a TAB runs, is bundled).
export const UNBUNDLED_COMMANDS = new Set(["server", "agent", "demo", "sim", "tui", "completion"]);
/** Their modules, left out of the bundle (bin/rvbox.ts and shells/operator/cli.ts import them lazily). */
export const UNBUNDLED_IMPORTS = [
  "../shells/cli/completion-cli.js",
  "../shells/cli/server-cli.js",
  "../shells/cli/agent-cli.js",
  "../shells/demo/demo.js",
  "../sim/cli.js",
  "./tui-open.js",
];

/**
 * Bundled commands that still never start from the start-up snapshot: help and
 * version (and no command at all) load too little to gain from it.
 */
export const SNAPSHOT_SKIPPED = ["", "help", "-h", "--help", "version", "-V", "--version"];

/** Does `rvbox CMD …` run from the CLI bundle (bin/rvbox.js, and dist/bin/rvbox.js after `npm run build`)? */
export function runsFromBundle(cmd, env) {
  return !UNBUNDLED_COMMANDS.has(cmd ?? "") && env.RVBOX_BUNDLE !== "0";
}

/**
 * Environment read while modules evaluate, so baked into a snapshot: the
 * builder (bin/cli-snapshot.js) runs without them, and a restored process
 * that sees one set runs the command the old way instead.
 */
export const LOAD_TIME_ENV = ["RVBOX_ZSTD", "BUF_BIGINT_DISABLE"];

/** Does `rvbox CMD …` start from the start-up snapshot when there is a usable one? */
export function runsFromSnapshot(cmd, env) {
  return runsFromBundle(cmd, env) && env.RVBOX_SNAPSHOT !== "0" && !SNAPSHOT_SKIPPED.includes(cmd ?? "") && LOAD_TIME_ENV.every((k) => env[k] === undefined);
}

/**
 * The patterns of a launcher's sh `case "$RVBOX_BUNDLE$RVBOX_SNAPSHOT:$1"`
 * that do NOT start the snapshot: either variable 0, the unbundled commands,
 * SNAPSHOT_SKIPPED. bin/rvbox.js's first line spells them out (a test checks
 * it against this); bin/cli-dist.js writes them into dist/bin/rvbox.js's.
 */
export function noSnapshotCases() {
  return ["*0:*", ...[...UNBUNDLED_COMMANDS, ...SNAPSHOT_SKIPPED].map((c) => `*:${c}`)].join("|");
}
