/**
 * Shell completion: `rvbox completion bash|zsh` prints a script generated
 * from the very tables the argument parsers use (the operator subcommands'
 * FlagSpecs in cli.ts, the daemons' parseArgs options, bin/rvbox.ts's
 * command table), so a flag added to a parser is completed without anyone
 * touching this file. Client names and command ids are completed by running
 * `rvbox __complete clients|ids` (cli.ts), which answers within a short
 * deadline and prints nothing when the server is unreachable.
 */
import type { FlagSpecs } from "./args.js";

/** What a flag's value or a positional argument completes to. */
export type Values =
  | { kind: "none" }
  | { kind: "word" }
  | { kind: "file" }
  | { kind: "dir" }
  | { kind: "client" }
  | { kind: "id" }
  | { kind: "command" }
  | { kind: "choices"; words: readonly string[] };

export interface CompletionFlag {
  long: string;
  short?: string;
  /** `--no-NAME` too. */
  negatable?: boolean;
  /** May be given more than once (`--env`). */
  repeatable?: boolean;
  /** The value may be left out (`--shell`, `--shell bash`): then only `choices` are taken as one. */
  optional?: boolean;
  value: Values;
}

export interface CompletionCommand {
  name: string;
  summary: string;
  flags: CompletionFlag[];
  /** Positional arguments in order. */
  args: Values[];
  /** Words after `--` (run: the command and its arguments). */
  rest?: Values;
  hidden?: boolean;
}

export const NONE: Values = { kind: "none" };
export const WORD: Values = { kind: "word" };
export const FILE: Values = { kind: "file" };
export const DIR: Values = { kind: "dir" };
export const CLIENT: Values = { kind: "client" };
export const ID: Values = { kind: "id" };
export const choices = (words: readonly string[]): Values => ({ kind: "choices", words });

/** What a value-taking flag completes to, by its name, unless the command says otherwise. */
const BY_NAME: Record<string, Values> = {
  token: FILE,
  ca: FILE,
  script: FILE,
  file: FILE,
  config: FILE,
  "agent-tokens": FILE,
  "operator-token": FILE,
  interpreter: FILE,
  cwd: DIR,
  state: DIR,
  data: DIR,
  dir: DIR,
  client: CLIENT,
  command: ID,
  stream: choices(["stdout", "stderr"]),
  output: choices(["json", "wide"]),
  "log-level": choices(["debug", "info", "warn", "error"]),
};

/** The operator parser's table (args.ts FlagSpecs) as completion flags. */
export function fromFlagSpecs(specs: FlagSpecs, values: Record<string, Values> = {}): CompletionFlag[] {
  return Object.entries(specs).map(([long, s]) => {
    const f: CompletionFlag = { long, value: NONE };
    if (s.short) f.short = s.short;
    if (s.type === "boolean") {
      if (s.negatable) f.negatable = true;
    } else if (s.type === "optional") {
      f.optional = true;
      f.value = choices(s.choices);
    } else {
      f.value = values[long] ?? BY_NAME[long] ?? WORD;
      if (s.multiple) f.repeatable = true;
    }
    return f;
  });
}

/** node:util parseArgs options (the daemons' tables) as completion flags; `--help` too. */
export function fromParseArgs(options: Record<string, { type: "string" | "boolean"; short?: string }>, values: Record<string, Values> = {}): CompletionFlag[] {
  const out: CompletionFlag[] = Object.entries(options).map(([long, o]) => {
    const f: CompletionFlag = { long, value: o.type === "boolean" ? NONE : (values[long] ?? BY_NAME[long] ?? WORD) };
    if (o.short) f.short = o.short;
    return f;
  });
  if (!("help" in options)) out.push({ long: "help", short: "h", value: NONE });
  return out;
}

/** Every word a user can type for a flag: `--name`, `-x`, `--no-name`. */
export function flagWords(f: CompletionFlag): string[] {
  const w = [`--${f.long}`];
  if (f.short) w.push(`-${f.short}`);
  if (f.negatable) w.push(`--no-${f.long}`);
  return w;
}

const takesValue = (f: CompletionFlag): boolean => f.value.kind !== "none" && !f.optional;

// ------------------------------------------------------------------ bash

const sq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

function bashValue(v: Values): string {
  switch (v.kind) {
    case "file":
      return "_rvbox_files";
    case "dir":
      return "_rvbox_dirs";
    case "client":
      return "_rvbox_dynamic clients";
    case "id":
      return "_rvbox_dynamic ids";
    case "command":
      return 'COMPREPLY=($(compgen -c -- "$cur" | sort -u))';
    case "choices":
      return `_rvbox_words ${sq(v.words.join(" "))}`;
    default:
      return ":";
  }
}

