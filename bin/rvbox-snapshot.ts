/**
 * The entry of the CLI's start-up snapshot (bin/cli-snapshot.js builds it;
 * docs/ARCHITECTURE.md, "Start-up of the CLI").
 *
 * While the snapshot is built, this file and everything it imports is
 * evaluated: the operator commands, ConnectRPC, protobuf-es and the
 * descriptors of the generated code. What it must not do then is read
 * anything that belongs to one run (arguments, environment, terminal, time,
 * randomness): those are read by `main` at run time. The few values read
 * while modules load are named in LOAD_TIME_ENV; the builder runs without them.
 *
 * When a process is restored from the snapshot, `restored` runs first. It
 * hands the command line to `main` only if the snapshot is of this tree,
 * every file it was built from is unchanged, the command is one of the
 * bundled ones and none of LOAD_TIME_ENV is set; otherwise it runs
 * the script it was asked to run (`bin/rvbox.js ARGS`) as a child, the path
 * without a snapshot (which also starts a rebuild), so a stale snapshot costs
 * one extra Node start and never a wrong answer.
 */
import { readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { startupSnapshot } from "node:v8";
import "../shells/operator/cli.js"; // evaluated into the snapshot: main's lazy import finds it loaded
import { refuseNonUtf8Args } from "./argv-utf8.js";
import { runChild } from "./cli-child.js";
import { inputsCurrent } from "./cli-stamps.js";
import { main } from "./rvbox-main.js";

// Baked in at build time (bin/cli-snapshot.js sets them for the build only).
const ROOT = process.env.RVBOX_SNAPSHOT_ROOT ?? "";
const INPUTS = process.env.RVBOX_SNAPSHOT_INPUTS ?? "";
const UNBUNDLED_COMMANDS = new Set((process.env.RVBOX_SNAPSHOT_COMMANDS ?? "").split(",").filter(Boolean));
const LOAD_TIME_ENV = (process.env.RVBOX_SNAPSHOT_LOAD_ENV ?? "").split(",").filter(Boolean);
/** A snapshot made by `npm run build` (bin/cli-dist.js): the build's id, which its dist/bin/rvbox.js names. */
const BUILD = process.env.RVBOX_SNAPSHOT_BUILD ?? "";

/** Why this run cannot use the snapshot, or null if it can. */
function unusable(argv: string[]): string | null {
  if (process.env.RVBOX_SNAPSHOT === "0" || process.env.RVBOX_BUNDLE === "0") return "disabled";
  if (UNBUNDLED_COMMANDS.has(argv[2] ?? "")) return "unbundled command";
  const set = LOAD_TIME_ENV.find((k) => process.env[k] !== undefined);
  if (set !== undefined) return `${set} is set`;
  try {
    // dist/ is immutable once built: the launcher of that very build is all there is to check.
    if (BUILD !== "") return argv[1] !== undefined && readFileSync(argv[1], "utf8").includes(`BUILT_CLI = "${BUILD}"`) ? null : "another build";
    if (argv[1] === undefined || realpathSync(path.join(path.dirname(path.resolve(argv[1])), "..")) !== ROOT) return "another tree";
    const m = JSON.parse(readFileSync(INPUTS, "utf8")) as { inputs?: unknown };
    if (!inputsCurrent(m.inputs)) return "sources changed";
  } catch {
    return "no inputs";
  }
  return null;
}

function restored(): void {
  // Set by bin/rvbox.js's first line; nothing this process starts should see it.
  delete process.env.RVBOX_LAUNCH;
  // Before the fallback child gets argv as (replaced, valid) text.
  refuseNonUtf8Args();
  const why = unusable(process.argv);
  if (why !== null) {
    if (process.env.RVBOX_BUNDLE_DEBUG === "1") process.stderr.write(`rvbox: start-up snapshot not used: ${why}\n`);
    // The script asked for (another tree's, say), else this tree's; started as the
    // first line starts it, so that a stale snapshot is rebuilt for the next start.
    const script = process.argv[1] ?? path.join(ROOT, "bin/rvbox.js");
    // A build's dist/bin/rvbox.js would start this snapshot again (bin/cli-built.js): not for this one.
    runChild(process.execPath, [script, ...process.argv.slice(2)], { ...process.env, RVBOX_LAUNCH: "sh", ...(BUILD !== "" && { RVBOX_SNAPSHOT: "0" }) });
    return;
  }
  if (process.env.RVBOX_BUNDLE_DEBUG === "1")
    process.stderr.write(`rvbox: start: snapshot ${process.execArgv[process.execArgv.indexOf("--snapshot-blob") + 1] ?? ""}\n`);
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}

if (startupSnapshot.isBuildingSnapshot()) startupSnapshot.setDeserializeMainFunction(restored);
