/**
 * `rvbox completion bash|zsh`: the completion script for every command of
 * bin/rvbox.ts, built from the parsers' own tables (shells/operator/completion.ts).
 */
import { bashScript, choices, DIR, fromParseArgs, zshScript, type CompletionCommand } from "../operator/completion.js";
import { UsageError } from "./config.js";

export const COMPLETION_USAGE = `usage: rvbox completion bash|zsh

Prints a completion script for rvbox's commands, their flags, and (from the
server, through \`rvbox __complete\`) client names and command ids.

  bash:  source <(rvbox completion bash)        # in ~/.bashrc
         rvbox completion bash > /etc/bash_completion.d/rvbox
  zsh:   source <(rvbox completion zsh)         # in ~/.zshrc, after compinit
         rvbox completion zsh > "\${fpath[1]}/_rvbox"`;

export interface TopCommand {
  name: string;
  summary: string;
  hidden?: boolean;
}

/** Every command with its flags and arguments, as the parsers define them. */
export async function completionCommands(top: readonly TopCommand[]): Promise<CompletionCommand[]> {
  const [{ SERVER_OPTIONS }, { AGENT_OPTIONS }, { DEMO_OPTIONS }, { operatorCompletion }] = await Promise.all([
    import("./server-cli.js"),
    import("./agent-cli.js"),
    import("../demo/demo.js"),
    import("../operator/cli.js"),
  ]);
  const summaries = Object.fromEntries(top.map((t) => [t.name, t.summary]));
  const operator = new Map(operatorCompletion(summaries).map((c) => [c.name, c]));
  const own: Record<string, Omit<CompletionCommand, "name" | "summary">> = {
    server: { flags: fromParseArgs(SERVER_OPTIONS), args: [] },
    agent: { flags: fromParseArgs(AGENT_OPTIONS, { state: DIR }), args: [] },
    demo: { flags: fromParseArgs(DEMO_OPTIONS), args: [] },
    version: { flags: [], args: [] },
    sim: { flags: [], args: [choices(["run", "replay", "campaign", "shrink"])] },
    completion: { flags: [], args: [choices(["bash", "zsh"])] },
  };
  return top.map((t) => {
    const c = operator.get(t.name) ?? { name: t.name, summary: t.summary, ...(own[t.name] ?? { flags: [], args: [] }) };
    return { ...c, summary: t.summary, ...(t.hidden ? { hidden: true } : {}) };
  });
}

export async function completionMain(argv: string[], top: readonly TopCommand[]): Promise<number> {
  const [shell, ...extra] = argv;
  if (shell === "--help" || shell === "-h") throw new UsageError(COMPLETION_USAGE, 0);
  if ((shell !== "bash" && shell !== "zsh") || extra.length > 0) throw new UsageError(COMPLETION_USAGE);
  const commands = await completionCommands(top);
  process.stdout.write(shell === "bash" ? bashScript(commands) : zshScript(commands));
  return 0;
}
