/**
 * rvbox: one binary, subcommands in a table. Another engineer adds `run`,
 * `logs`, `tui` and `sim` by filling in their rows (see PLANNED below).
 */
import { UsageError } from "../shells/cli/config.js";

interface Subcommand {
  summary: string;
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
  // PLANNED (another engineer): add rows here.
  //   run:  submit a command and stream its output (control API client)
  //   logs: FollowOutput of a command
  //   tui:  the Ink operator UI in tui/
  //   sim:  the seeded simulator in sim/ (npm run sim)
};

function usage(): string {
  const w = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  return `usage: rvbox <command> [flags]   (rvbox <command> --help for its flags)\n\ncommands:\n${Object.entries(COMMANDS)
    .map(([k, c]) => `  ${k.padEnd(w)}  ${c.summary}`)
    .join("\n")}`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    console.log(usage());
    return name === undefined ? 2 : 0;
  }
  const cmd = COMMANDS[name];
  if (!cmd) {
    console.error(`rvbox: unknown command ${JSON.stringify(name)}\n\n${usage()}`);
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
    if (process.env["RVBOX_DEBUG"]) console.error(err);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