export function bashScript(commands: readonly CompletionCommand[]): string {
  const visible = commands.filter((c) => !c.hidden);
  const cases = visible.map((c) => {
    const words = c.flags.flatMap(flagWords);
    const takes = c.flags.filter(takesValue).flatMap((f) => [`--${f.long}`, ...(f.short ? [`-${f.short}`] : [])]);
    const optional = c.flags
      .filter((f) => f.optional && f.value.kind === "choices")
      .flatMap((f) => (f.value as { words: readonly string[] }).words.map((w) => `--${f.long}:${w}`));
    const prevCases = c.flags
      .filter((f) => f.value.kind !== "none")
      .map((f) => {
        const pat = [`--${f.long}`, ...(f.short ? [`-${f.short}`] : [])].join("|");
        // An optional value: offer its choices unless a flag is being typed.
        return f.optional
          ? `        ${pat}) if [[ $cur != -* ]]; then ${bashValue(f.value)}; return 0; fi ;;`
          : `        ${pat}) ${bashValue(f.value)}; return 0 ;;`;
      });
    const argCases = c.args.map((v, i) => `        ${i}) ${bashValue(v)} ;;`);
    return [
      `    ${c.name})`,
      `      flags=${sq(words.join(" "))}`,
      `      takes=${sq(takes.join(" "))}`,
      `      optional=${sq(optional.join(" "))}`,
      ...(prevCases.length ? [`      case $prev in`, ...prevCases, `      esac`] : []),
      `      if [[ $cur == -* ]] && ! _rvbox_after_dashdash; then _rvbox_words "$flags"; return 0; fi`,
      `      _rvbox_argn "$takes" "$optional"`,
      `      case $_rvbox_n in`,
      ...(c.rest ? [`        rest0) ${bashValue(c.rest)} ;;`, `        rest*) _rvbox_files ;;`] : []),
      ...argCases,
      `      esac`,
      `      ;;`,
    ].join("\n");
  });
  return `# bash completion for rvbox: generated by \`rvbox completion bash\`; do not edit.
# Load it with:  source <(rvbox completion bash)
# or install it: rvbox completion bash > /etc/bash_completion.d/rvbox
# Client names and command ids come from \`rvbox __complete\` (the server
# named by --server/--token/--ca on the line, or RVBOX_SERVER and
# RVBOX_TOKEN_FILE); it prints nothing when the server does not answer in 2 s.

_rvbox_words() { COMPREPLY=($(compgen -W "$1" -- "$cur")); }
_rvbox_files() { COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null; }
_rvbox_dirs() { COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null; }

# Is there a \`--\` before the word being completed?
_rvbox_after_dashdash() {
  local i
  for ((i = 2; i < COMP_CWORD; i++)); do [[ \${COMP_WORDS[i]} == -- ]] && return 0; done
  return 1
}

# _rvbox_n: which positional argument the word being completed is (0, 1, ...),
# or restN for the Nth word after \`--\`. $1: flags that take a value (the next
# word); $2: FLAG:WORD pairs of flags whose value is optional.
_rvbox_argn() {
  local i w n=0
  for ((i = 2; i < COMP_CWORD; i++)); do
    w=\${COMP_WORDS[i]}
    if [[ $w == -- ]]; then _rvbox_n=rest$((COMP_CWORD - i - 1)); return; fi
    if [[ " $1 " == *" $w "* ]]; then ((i++)); continue; fi
    if [[ $w == -* ]]; then
      [[ " $2 " == *" $w:\${COMP_WORDS[i+1]} "* ]] && ((i++))
      continue
    fi
    ((n++))
  done
  _rvbox_n=$n
}

# Client names or command ids from the server, via rvbox itself.
_rvbox_dynamic() {
  local i w conn=() out
  for ((i = 1; i < \${#COMP_WORDS[@]}; i++)); do
    w=\${COMP_WORDS[i]}
    case $w in
      --server|--token|--ca) conn+=("$w" "\${COMP_WORDS[i+1]}") ;;
    esac
  done
  out=$("\${COMP_WORDS[0]}" __complete "$1" "\${conn[@]}" --prefix "$cur" 2>/dev/null) || return 0
  COMPREPLY=($(compgen -W "$out" -- "$cur"))
}

_rvbox() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]} flags takes optional _rvbox_n
  COMPREPLY=()
  if ((COMP_CWORD == 1)); then
    _rvbox_words ${sq(visible.map((c) => c.name).join(" "))}
    return 0
  fi
  case \${COMP_WORDS[1]} in
${cases.join("\n")}
  esac
  return 0
}

complete -F _rvbox rvbox
`;
}

