/**
 * rvbox: one binary, subcommands in a table: the daemons, the demo, the
 * simulator, and the operator commands (control API clients).
 *
 * `main` runs one command line. bin/rvbox.ts calls it (through tsx and in the
 * ESM bundle); the CLI's start-up snapshot (bin/rvbox-snapshot.ts) calls it
 * from a process restored from a V8 heap snapshot.
 */
import { UsageError } from "../shells/cli/config.js";
import { didYouMean } from "../shells/runtime/suggest.js";

interface Subcommand {
  summary: string;
  /** Not in the usage list nor in completion (`__complete`). */
  hidden?: boolean;
  /** Loaded lazily so that `rvbox agent` does not load the control plane, etc. */
  run(argv: string[]): Promise<number>;
}

const COMMANDS: Record<string, Subcommand> = {
  server: {
    summary: "run the control-plane server (agent WebSocket endpoint + control API)",
    run: async (argv) => (await import("../shells/cli/server-cli.js")).serverMain(argv),
  },
  agent: {
    summary: "run an agent daemon that executes commands for the server",
    run: async (argv) => (await import("../shells/cli/agent-cli.js")).agentMain(argv),
  },
  demo: {
    summary: "start a local server and two agents, run sample commands, print the results",
    run: async (argv) => (await import("../shells/demo/demo.js")).demoMain(argv),
  },
  version: {
    summary: "print rvbox's version, the Node running it (and where), and the zstd backend",
    run: async () => {
      const { ZSTD_BACKEND } = await import("../shells/zstd/index.js");
      const { readFileSync } = await import("node:fs");
      const { pathToFileURL } = await import("node:url");
      // bin/rvbox.ts (through tsx) or dist/bin/rvbox.js: package.json is one or two levels up;
      // from a CLI bundle (node_modules/.cache/rvbox-cli/..., dist/cli/...), beside the launcher
      // (bin/rvbox.js, one level up; dist/bin/rvbox.js, two)
      let version = "?";
      const here = [new URL("../package.json", import.meta.url), new URL("../../package.json", import.meta.url)];
      const launcher = process.argv[1] ? ["../package.json", "../../package.json"].map((p) => new URL(p, pathToFileURL(process.argv[1]!))) : [];
      for (const url of [...here, ...launcher]) {
        try {
          version = (JSON.parse(readFileSync(url, "utf8")) as { name?: string; version?: string }).version ?? "?";
          break;
        } catch {
          // not there: try the next level
        }
      }
      console.log(`rvbox ${version} on Node ${process.version} (${process.execPath}), zstd ${ZSTD_BACKEND}`);
      return 0;
    },
  },
  __resident: {
    summary: "the resident client (RVBOX_PERSIST): serve operator command lines on a Unix socket",
    hidden: true,
    run: async (argv) => {
      const { residentMain } = await import("../shells/operator/resident.js");
      // Started from the CLI bundle (bin/rvbox.js says which): stale once the tree's bundle is another.
      const entry = process.env.RVBOX_RESIDENT_ENTRY;
      const dir = process.env.RVBOX_RESIDENT_BUNDLE_DIR;
      let isCurrent: (() => boolean) | undefined;
      if (entry && dir) {
        const { currentBundle } = await import("./cli-bundle.js");
        isCurrent = () => currentBundle(dir) === entry;
      }
      return residentMain(argv, isCurrent);
    },
  },
  sim: {
    summary: "the seeded simulator: run --seed S | replay --seed S | campaign --seeds A..B --jobs J | shrink --seed S",
    run: async (argv) => (await import("../sim/cli.js")).simMain(argv),
  },
};

/** Operator subcommands: clients of the control API (shells/operator/cli.ts). */
const OPERATOR: Record<string, string> = {
  run: "submit a command (--clients A,B: a job on many); --follow streams its output and exits with its code",
  logs: "print a command's output (-f follows); markers on stderr",
  stdin: "write to a command's stdin (newline appended unless --no-newline)",
  "close-stdin": "close a command's stdin",
  signal: "send a signal to a command",
  cancel: "cancel a command",
  get: "show one command",
  ls: "list commands",
  job: "show a job (rvbox run --clients): per-client state, exit and duration; --follow streams it",
  jobs: "list jobs",
  clients: "list clients and sessions",
  label: "set or remove labels of a client (role=web, zone-)",
  "forget-client": "forget an idle client record (frees its place under the client bound)",
  drain: "stop dispatching new commands to a client before an agent restart (--wait, --off)",
  claims: "list pending identity claims",
  authorize: "authorize one instance to take over a client id once (--revoke withdraws it)",
  "dismiss-claim": "forget a client's pending identity claim without authorizing it",
  incidents: "list incidents",
  audit: "the audit log: who did what, when, with which result (--since, --operator)",
  "ack-incident": "acknowledge an incident",
  tui: "the terminal UI (--demo starts a local fleet; --sim SEED replays a simulated world)",
};
for (const [name, summary] of Object.entries(OPERATOR)) {
  COMMANDS[name] = { summary, run: async (argv) => (await import("../shells/operator/cli.js")).runOperatorCli([name, ...argv]) };
}
COMMANDS.completion = {
  summary: "print a shell completion script: source <(rvbox completion bash) (or zsh)",
  run: async (argv) =>
    (await import("../shells/cli/completion-cli.js")).completionMain(
      argv,
      Object.entries(COMMANDS).map(([name, c]) => ({ name, summary: c.summary, ...(c.hidden ? { hidden: true } : {}) })),
    ),
};
// What the completion scripts call for client names and command ids.
COMMANDS.__complete = {
  summary: "client names and command ids for the completion scripts",
  hidden: true,
  run: async (argv) => (await import("../shells/operator/cli.js")).runOperatorCli(["__complete", ...argv]),
};

function usage(): string {
  const shown = Object.entries(COMMANDS).filter(([, c]) => !c.hidden);
  const w = Math.max(...shown.map(([k]) => k.length));
  return `usage: rvbox <command> [flags]   (rvbox <command> --help for its flags)\n\ncommands:\n${shown
    .map(([k, c]) => `  ${k.padEnd(w)}  ${c.summary}`)
    .join("\n")}`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    console.log(usage());
    return name === undefined ? 2 : 0;
  }
  const cmd = COMMANDS[name === "--version" || name === "-V" ? "version" : name];
  if (!cmd) {
    const hint = didYouMean(
      name,
      Object.keys(COMMANDS).filter((k) => !COMMANDS[k]!.hidden),
    );
    console.error(`rvbox: unknown command ${JSON.stringify(name)}${hint}\n\n${usage()}`);
    return 2;
  }
  try {
    return await cmd.run(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      (err.exitCode === 0 ? console.log : console.error)(err.message);
      return err.exitCode;
    }
    console.error(`rvbox ${name}: ${err instanceof Error ? err.message : String(err)}`);
    if (process.env.RVBOX_DEBUG) console.error(err);
    return 1;
  }
}