// ------------------------------------------------------------------ zsh

/** A zsh single-quoted string. */
const zq = sq;
/** Text inside an _arguments spec: brackets and colons escaped. */
const zdesc = (s: string): string => s.replace(/[[\]:\\]/g, (c) => `\\${c}`);

function zshAction(v: Values): string {
  switch (v.kind) {
    case "file":
      return "_files";
    case "dir":
      return "_files -/";
    case "client":
      return "_rvbox_dynamic clients";
    case "id":
      return "_rvbox_dynamic ids";
    case "command":
      return "_command_names -e";
    case "choices":
      return `(${v.words.join(" ")})`;
    default:
      return " ";
  }
}

const ZSH_LABEL: Record<Values["kind"], string> = {
  none: "",
  word: "value",
  file: "file",
  dir: "directory",
  client: "client",
  id: "command id",
  command: "command",
  choices: "value",
};

function zshFlagSpecs(f: CompletionFlag): string[] {
  const names = flagWords(f).filter((w) => !w.startsWith("--no-"));
  const excl = f.repeatable ? "*" : names.length > 1 ? `(${names.join(" ")})` : "";
  const arg =
    f.value.kind === "none" ? "" : f.optional ? `=::${ZSH_LABEL[f.value.kind]}:${zshAction(f.value)}` : `=:${ZSH_LABEL[f.value.kind]}:${zshAction(f.value)}`;
  const out = names.map((n) => zq(`${excl}${n}${n.startsWith("--") ? arg : arg.replace(/^=/, "")}`));
  if (f.negatable) out.push(zq(`--no-${f.long}`));
  return out;
}

export function zshScript(commands: readonly CompletionCommand[]): string {
  const visible = commands.filter((c) => !c.hidden);
  const list = visible.map((c) => `    ${zq(`${c.name.replace(/:/g, "\\:")}:${c.summary}`)}`).join("\n");
  const cases = visible.map((c) => {
    const specs = [...c.flags.flatMap(zshFlagSpecs), ...c.args.map((v, i) => zq(`${i + 1}:${zdesc(ZSH_LABEL[v.kind] || "argument")}:${zshAction(v)}`))];
    if (c.rest) specs.push(zq(`*::${ZSH_LABEL[c.rest.kind]}:_normal`));
    return `    ${c.name})\n      _arguments -S \\\n        ${specs.join(" \\\n        ")} && ret=0\n      ;;`;
  });
  return `#compdef rvbox
# zsh completion for rvbox: generated by \`rvbox completion zsh\`; do not edit.
# Load it with:  source <(rvbox completion zsh)   (after compinit)
# or install it: rvbox completion zsh > "\${fpath[1]}/_rvbox"
# Client names and command ids come from \`rvbox __complete\` (the server
# named by --server/--token/--ca on the line, or RVBOX_SERVER and
# RVBOX_TOKEN_FILE); it prints nothing when the server does not answer in 2 s.

# _arguments calls an action with compadd's options first: the kind is the last word.
_rvbox_dynamic() {
  local kind=\${@[-1]}
  local -a conn vals
  local i
  for ((i = 2; i < \${#_rvbox_line}; i++)); do
    case \${_rvbox_line[i]} in
      --server|--token|--ca) conn+=(\${_rvbox_line[i]} \${_rvbox_line[i+1]}) ;;
    esac
  done
  vals=(\${(f)"$(\${_rvbox_line[1]} __complete $kind $conn --prefix "$PREFIX" 2>/dev/null)"})
  compadd "\${@[1,-2]}" -a vals
}

_rvbox() {
  local curcontext=$curcontext state line ret=1
  local -a _rvbox_line
  _rvbox_line=("\${words[@]}")
  local -a commands
  commands=(
${list}
  )
  _arguments -C '1: :->command' '*:: :->args' && ret=0
  case $state in
    command)
      _describe -t commands 'rvbox command' commands && ret=0
      ;;
    args)
      case $words[1] in
${cases.join("\n")}
      esac
      ;;
  esac
  return ret
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _rvbox "$@"
else
  compdef _rvbox rvbox
fi
`;
}
