/**
 * The operator CLI: `rvbox run | logs | stdin | close-stdin | signal | cancel |
 * get | ls | clients | label | forget-client | drain | claims | authorize | dismiss-claim |
 * incidents | ack-incident | audit | tui`.
 *
 * Every subcommand talks to the server's control API only (ConnectRPC,
 * protos/rvbox/v1/control.proto) with the operator bearer token:
 * `--server URL` (or RVBOX_SERVER, default http://127.0.0.1:7401) and
 * `--token FILE` (or RVBOX_TOKEN_FILE). Errors are one line on stderr and an
 * exit code from exit-codes.ts; no stack traces (RVBOX_DEBUG=1 prints them).
 *
 * bin/rvbox.ts calls `runOperatorCli([name, ...rest], io)` for each of these
 * names; `shells/operator/main.ts` runs it standalone.
 */
import { didYouMean } from "../runtime/suggest.js";
import { randomUUID } from "node:crypto";
import { fstatSync, readFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { CommandLifecycle as L, ShellType } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { AuditEntry, SubmitCommandRequest } from "../../protos/gen/rvbox/v1/control_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SubmitCommandRequestSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import { bool, list, normalizeServerUrl, parseDuration, parseEnv, parseFlags, str, UsageError, type FlagSpecs, type Parsed } from "./args.js";
import { CLIENT, choices, fromFlagSpecs, ID, WORD, type CompletionCommand, type Values } from "./completion.js";
import { createControlClient, describeError, fileProblem, isTransient, OperatorError, readTokenFile, type ControlClient } from "../../client/control-client.js";
import { EXIT, EXIT_CODE_HELP, exitCodeFor } from "../../client/exit-codes.js";
import { cmdCancelJob, cmdJob, cmdJobs, cmdRunJob, findJob, multiClientHint } from "./jobs-cli.js";
import { pendingBeforeOutputExit, watchLeaving } from "./leaving.js";
import { type PumpStats, pumpStdin as pumpStdinInto, STDIN_PIECE } from "./stdin-pump.js";
import { enterRawMode, onWindowChange, rawLines, rawTextStream, TerminalInput, windowSize } from "./terminal.js";

/** TERM sent with `run -t` when this CLI's environment has none. */
const DEFAULT_TERM_NAME = "xterm-256color";
import { flushed, followOutput, isClosedOutput, OutputClosedError, type FollowOptions, type LineOptions } from "./follow.js";
import { humanBytes } from "../../client/markers.js";
import {
  MAX_LABEL_KEY_CHARS,
  MAX_LABEL_VALUE_CHARS,
  MAX_LABELS_PER_CLIENT,
  MAX_SCRIPT_BYTES,
  closestClients,
  formatLabels,
  parseLabelEdits,
  parseSelector,
} from "../../core/index.js";
import {
  claimInfo,
  commandInfo,
  isTerminalState,
  durationText,
  incidentInfo,
  lifecycleEnum,
  LIFECYCLES,
  parseSignal,
  sessionInfos,
  signalKind,
  type CommandInfo,
  type SessionInfo,
  type StreamName,
} from "../../client/model.js";

export interface OperatorIO {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stdin: NodeJS.ReadableStream;
  env: Record<string, string | undefined>;
  /** Subscribe to the user's interrupt (Ctrl-C); returns an unsubscribe. */
  onInterrupt: (cb: () => void) => () => void;
  /**
   * Subscribe to SIGTERM and SIGHUP (a CI runner stopping the job, the
   * terminal closed); returns an unsubscribe. Only `run --follow
   * --cancel-on-interrupt` subscribes: without a subscriber they end the CLI
   * as they end any process.
   */
  onTerminate: (cb: (signal: TerminateSignal) => void) => () => void;
  /** Opens the TUI (tests replace it). */
  runTui: (opts: TuiLaunch) => Promise<number>;
  /**
   * The working directory that relative file names (--token, --ca, --script,
   * stdin --file) are read from; unset: this process's. The resident client
   * (resident.ts) runs many command lines in one process, each from its own.
   */
  cwd?: string;
  /** Whether stdin is a directory (`< DIR`), when stdin is not this process's fd 0 (the resident client). */
  stdinIsDirectory?: boolean;
}

/** A file name as the operator typed it, read from the command line's working directory. */
function inCwd(io: OperatorIO, file: string): string {
  return io.cwd === undefined ? file : resolvePath(io.cwd, file);
}

export type TerminateSignal = "SIGTERM" | "SIGHUP";

/** A failed write to stdout or stderr is ending the process (once). */
let outputExiting = false;

export interface TuiLaunch {
  server?: { baseUrl: string; token: string };
  sim?: { seed: number; variant?: string; node?: string; command?: string };
  demo?: boolean;
  refreshMs?: number;
  client?: string;
}

export const DEFAULT_SERVER = "http://127.0.0.1:7401";

const COMMON: FlagSpecs = {
  server: { type: "string" },
  token: { type: "string" },
  ca: { type: "string" },
  "request-timeout": { type: "string" },
  help: { type: "boolean", short: "h" },
};
const JSON_FLAG: FlagSpecs = { json: { type: "boolean" }, output: { type: "string", short: "o" } };

/** `--json`, or `-o json|wide` as kubectl has it: how a listing is printed. */
function outputMode(p: Parsed): "table" | "json" | "wide" {
  const o = str(p, "output");
  if (o !== undefined && o !== "json" && o !== "wide") throw new UsageError(`-o/--output: expected json or wide, got ${JSON.stringify(o)}`);
  if (bool(p, "json")) {
    if (o === "wide") throw new UsageError("--json and -o wide do not go together");
    return "json";
  }
  return o ?? "table";
}

interface Sub {
  usage: string;
  flags: FlagSpecs;
  /** What the positional arguments are, for shell completion (completion.ts); `rest`: the words after `--`. */
  args?: Values[];
  rest?: Values;
  /** Values of this command's flags where the flag's name alone does not say (completion.ts). */
  values?: Record<string, Values>;
  /** Not listed in help or completion (`__complete`). */
  hidden?: boolean;
  /** Needs a server connection (all but `tui --sim`). */
  run(ctx: Ctx, p: Parsed): Promise<number>;
}

interface Ctx {
  io: OperatorIO;
  server: string;
  /** Created on first use: `tui --sim` never needs a token. */
  client(): ControlClient;
  token(): string;
  /** Deadline of each unary call (never of a stream: a follow may last for hours). */
  requestTimeoutMs: number;
  out(line: string): void;
  err(line: string): void;
}

/** How long a unary control call may take before the CLI gives up (--request-timeout). */
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

const GLOBAL_HELP = `global flags: --server URL (env RVBOX_SERVER, default ${DEFAULT_SERVER})  --token FILE (env RVBOX_TOKEN_FILE)
              --ca FILE (env RVBOX_CA: PEM CA bundle for an https:// server)  --request-timeout DURATION (default 30s)
env RVBOX_PERSIST=10m: later command lines start in a resident process, as ssh's ControlPersist (docs/OPERATOR.md)`;

/** `rvbox __complete ids` looks among this many of the newest commands (as an id prefix does). */
const COMPLETE_IDS = 1000;
/** …and gives up after this long: a TAB must not hang. */
const COMPLETE_TIMEOUT_MS = 2000;

const SUBS: Record<string, Sub> = {
  run: {
    usage: `usage: rvbox run CLIENT [flags] -- CMD [ARG...]
       rvbox run CLIENT --shell [sh|bash] [flags] -- 'COMMAND LINE'
       rvbox run CLIENT --script FILE [--interpreter PATH] [flags] [-- SCRIPT-ARG...]
       rvbox run --clients A,B,C [--max-concurrency N|P%] [--max-errors N|P%] [flags] -- CMD [ARG...]
       rvbox run -l SELECTOR [--max-concurrency N|P%] [--max-errors N|P%] [flags] -- CMD [ARG...]

Submits a command for CLIENT and prints its id. With --follow, streams its
output live (stdout to stdout, stderr to stderr, markers on stderr) and exits
with the command's exit code (below).

With --clients (or -l SELECTOR: every client whose labels match, in id
order, resolved once at submit) it submits a job: one command per client,
started in that order, and prints the job's id (rvbox job ID shows it). With --follow
it streams every client's output line by line, each line prefixed by the
client ("web-1: …"), then prints a per-client table and exits 1 if any
client failed (or was not started), else 0.

  -f, --follow            stream output until the command ends; exit with its code
  --shell [sh|bash]       run CMD as a shell command line (words joined by spaces)
  --script FILE           upload FILE and run it (needs a #! line or --interpreter)
  --interpreter PATH      run the script as PATH SCRIPT [ARG...]
  --cwd DIR               working directory on the agent (default: the agent's)
  --env NAME=VALUE        environment variable (repeatable)
  --timeout DURATION      kill it after DURATION (30s, 5m, 1h30m); it ends failed
  --expire-after DURATION end it expired if not launched by then (default: server's, 24h)
  -i, --stdin             stream this CLI's stdin to the command as it arrives; EOF closes it
  -t, --tty               run it on a terminal (a pseudo-terminal on the agent), interactively:
                          this terminal in raw mode, keys (Ctrl-C, Ctrl-Z, Ctrl-D too) go to
                          the command, window size follows; implies --follow and -i (-it
                          works too); the agent must speak protocol 1.1, else it is refused
  --open-stdin            keep the command's stdin open for later \`rvbox stdin\` / \`close-stdin\`
  --id UUID               the command's issue UUID (resubmitting it is idempotent)
  --allow-unknown-client  queue it for a client id that has not registered yet (else refused, exit 66)
  --events                with --follow: also print lifecycle/stdin/signal events on stderr
  --cancel-on-interrupt   with --follow: Ctrl-C (or SIGTERM) cancels the command and waits
                          for its end (a second one detaches); so do a closed terminal
                          (SIGHUP: exit 129) and a closed stdout (| head: exit 141), once
                          the server has the cancel; without it Ctrl-C detaches at once.
                          For a job: the same, cancelling the job (rvbox cancel JOB)
  --json                  print the submitted command as JSON (without --follow);
                          for a job, one JSON record per client
  --clients A,B,C         a job over these clients (repeatable; unknown ids are refused, nothing runs)
  -l, --selector SEL      a job over every client whose labels match SEL (as rvbox clients -l)
  --max-concurrency N|P%  job: at most N (or P% of the clients, rounded up) commands at once (default: all)
  --max-errors N|P%       job: once more than N (P%, rounded down) clients failed, start no more;
                          the rest end cancelled (default: no limit)

${EXIT_CODE_HELP}`,
    flags: {
      ...JSON_FLAG,
      follow: { type: "boolean", short: "f" },
      shell: { type: "optional", choices: ["sh", "bash", "zsh"], default: "sh" },
      script: { type: "string" },
      interpreter: { type: "string" },
      cwd: { type: "string" },
      env: { type: "string", multiple: true },
      timeout: { type: "string" },
      "expire-after": { type: "string" },
      stdin: { type: "boolean", short: "i" },
      tty: { type: "boolean", short: "t" },
      "open-stdin": { type: "boolean" },
      id: { type: "string" },
      events: { type: "boolean" },
      "allow-unknown-client": { type: "boolean" },
      "cancel-on-interrupt": { type: "boolean" },
      clients: { type: "string", multiple: true },
      selector: { type: "string", short: "l" },
      "max-concurrency": { type: "string" },
      "max-errors": { type: "string" },
    },
    args: [CLIENT],
    rest: { kind: "command" },
    run: cmdRun,
  },
  job: {
    usage: `usage: rvbox job ID [--follow] [--json]

Shows a job (rvbox run --clients): one row per client with its state, exit
code and duration, and a summary line. --follow streams the output of every
client as with run --follow; --json prints one JSON record per client.`,
    flags: { ...JSON_FLAG, follow: { type: "boolean", short: "f" } },
    args: [WORD],
    run: (ctx, p) => cmdJob(ctx, p, outputMode(p) === "json"),
  },
  jobs: {
    usage: "usage: rvbox jobs [--json]\n\nLists jobs, newest first, with their per-state counts.",
    flags: JSON_FLAG,
    run: (ctx, p) => cmdJobs(ctx, p, outputMode(p) === "json"),
  },
  logs: {
    usage: `usage: rvbox logs ID [-f] [--stream stdout|stderr] [--tail N] [--since DURATION|TIME] [--timestamps]
                 [--from SEQ] [--events] [--exit-code]

Prints a command's stored output: stdout bytes to stdout, stderr bytes to
stderr. Truncation and incomplete markers are printed on stderr, in place
("rvbox: [… 1.2 MiB of stdout removed by server retention: events 12–40; …]"),
so a shortened stream never looks complete.

  -f, --follow       keep streaming until the command ends
  --stream S         only stdout or only stderr (either is then written to stdout)
  --tail N           only the last N lines stored (then new ones, with -f)
  --since D|TIME     only output from the last D (10m, 1h30m) or since TIME (RFC 3339)
  --timestamps       prefix each line with its time (UTC, milliseconds)
  --from SEQ         start at event sequence SEQ
  --events           also print lifecycle, stdin and signal events on stderr
  --exit-code        exit with the command's exit code (as run --follow) once it ended`,
    flags: {
      follow: { type: "boolean", short: "f" },
      stream: { type: "string" },
      from: { type: "string" },
      tail: { type: "string" },
      since: { type: "string" },
      timestamps: { type: "boolean" },
      events: { type: "boolean" },
      "exit-code": { type: "boolean" },
    },
    args: [ID],
    run: cmdLogs,
  },
  stdin: {
    usage: `usage: rvbox stdin ID TEXT [--no-newline]
       rvbox stdin ID --file FILE [--no-newline]

Writes to a command's stdin (it must have been started with stdin open, e.g.
run --stdin). A newline is appended by default (R-S2); --no-newline sends the
bytes exactly. With --file the file's bytes are sent in 64 KiB writes and the
newline (unless --no-newline) follows the last one. Use --file - for this CLI's stdin.`,
    flags: { newline: { type: "boolean", negatable: true }, file: { type: "string" } },
    args: [ID, WORD],
    run: cmdStdin,
  },
  "close-stdin": {
    usage: `usage: rvbox close-stdin ID\n\nCloses a command's stdin (idempotent).`,
    flags: {},
    args: [ID],
    run: async (ctx, p) => {
      const id = await resolveId(ctx, onePositional(p, "ID"));
      const r = await call(ctx, `command ${id}`, (c) => c.closeStdin({ issueUuid: id, requestId: randomUUID() }));
      ctx.out(`stdin of ${id} closed (write ${r.writeSeq})`);
      return EXIT.OK;
    },
  },
  signal: {
    usage: `usage: rvbox signal ID SIGNAL\n\nSends SIGNAL (TERM, INT, KILL, HUP, QUIT, USR1, USR2; names or numbers) and prints the revision it got.\nA requested signal that ends the process ends the command cancelled.`,
    flags: {},
    args: [ID, choices(["TERM", "INT", "KILL", "HUP", "QUIT", "USR1", "USR2"])],
    run: async (ctx, p) => {
      if (p.positionals.length !== 2) throw new UsageError("expected ID and SIGNAL");
      const [idText, sigText] = p.positionals as [string, string];
      const sig = parseSignal(sigText);
      if (!sig || sig === "CANCEL")
        throw new UsageError(`unknown signal ${JSON.stringify(sigText)}: use TERM, INT, KILL, HUP, QUIT, USR1 or USR2 (or rvbox cancel)`);
      const id = await resolveId(ctx, idText);
      const r = await call(ctx, `command ${id}`, (c) => c.signalCommand({ issueUuid: id, signal: signalKind(sig), requestId: randomUUID() }));
      ctx.out(`SIG${sig} requested for ${id} (revision ${r.revision})`);
      return EXIT.OK;
    },
  },
  cancel: {
    usage: `usage: rvbox cancel ID [--force]\n\nCancels a command: before launch it ends cancelled without starting; after launch the agent\nsends TERM, then KILL after its grace period.\nGiven a job's id (rvbox run --clients): cancels the job: no further client starts, the\nclients not started end cancelled, and every running command of the job is cancelled.\n  --force   (role admin) end it at the server now, whatever its state, without waiting for\n            its agent (one that is gone, or never answers): cancelled, with an incident; never\n            dispatched again, and a copy the agent still runs is ended when it next reconnects`,
    flags: { force: { type: "boolean" } },
    args: [ID],
    run: async (ctx, p) => {
      const typed = onePositional(p, "ID");
      const force = bool(p, "force");
      if (!force && (await findJob(ctx, typed)) !== null) return cmdCancelJob(ctx, typed);
      const id = await resolveId(ctx, typed);
      const r = await call(ctx, `command ${id}`, (c) => c.signalCommand({ issueUuid: id, signal: signalKind("CANCEL"), requestId: randomUUID(), force }));
      ctx.out(force ? `${id} ended cancelled (revision ${r.revision})` : `cancel requested for ${id} (revision ${r.revision})`);
      return EXIT.OK;
    },
  },
  get: {
    usage: `usage: rvbox get ID [--json]\n\nShows one command.`,
    flags: JSON_FLAG,
    args: [ID],
    run: async (ctx, p) => {
      const id = await resolveId(ctx, onePositional(p, "ID"));
      const r = await call(ctx, `command ${id}`, (c) => c.getCommand({ issueUuid: id }));
      const c = commandInfo(r.command!);
      if (outputMode(p) === "json") ctx.out(JSON.stringify(c, null, 2));
      else ctx.out(describeCommand(c));
      return EXIT.OK;
    },
  },
  ls: {
    usage: `usage: rvbox ls [--client CLIENT] [-l SELECTOR] [--state STATE[,STATE...]] [--since T] [--until T] [--limit N] [--json | -o json|wide]

Lists commands, newest first, from the server's whole history. States: ${LIFECYCLES.join(", ")}, or "active" / "terminal".

  -l, --selector SEL   only commands of clients whose labels match SEL (as rvbox clients -l)
  --since T, --until T only commands created at or after / before T: RFC 3339
                       (2026-12-01T10:00:00Z) or a duration ago (10m, 2h, 7d)`,
    flags: {
      ...JSON_FLAG,
      client: { type: "string" },
      selector: { type: "string", short: "l" },
      state: { type: "string", multiple: true },
      since: { type: "string" },
      until: { type: "string" },
      limit: { type: "string" },
    },
    values: { state: choices([...LIFECYCLES, "active", "terminal"]) },
    run: cmdLs,
  },
  clients: {
    usage: `usage: rvbox clients [-l SELECTOR] [--json]

Lists clients with their connection state, instance, generation, command counts and
labels, and how many client records the server holds of the most it keeps
(limits.maxClients).

  -l, --selector SEL   only clients whose labels match SEL: comma-separated terms that
                       must all hold: k=v, k!=v, k (has the label), !k (has not)`,
    flags: { ...JSON_FLAG, selector: { type: "string", short: "l" } },
    run: async (ctx, p) => {
      const selector = str(p, "selector") ?? "";
      const parsed = parseSelector(selector);
      if (!parsed.ok) throw new UsageError(parsed.error.message);
      const [cl, se] = await Promise.all([call(ctx, "", (c) => c.listClients({ selector })), call(ctx, "", (c) => c.listSessions({}))]);
      const rows = sessionInfos(cl.clients, se.sessions);
      if (outputMode(p) === "json") ctx.out(JSON.stringify(rows, null, 2));
      else {
        ctx.out(clientsTable(rows, selector !== "" ? `no client matches ${selector}` : undefined));
        // Servers older than the bound report 0: say nothing.
        if (cl.maxClients > 0 && selector === "")
          ctx.out(`${cl.clients.length} of at most ${cl.maxClients} client records (a new client id past that is refused; rvbox forget-client ID frees one)`);
        else if (selector !== "") ctx.out(`${cl.clients.length} client${cl.clients.length === 1 ? " matches" : "s match"} ${selector}`);
      }
      return EXIT.OK;
    },
  },
  "forget-client": {
    usage: `usage: rvbox forget-client ID\n\nForgets a client record, freeing its place under the server's client bound (role admin).\nRefused while the client has a live session. Its non-terminal commands are ended first\n(cancelled; those that may have reached the agent with an incident) and never dispatched\nagain. Its commands' history stays; the id may register again later.`,
    flags: {},
    args: [CLIENT],
    run: async (ctx, p) => {
      const id = onePositional(p, "ID");
      const r = await call(ctx, `client ${id}`, (c) => c.forgetClient({ clientId: id, requestId: randomUUID() }));
      const n = r.endedCommands;
      ctx.out(`client ${id} forgotten${n > 0 ? ` (${n} non-terminal command${n === 1 ? "" : "s"} ended cancelled)` : ""}`);
      return EXIT.OK;
    },
  },
  label: {
    usage: `usage: rvbox label CLIENT KEY=VALUE... [KEY-...] [--json]

Sets labels of CLIENT at the server (the server's record is authoritative): KEY=VALUE
sets a label (replacing its value), KEY- removes one. Keys: 1-${MAX_LABEL_KEY_CHARS} characters of
[a-z0-9._/-] starting with [a-z0-9]; values: 1-${MAX_LABEL_VALUE_CHARS} characters of [A-Za-z0-9._-]
starting with [A-Za-z0-9]; at most ${MAX_LABELS_PER_CLIENT} labels per client. With no KEY, prints the
labels. The change is durable before it answers. An unknown CLIENT exits 66.

  rvbox label web-1 role=web zone=eu-1
  rvbox label web-1 zone-
  rvbox clients -l role=web`,
    flags: JSON_FLAG,
    args: [CLIENT],
    run: cmdLabel,
  },
  drain: {
    usage: `usage: rvbox drain CLIENT [--wait] [--timeout DUR]
       rvbox drain CLIENT --off

Drains (cordons) CLIENT before its agent is restarted or upgraded: the server dispatches
no new command to it (they stay queued, waiting with "client draining"; their queue
expiry still applies); commands already dispatched, accepted or running go on. The drain
is durable (it survives a server restart) and lasts until rvbox drain CLIENT --off.
An unknown CLIENT exits 66.

  --wait           then wait until CLIENT has no dispatched, accepted or running command
                   and print "drained: safe to restart rvbox-agent on CLIENT"
  --timeout DUR    with --wait: give up after DUR (e.g. 90s, 10m), list what still runs
                   and exit 75; the drain stays on (default: wait without a limit)
  --off            end the drain: queued commands are dispatched again`,
    flags: { wait: { type: "boolean" }, timeout: { type: "string" }, off: { type: "boolean" } },
    args: [CLIENT],
    run: cmdDrain,
  },
  claims: {
    usage: `usage: rvbox claims [--json]\n\nLists pending identity claims: another instance tried a live client id (R-F4).\nAuthorize one with: rvbox authorize CLIENT INSTANCE; forget one with: rvbox dismiss-claim CLIENT`,
    flags: JSON_FLAG,
    run: async (ctx, p) => {
      const r = await call(ctx, "", (c) => c.listClaims({}));
      const rows = r.claims.map(claimInfo);
      if (outputMode(p) === "json") ctx.out(JSON.stringify(rows, null, 2));
      else
        ctx.out(
          rows.length === 0
            ? "no pending claims"
            : table(
                ["CLIENT", "CLAIMING INSTANCE", "CURRENT INSTANCE", "ATTEMPTS", "SINCE"],
                rows.map((c) => [c.clientId, c.instanceId, c.currentInstanceId, String(c.attempts), iso(c.at)]),
              ),
        );
      return EXIT.OK;
    },
  },
  authorize: {
    usage: `usage: rvbox authorize CLIENT INSTANCE [--instance-not-yet-seen]
       rvbox authorize --revoke CLIENT

Authorizes exactly INSTANCE to take over CLIENT once (R-F5); the authorization expires
(default 5 min) and is consumed by that instance's next registration. INSTANCE must be
the full id of CLIENT's pending claimant (rvbox claims) or of the instance a takeover
replaced; anything else is refused (exit 65) unless --instance-not-yet-seen (an instance
that has not tried to register yet). An unknown CLIENT exits 66.

  --revoke                 withdraw CLIENT's unconsumed authorization (none: exit 66)
  --instance-not-yet-seen  authorize an instance the server has not seen`,
    flags: { revoke: { type: "boolean" }, "instance-not-yet-seen": { type: "boolean" } },
    args: [CLIENT, WORD],
    run: async (ctx, p) => {
      if (bool(p, "revoke")) {
        if (p.positionals.length !== 1) throw new UsageError("--revoke takes CLIENT only");
        if (bool(p, "instance-not-yet-seen")) throw new UsageError("--revoke and --instance-not-yet-seen do not go together");
        const clientId = p.positionals[0]!;
        const r = await call(ctx, `client ${clientId}`, (c) => c.revokeAuthorization({ clientId, requestId: randomUUID() }));
        ctx.out(`revoked the authorization of instance ${r.instanceId} for client ${clientId}`);
        return EXIT.OK;
      }
      if (p.positionals.length !== 2) throw new UsageError("expected CLIENT and INSTANCE (see rvbox claims)");
      const [clientId, instanceId] = p.positionals as [string, string];
      const instanceNotYetSeen = bool(p, "instance-not-yet-seen");
      const r = await call(ctx, `authorize ${clientId}`, (c) => c.authorizeInstance({ clientId, instanceId, requestId: randomUUID(), instanceNotYetSeen }));
      const until = r.expiryTime ? new Date(Number(r.expiryTime.seconds) * 1000).toISOString() : "?";
      ctx.out(`authorized instance ${instanceId} for client ${clientId} once, until ${until}`);
      return EXIT.OK;
    },
  },
  "dismiss-claim": {
    usage: `usage: rvbox dismiss-claim CLIENT\n\nForgets CLIENT's pending identity claim (rvbox claims) without authorizing it. If that\ninstance tries again while CLIENT is live it becomes the pending claim again. No claim: exit 66.`,
    flags: {},
    args: [CLIENT],
    run: async (ctx, p) => {
      const clientId = onePositional(p, "CLIENT");
      const r = await call(ctx, `client ${clientId}`, (c) => c.dismissClaim({ clientId, requestId: randomUUID() }));
      ctx.out(`dismissed the pending claim of instance ${r.instanceId} for client ${clientId}`);
      return EXIT.OK;
    },
  },
  audit: {
    usage: `usage: rvbox audit [--since DUR] [--operator NAME] [--client CLIENT] [--limit N] [--json]

Lists the server's audit log (role admin), oldest first: every mutating call made by an
operator identity (who, role, RPC and its arguments, clients, result); then, apart, the
calls access control refused (result PERMISSION_DENIED), repeats of one operator, RPC
and reason within a minute counted in one line. Both are durable and bounded
(limits.auditMax, limits.auditRefusalMax; refusals never push calls out): when older
entries were dropped it says how many, first.

  --since DUR        only entries of the last DUR (e.g. 1h, 30m, 7d)
  --operator NAME    only entries of this operator identity
  --client CLIENT    only entries naming this client
  --limit N          only the newest N matching entries`,
    flags: { ...JSON_FLAG, since: { type: "string" }, operator: { type: "string" }, client: { type: "string" }, limit: { type: "string" } },
    run: cmdAudit,
  },
  incidents: {
    usage: `usage: rvbox incidents [--all] [--json] [--dropped]\n\nLists unacknowledged incidents (recovery, store); --all includes acknowledged ones.\nIncidents past the server's bounds (open ones per client, and in all) are counted, not\nstored: the counts follow the table. --dropped --json prints only those counts.`,
    flags: { ...JSON_FLAG, all: { type: "boolean", short: "a" }, dropped: { type: "boolean" } },
    run: async (ctx, p) => {
      const r = await call(ctx, "", (c) => c.listIncidents({ includeAcknowledged: bool(p, "all") }));
      const rows = r.incidents.map(incidentInfo);
      const dropped = {
        total: Number(r.droppedTotal),
        maxOpenPerClient: r.maxOpenPerClient,
        maxOpen: r.maxOpen,
        byClient: r.dropped.map((d) => ({
          clientId: d.clientId,
          count: Number(d.count),
          lastAt: d.lastTime ? Number(d.lastTime.seconds) * 1000 + Math.floor(d.lastTime.nanos / 1e6) : null,
          lastKind: d.lastKind,
        })),
      };
      if (outputMode(p) === "json") {
        ctx.out(JSON.stringify(bool(p, "dropped") ? dropped : rows, null, 2));
        return EXIT.OK;
      }
      if (!bool(p, "dropped"))
        ctx.out(
          rows.length === 0
            ? "no incidents"
            : table(
                ["ID", "KIND", "CLIENT", "COMMAND", "TIME", "ACK", "DETAIL"],
                rows.map((i) => [i.id, i.kind, i.clientId, i.uuid || "-", iso(i.at), i.acknowledged ? "yes" : "no", i.detail]),
              ),
        );
      if (dropped.total > 0 || bool(p, "dropped")) {
        ctx.out(
          `${dropped.total} incident${dropped.total === 1 ? " was" : "s were"} counted, not stored (bounds: ${dropped.maxOpenPerClient} open per client, ${dropped.maxOpen} in all)`,
        );
        if (dropped.byClient.length > 0)
          ctx.out(
            table(
              ["CLIENT", "DROPPED", "LAST", "LAST KIND"],
              dropped.byClient.map((d) => [d.clientId, String(d.count), iso(d.lastAt), d.lastKind]),
            ),
          );
      }
      return EXIT.OK;
    },
  },
  "ack-incident": {
    usage: `usage: rvbox ack-incident ID\n\nAcknowledges an incident.`,
    flags: {},
    run: async (ctx, p) => {
      const id = onePositional(p, "ID");
      await call(ctx, `incident ${id}`, (c) => c.acknowledgeIncident({ incidentId: id, requestId: randomUUID() }));
      ctx.out(`incident ${id} acknowledged`);
      return EXIT.OK;
    },
  },
  tui: {
    usage: `usage: rvbox tui [--server URL --token FILE] [--client CLIENT] [--refresh DURATION]
       rvbox tui --sim SEED [--variant NAME] [--node NODE] [--command UUID]
       rvbox tui --demo

The terminal UI. Live: sessions, commands, output, claims and incidents of the
server, kept current by its WatchFleet stream (pushed changes, no polling).
--sim SEED runs the simulator's world for SEED and replays it in the same
views with a timeline you can step (, . [ ] < >). --demo starts a local server
and two agents with a trickle of sample commands and opens the TUI on it.

  --client CLIENT    open that client's commands
  --refresh D        fleet refresh interval, used only against a server without
                     WatchFleet (older than this client; default 1s)`,
    flags: {
      sim: { type: "string" },
      variant: { type: "string" },
      node: { type: "string" },
      command: { type: "string" },
      demo: { type: "boolean" },
      refresh: { type: "string" },
      client: { type: "string" },
    },
    values: { sim: WORD, node: WORD },
    run: cmdTui,
  },
  __complete: {
    usage: `usage: rvbox __complete clients|ids [--prefix P]

For the shell completion scripts (rvbox completion bash|zsh): client ids, or
the ids of the newest ${COMPLETE_IDS} commands starting with P, one per line.
Prints nothing and exits 1 when the server does not answer within 2 s
(--request-timeout), the token is missing, or anything else goes wrong.`,
    flags: { prefix: { type: "string" } },
    hidden: true,
    run: async (ctx, p) => {
      ctx.requestTimeoutMs = Math.min(ctx.requestTimeoutMs, COMPLETE_TIMEOUT_MS);
      const prefix = (str(p, "prefix") ?? "").toLowerCase();
      try {
        let words: string[];
        if (p.positionals[0] === "clients") words = (await call(ctx, "", (c) => c.listClients({}))).clients.map((c) => c.clientId);
        else if (p.positionals[0] === "ids") words = (await call(ctx, "", (c) => c.listCommands({ pageSize: COMPLETE_IDS }))).commands.map((c) => c.issueUuid);
        else return EXIT.USAGE;
        const hits = words.filter((w) => w.toLowerCase().startsWith(prefix));
        if (hits.length > 0) ctx.out(hits.join("\n"));
        return EXIT.OK;
      } catch (e) {
        if (ctx.io.env.RVBOX_DEBUG) ctx.err(String((e as Error).stack ?? e));
        return EXIT.ERROR;
      }
    },
  },
};

export const OPERATOR_COMMANDS = Object.keys(SUBS).filter((k) => !SUBS[k]!.hidden);

/** An operator subcommand, hidden ones (`__complete`) included. */
export function isOperatorCommand(name: string): boolean {
  return Object.hasOwn(SUBS, name);
}

/**
 * The operator subcommands for shell completion, from the parser's own table:
 * each command's flags are exactly what runOperatorCli parses for it.
 */
export function operatorCompletion(summaries: Record<string, string>): CompletionCommand[] {
  return Object.entries(SUBS).map(([name, sub]) => {
    const c: CompletionCommand = { name, summary: summaries[name] ?? "", flags: fromFlagSpecs({ ...COMMON, ...sub.flags }, sub.values), args: sub.args ?? [] };
    if (sub.rest) c.rest = sub.rest;
    if (sub.hidden) c.hidden = true;
    return c;
  });
}

/** Every subcommand's parser table (tests check the completion against it). */
export function operatorFlagTables(): Record<string, FlagSpecs> {
  return Object.fromEntries(Object.entries(SUBS).map(([name, sub]) => [name, { ...COMMON, ...sub.flags }]));
}

export function operatorUsage(name: string): string | undefined {
  const s = SUBS[name];
  return s ? `${s.usage}\n\n${GLOBAL_HELP}` : undefined;
}

/**
 * A write to `s`, the stdout or stderr of the command line `io`, failed with
 * `e`: `rvbox ls | head`, `rvbox logs ID | head`: once the reader is gone,
 * end at once and quietly (SIGPIPE's status), whatever was writing. Any other
 * write error (a full disk under `rvbox logs ID > file`: ENOSPC) ends it too,
 * with a message and status 1: never a crash, never 0 with the output cut
 * short. A follow under --cancel-on-interrupt first sends its cancel
 * (leaving.ts); then `end(code)`. The process's own streams end the process;
 * the resident client (resident.ts) ends the one command line.
 */
export function endOnOutputError(io: OperatorIO, s: NodeJS.WritableStream, e: unknown, end: (code: number) => void): void {
  const code = isClosedOutput(e) ? EXIT.OUTPUT_CLOSED : EXIT.ERROR;
  if (code === EXIT.ERROR && s !== io.stderr) writeFailureNote(e, io.stderr);
  const pending = pendingBeforeOutputExit(io);
  if (pending === null) end(code);
  else void pending().finally(() => end(code));
}

/** The command line on this process's own stdout and stderr (the one their error handler ends). */
let processIO: OperatorIO | null = null;

function defaultIO(): OperatorIO {
  for (const s of [process.stdout, process.stderr]) {
    if (s.listenerCount("error") === 0)
      s.on("error", (e) => {
        if (outputExiting) return;
        outputExiting = true;
        if (processIO === null) process.exit(isClosedOutput(e) ? EXIT.OUTPUT_CLOSED : EXIT.ERROR);
        else endOnOutputError(processIO, s, e, (code) => process.exit(code));
      });
  }
  const io: OperatorIO = {
    stdout: process.stdout,
    stderr: process.stderr,
    // Read only by the commands that take input (`run -i`, `stdin -`): making
    // process.stdin builds a stream over fd 0, a few ms of every start.
    get stdin() {
      return process.stdin;
    },
    env: process.env,
    onInterrupt: (cb) => {
      process.on("SIGINT", cb);
      return () => process.off("SIGINT", cb);
    },
    onTerminate: (cb) => {
      const term = () => cb("SIGTERM");
      const hup = () => cb("SIGHUP");
      process.on("SIGTERM", term);
      process.on("SIGHUP", hup);
      return () => {
        process.off("SIGTERM", term);
        process.off("SIGHUP", hup);
      };
    },
    runTui: async (opts) => {
      // Ink draws only the final frame when it thinks it runs in CI; an interactive terminal is not CI.
      if (process.stdout.isTTY) for (const k of ["CI", "CONTINUOUS_INTEGRATION"]) if (process.env[k] !== undefined) process.env[k] = "0";
      // React's development build (chosen when NODE_ENV is not "production", e.g. unset) times every
      // component render and diffs its props into a performance.measure() detail, which is structured-
      // cloned: an output pane's line arrays, per render. That made opening a 15 MB command cost
      // minutes and gigabytes. The TUI is a product, not a React app under development: always production.
      process.env.NODE_ENV = "production";
      return (await import("./tui-open.js")).runTui(opts);
    },
  };
  processIO = io;
  return io;
}

/**
 * Runs one operator subcommand. `argv[0]` is its name. Returns the exit code;
 * never throws for expected failures.
 */
export async function runOperatorCli(argv: readonly string[], ioIn: Partial<OperatorIO> = {}): Promise<number> {
  // Not a spread: that would read the lazy `stdin` getter.
  const io: OperatorIO = defaultIO();
  for (const [k, v] of Object.entries(ioIn)) Object.defineProperty(io, k, { value: v, enumerable: true, writable: true, configurable: true });
  return runOperatorCliOn(io, argv);
}

/**
 * Runs one operator subcommand on `io` as it is: nothing of this process
 * (its streams, signals, exit) is touched. The resident client
 * (resident.ts) runs each command line it is sent this way.
 */
export async function runOperatorCliOn(io: OperatorIO, argv: readonly string[]): Promise<number> {
  let code: number;
  try {
    code = await runWith(io, argv);
  } finally {
    // The caller exits next (process.exit), which drops writes still queued in
    // this process: a pipe that was full when the last output or marker went out.
    await Promise.all([flushed(io.stdout), flushed(io.stderr)]);
  }
  // A write that failed at the end (`rvbox ls > /dev/full`): its 'error' event may not have
  // been emitted yet, but the stream knows. (A failure the command already reported, as
  // `logs` does, came with a status of its own.)
  const failed = writeError(io.stdout) ?? writeError(io.stderr);
  if (failed === null || code !== EXIT.OK) return code;
  if (isClosedOutput(failed)) return EXIT.OUTPUT_CLOSED;
  if (writeError(io.stdout) !== null) writeFailureNote(failed, io.stderr);
  return EXIT.ERROR;
}

function writeError(s: NodeJS.WritableStream): unknown {
  return (s as { errored?: unknown }).errored ?? null;
}

function writeFailureNote(e: unknown, to: NodeJS.WritableStream = process.stderr): void {
  try {
    to.write(`rvbox: cannot write the output: ${e instanceof Error ? e.message : String(e)}\n`);
  } catch {
    // stderr is failing as well: the status says it.
  }
}

async function runWith(io: OperatorIO, argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  const err = (line: string): void => void io.stderr.write(`${line}\n`);
  const sub = name !== undefined ? SUBS[name] : undefined;
  if (!sub) {
    err(`rvbox: unknown operator command ${JSON.stringify(name ?? "")}; known: ${OPERATOR_COMMANDS.join(", ")}`);
    return EXIT.USAGE;
  }
  try {
    const p = parseFlags(rest, { ...COMMON, ...sub.flags });
    if (bool(p, "help")) {
      io.stdout.write(`${sub.usage}\n\n${GLOBAL_HELP}\n`);
      return EXIT.OK;
    }
    if (p.rest !== null && name !== "run") throw new UsageError("unexpected `--`");
    const server = normalizeServerUrl(str(p, "server") ?? io.env.RVBOX_SERVER ?? DEFAULT_SERVER);
    const caFile = str(p, "ca") ?? io.env.RVBOX_CA;
    let ca: Buffer | undefined;
    if (caFile !== undefined) {
      try {
        ca = readFileSync(inCwd(io, caFile));
      } catch (e) {
        throw new UsageError(`--ca ${caFile}: ${fileProblem(e)}`);
      }
    }
    const rt = str(p, "request-timeout") ?? io.env.RVBOX_REQUEST_TIMEOUT;
    const requestTimeoutMs = rt === undefined ? DEFAULT_REQUEST_TIMEOUT_MS : parseDuration(rt, "--request-timeout");
    let token: string | undefined;
    let client: ControlClient | undefined;
    const ctx: Ctx = {
      io,
      server,
      token() {
        if (token === undefined) {
          const file = str(p, "token") ?? io.env.RVBOX_TOKEN_FILE;
          if (!file) throw new UsageError("no operator token: pass --token FILE or set RVBOX_TOKEN_FILE");
          token = readTokenFile(file, inCwd(io, file));
        }
        return token;
      },
      client() {
        client ??= createControlClient({ baseUrl: server, token: this.token(), ...(ca !== undefined ? { ca } : {}) });
        return client;
      },
      requestTimeoutMs,
      out: (line) => void io.stdout.write(`${line}\n`),
      err,
    };
    return await sub.run(ctx, p);
  } catch (e) {
    if (e instanceof OutputClosedError) return EXIT.OUTPUT_CLOSED; // `| head`: end quietly
    if (e instanceof UsageError) {
      const hint =
        name === "run" &&
        ((e.message.startsWith("unknown flag") && !e.message.includes("did you mean")) ||
          // `rvbox run web-1 ls -l`: the command's own -l met run's -l (a job's selector).
          (/^--\S+ needs a value$/.test(e.message) && !rest.includes("--")))
          ? " (put the command after `--`: rvbox run CLIENT -- CMD ARG...)"
          : "";
      err(`rvbox ${name}: ${e.message}${hint}`);
      err(`see 'rvbox ${name} --help'`);
      return e.exitCode;
    }
    const oe = describeError(e, {});
    err(`rvbox ${name}: ${oe.message}`);
    if (io.env.RVBOX_DEBUG) err(String((e as Error).stack ?? e));
    return oe.exitCode;
  }
}

// ------------------------------------------------------------------ helpers

function onePositional(p: Parsed, what: string): string {
  if (p.positionals.length !== 1)
    throw new UsageError(p.positionals.length === 0 ? `expected ${what}` : `expected one ${what}, got ${p.positionals.length} arguments`);
  return p.positionals[0]!;
}

const FULL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Commands searched for a short id prefix (the server's listing bound). */
const PREFIX_SEARCH_LIMIT = 1000;

/**
 * A command id as the operator typed it: a full id, or a prefix of one as the
 * TUI and `ls` show them (`46d509a7`, `46d509a7-6`). A prefix must match
 * exactly one of the newest PREFIX_SEARCH_LIMIT commands; an ambiguous one is
 * an error that lists the matches. Anything else goes to the server as typed.
 */
async function resolveId(ctx: Ctx, typed: string): Promise<string> {
  if (/^[0-9a-f]{1,3}$/i.test(typed))
    throw new UsageError(`${typed} is too short for a command id prefix: give at least 4 characters of it (rvbox ls shows them)`);
  if (FULL_UUID.test(typed) || !/^[0-9a-f][0-9a-f-]{3,35}$/i.test(typed)) return typed;
  const prefix = typed.toLowerCase();
  const r = await call(ctx, "command list", (c) => c.listCommands({ pageSize: PREFIX_SEARCH_LIMIT }));
  const hits = r.commands.filter((c) => c.issueUuid.startsWith(prefix)).map(commandInfo);
  if (hits.length === 1) return hits[0]!.uuid;
  if (hits.length === 0) {
    const scope = r.commands.length >= PREFIX_SEARCH_LIMIT ? ` among the newest ${PREFIX_SEARCH_LIMIT} commands (give the full id for an older one)` : "";
    throw new OperatorError(`no command id starts with ${typed}${scope}`, EXIT.NOT_FOUND);
  }
  const shown = hits.slice(0, 10).map((c) => `  ${c.uuid}  ${c.clientId}  ${c.state}  ${c.program}`);
  throw new UsageError(`ambiguous id prefix ${typed}: ${hits.length} commands match\n${shown.join("\n")}${hits.length > 10 ? "\n  …" : ""}`);
}

/**
 * The client with ctx.requestTimeoutMs as the deadline of every unary call
 * that names none (the streaming calls, followOutput and watchFleet, are left
 * without one).
 */
function timed(ctx: Ctx): ControlClient {
  const c = ctx.client();
  return new Proxy(c, {
    get(target, k, recv) {
      const f = Reflect.get(target, k, recv) as unknown;
      if (typeof f !== "function" || k === "followOutput" || k === "watchFleet") return f;
      return (req: unknown, opts?: { timeoutMs?: number }) =>
        (f as (r: unknown, o: unknown) => unknown).call(target, req, { timeoutMs: ctx.requestTimeoutMs, ...opts });
    },
  });
}

/** One control call; its error becomes an OperatorError with the right exit code. */
async function call<T>(ctx: Ctx, what: string, fn: (c: ControlClient) => Promise<T>): Promise<T> {
  const c = timed(ctx);
  try {
    return await fn(c);
  } catch (e) {
    throw describeError(e, { server: ctx.server, what });
  }
}

/** Retry a call whose request id makes it idempotent while the server is unreachable. */
async function callIdempotent<T>(ctx: Ctx, what: string, fn: (c: ControlClient) => Promise<T>, tries = 4): Promise<T> {
  const c = timed(ctx);
  for (let i = 0; ; i++) {
    try {
      return await fn(c);
    } catch (e) {
      if (i + 1 >= tries || !isTransient(e)) throw describeError(e, { server: ctx.server, what });
      await new Promise((r) => setTimeout(r, 250 * 2 ** i));
    }
  }
}

function iso(ms: number | null): string {
  return ms === null ? "-" : new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

export function table(headers: string[], rows: string[][]): string {
  const w = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]): string =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

function outcome(c: CommandInfo): string {
  if (c.exitCode !== null) return `exit ${c.exitCode}`;
  if (c.signalName) return c.signalName;
  return "";
}

/** The command's stdin as `rvbox get` shows it: never opened, open, closed by an operator, or gone with the command. */
function stdinText(c: CommandInfo): string {
  if (!c.stdinOpen) return "not opened (/dev/null)";
  const acked = `acked through write ${c.stdinAckedThrough}`;
  if (isTerminalState(c.state)) return `ended with the command (${acked})`;
  return c.stdinCloseRequested ? `closed by an operator (${acked})` : `open (${acked})`;
}

export function describeCommand(c: CommandInfo): string {
  const rows: Array<[string, string]> = [
    ["id", c.uuid],
    ["client", c.clientId],
    ["state", `${c.state}${outcome(c) ? ` (${outcome(c)})` : ""}${c.terminalSource ? ` [by ${c.terminalSource}]` : ""}`],
    ["reason", c.reason || "-"],
    ["revision", String(c.revision)],
    ["program", c.program],
    ["cwd", c.cwd || "(agent default)"],
    ["stdin", stdinText(c)],
    ...(c.terminal ? [["terminal", `${c.terminal} (run -t)`] as [string, string]] : []),
    ["timeout", c.timeoutMs ? `${c.timeoutMs} ms` : "none"],
    ["created", iso(c.createdAt)],
    ["started", c.startedAt !== null ? iso(c.startedAt) : "-"],
    ["ended", c.endedAt !== null ? iso(c.endedAt) : "-"],
    ["duration", durationText(c, Date.now())],
    ["queue expiry", iso(c.queueExpiry)],
    ["events stored", `through ${c.storedThrough}`],
    ["output retained", `${humanBytes(c.retainedBytes)}${c.retentionMarkers ? ` (${c.retentionMarkers} retention markers: older output removed)` : ""}`],
    ["dispatch attempts", String(c.attempts)],
  ];
  const exit = exitCodeFor(c);
  if (exit !== null) rows.push(["cli exit code", String(exit)]);
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join("\n");
}

function ago(ms: number | null): string {
  if (ms === null) return "-";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)}m ago` : `${Math.floor(s / 3600)}h ago`;
}

/** How often `drain --wait` asks whether CLIENT still has dispatched, accepted or running commands. */
const DRAIN_POLL_MS = 500;
/** Commands `drain --wait` lists when it gives up (the rest are counted). */
const DRAIN_LIST_MAX = 20;
const IN_FLIGHT_STATES = [L.DISPATCHED, L.ACCEPTED, L.RUNNING];

async function cmdDrain(ctx: Ctx, p: Parsed): Promise<number> {
  const clientId = onePositional(p, "CLIENT");
  const off = bool(p, "off");
  const wait = bool(p, "wait");
  const timeoutText = str(p, "timeout");
  if (off && (wait || timeoutText !== undefined)) throw new UsageError("--off does not go with --wait or --timeout");
  if (timeoutText !== undefined && !wait) throw new UsageError("--timeout needs --wait");
  const timeoutMs = timeoutText === undefined ? null : parseDuration(timeoutText, "--timeout");
  if (timeoutMs !== null && timeoutMs <= 0) throw new UsageError("--timeout must be positive");
  const r = await call(ctx, `client ${clientId}`, (c) => c.setClientDraining({ clientId, draining: !off, requestId: randomUUID() }));
  if (off) {
    ctx.out(r.wasDraining ? `client ${clientId}: drain ended, queued commands are dispatched again` : `client ${clientId} was not draining; nothing changed`);
    return EXIT.OK;
  }
  ctx.out(`client ${clientId} draining: no new command is dispatched to it (rvbox drain ${clientId} --off ends it)`);
  if (!wait) return EXIT.OK;
  const deadline = timeoutMs === null ? null : Date.now() + timeoutMs;
  for (;;) {
    const left = await call(ctx, `client ${clientId}`, (c) => c.listCommands({ clientId, states: IN_FLIGHT_STATES, pageSize: DRAIN_LIST_MAX }));
    if (left.commands.length === 0) {
      ctx.out(`drained: safe to restart rvbox-agent on ${clientId}`);
      return EXIT.OK;
    }
    if (deadline !== null && Date.now() >= deadline) {
      const rows = left.commands.map(commandInfo);
      const more = left.nextPageToken !== "" ? " (and more)" : "";
      ctx.err(
        `rvbox: drain of ${clientId} timed out after ${timeoutText}: ${rows.length}${more} command${rows.length === 1 && !more ? "" : "s"} still dispatched, accepted or running (the drain stays on):`,
      );
      ctx.err(
        table(
          ["ID", "STATE", "CREATED", "PROGRAM"],
          rows.map((c) => [c.uuid, c.state, iso(c.createdAt), c.program]),
        ),
      );
      return EXIT.TEMPORARY;
    }
    const pause = deadline === null ? DRAIN_POLL_MS : Math.max(0, Math.min(DRAIN_POLL_MS, deadline - Date.now()));
    await new Promise((res) => setTimeout(res, pause));
  }
}

async function cmdAudit(ctx: Ctx, p: Parsed): Promise<number> {
  const since = str(p, "since");
  const limitText = str(p, "limit");
  const limit = limitText === undefined ? 0 : Number(limitText);
  if (!Number.isSafeInteger(limit) || limit < 0) throw new UsageError("--limit must be a whole number");
  const req = {
    operator: str(p, "operator") ?? "",
    clientId: str(p, "client") ?? "",
    limit,
    ...(since !== undefined ? { sinceTime: timestampFromMs(Date.now() - parseDuration(since, "--since")) } : {}),
  };
  const r = await call(ctx, "audit log", (c) => c.listAudit(req));
  const rows = r.entries.map(auditRow);
  const refusals = r.refusals.map(auditRow);
  const dropped = Number(r.droppedEntries);
  const droppedRefusals = Number(r.droppedRefusals);
  if (outputMode(p) === "json") {
    ctx.out(
      JSON.stringify(
        {
          entries: rows,
          droppedEntries: dropped,
          maxEntries: r.maxEntries,
          matched: Number(r.matched),
          refusals,
          droppedRefusals,
          maxRefusals: r.maxRefusals,
          matchedRefusals: Number(r.matchedRefusals),
        },
        null,
        2,
      ),
    );
    return EXIT.OK;
  }
  const plural = (n: number): string => `${n} older entr${n === 1 ? "y" : "ies"}`;
  if (dropped > 0) ctx.out(`… ${plural(dropped)} dropped (the audit log keeps the newest ${r.maxEntries})`);
  const cut = Number(r.matched) - rows.length;
  if (cut > 0) ctx.out(`… ${cut} older matching entr${cut === 1 ? "y" : "ies"} not shown (--limit ${limit})`);
  ctx.out(rows.length === 0 ? "no audit entries" : auditTable(rows, false));
  if (refusals.length === 0 && droppedRefusals === 0) return EXIT.OK;
  ctx.out("");
  ctx.out("refused calls (kept apart; repeats of one operator, RPC and reason within a minute counted in one line):");
  if (droppedRefusals > 0)
    ctx.out(`… ${droppedRefusals} older refusal entr${droppedRefusals === 1 ? "y" : "ies"} dropped (the server keeps the newest ${r.maxRefusals})`);
  const cutRefusals = Number(r.matchedRefusals) - refusals.length;
  if (cutRefusals > 0) ctx.out(`… ${cutRefusals} older matching refusal entr${cutRefusals === 1 ? "y" : "ies"} not shown (--limit ${limit})`);
  ctx.out(refusals.length === 0 ? "no refusal entries" : auditTable(refusals, true));
  return EXIT.OK;
}

type AuditRowView = ReturnType<typeof auditRow>;

function auditRow(e: AuditEntry) {
  const ms = (t: AuditEntry["time"]): number | null => (t ? Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6) : null);
  return {
    seq: Number(e.seq),
    time: ms(e.time),
    operator: e.operator,
    role: e.role,
    rpc: e.rpc,
    summary: e.summary,
    clients: e.clientIds,
    clientsOmitted: e.clientsOmitted,
    result: e.result,
    message: e.message,
    ...(e.count > 0n ? { count: Number(e.count), lastTime: ms(e.lastTime) } : {}),
  };
}

function auditTable(rows: AuditRowView[], counted: boolean): string {
  const head = ["SEQ", "TIME", "OPERATOR", "ROLE", "RPC", "CLIENTS", "ARGUMENTS", "RESULT"];
  return table(
    counted ? [...head.slice(0, 2), "LAST", "COUNT", ...head.slice(2)] : head,
    rows.map((e) => {
      const cells = [
        e.operator,
        e.role,
        e.rpc,
        (e.clients.join(",") || "-") + (e.clientsOmitted > 0 ? ` +${e.clientsOmitted}` : ""),
        e.summary,
        e.result === "OK" ? "OK" : `${e.result}: ${e.message}`,
      ];
      return counted ? [String(e.seq), iso(e.time), iso(e.lastTime ?? null), String(e.count ?? 1), ...cells] : [String(e.seq), iso(e.time), ...cells];
    }),
  );
}

async function cmdLabel(ctx: Ctx, p: Parsed): Promise<number> {
  const [clientId, ...edits] = p.positionals;
  if (clientId === undefined) throw new UsageError("expected CLIENT");
  const parsed = parseLabelEdits(edits);
  if (!parsed.ok) throw new UsageError(parsed.error.message);
  const { set, remove } = parsed.value;
  const r = await call(ctx, `client ${clientId}`, (c) => c.setClientLabels({ clientId, set, remove, requestId: randomUUID() }));
  if (outputMode(p) === "json") ctx.out(JSON.stringify({ clientId, labels: sortedLabelObject(r.labels) }, null, 2));
  else ctx.out(`client ${clientId} labels: ${formatLabels(r.labels) || "(none)"}`);
  return EXIT.OK;
}

function sortedLabelObject(labels: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(
    Object.keys(labels)
      .sort()
      .map((k) => [k, labels[k]!]),
  );
}

function clientsTable(rows: SessionInfo[], emptyText = "no clients have registered yet"): string {
  if (rows.length === 0) return emptyText;
  // The LABELS column only once some client has labels: an unlabelled fleet's table is as before.
  const labelled = rows.some((s) => s.labels !== undefined && Object.keys(s.labels).length > 0);
  const withLabels = (cells: string[], labels: string): string[] => (labelled ? [...cells.slice(0, -1), labels, cells[cells.length - 1]!] : cells);
  return table(
    withLabels(["CLIENT", "STATE", "INSTANCE", "GEN", "RUNNING", "QUEUED", "ACTIVE", "LAST ACTIVITY", "DETAIL"], "LABELS"),
    rows.map((s) =>
      withLabels(
        [
          s.clientId,
          s.link,
          s.instanceId,
          String(s.generation),
          `${s.running}${s.maxRunning !== null ? `/${s.maxRunning}` : ""}`,
          `${s.queued}${s.maxQueued !== null ? `/${s.maxQueued}` : ""}`,
          String(s.active ?? "-"),
          ago(s.lastActivity),
          [
            s.draining ? "draining" : "",
            s.detail,
            s.authorizedInstance ? `authorized: ${s.authorizedInstance}` : "",
            s.incidentsDropped ? `${s.incidentsDropped} incidents not stored` : "",
          ]
            .filter(Boolean)
            .join("; "),
        ],
        formatLabels(s.labels ?? {}) || "-",
      ),
    ),
  );
}

// ------------------------------------------------------------------ run

type SubmitInit = MessageInitShape<typeof SubmitCommandRequestSchema>;

/** The SubmitCommandRequest a `run` invocation asks for (exported for the argument tests). */
export function buildSubmit(p: Parsed, now = Date.now(), readFile: (f: string) => Uint8Array = (f) => readFileSync(f)): SubmitInit {
  const clientId = p.positionals[0];
  if (!clientId) throw new UsageError("expected CLIENT");
  const words = p.rest ?? p.positionals.slice(1);
  if (p.rest !== null && p.positionals.length > 1) throw new UsageError(`unexpected ${JSON.stringify(p.positionals[1])} before \`--\``);
  if (bool(p, "stdin") && bool(p, "open-stdin"))
    throw new UsageError("--stdin and --open-stdin do not go together (--stdin pipes this CLI's stdin and closes it at EOF)");
  const scriptFile = str(p, "script");
  const shell = str(p, "shell");
  let program: SubmitInit["program"];
  if (scriptFile !== undefined) {
    if (shell !== undefined) throw new UsageError("--script and --shell do not go together");
    let content: Uint8Array;
    try {
      content = readFile(scriptFile);
    } catch (e) {
      throw new UsageError(`--script ${scriptFile}: ${fileProblem(e)}`);
    }
    // The server refuses it anyway (or, past its request limit, cannot even read it): refused here, by size.
    if (content.length > MAX_SCRIPT_BYTES)
      throw new OperatorError(`refused: --script ${scriptFile} is ${content.length} bytes; the limit is ${MAX_SCRIPT_BYTES}`, EXIT.INVALID);
    const interpreter = str(p, "interpreter") ?? "";
    const hasShebang = content[0] === 0x23 && content[1] === 0x21;
    if (!interpreter && !hasShebang) throw new UsageError(`--script ${scriptFile} has no #! line; add one or pass --interpreter PATH (e.g. /bin/sh)`);
    program = { case: "script", value: { content, interpreter, args: words } };
  } else {
    if (str(p, "interpreter") !== undefined) throw new UsageError("--interpreter needs --script");
    if (words.length === 0) throw new UsageError("expected a command: rvbox run CLIENT -- CMD [ARG...]");
    if (shell !== undefined) {
      const sh = shell === "bash" ? ShellType.BASH : shell === "zsh" ? ShellType.ZSH : ShellType.SH;
      program = { case: "shell", value: { shell: sh, commandLine: words.join(" ") } };
    } else {
      if (words[0] === "") throw new UsageError("the command name is empty");
      program = { case: "argv", value: { argv: words } };
    }
  }
  const req: SubmitInit = {
    clientId,
    program,
    cwd: str(p, "cwd") ?? "",
    environment: list(p, "env").map(parseEnv),
    stdinOpen: bool(p, "stdin") || bool(p, "open-stdin"),
    issueUuid: str(p, "id") ?? randomUUID(),
    requestId: randomUUID(),
    allowUnknownClient: bool(p, "allow-unknown-client"),
  };
  const timeout = str(p, "timeout");
  if (timeout !== undefined) {
    const t = parseDuration(timeout, "--timeout");
    if (t <= 0) throw new UsageError("--timeout must be positive");
    req.timeoutMs = BigInt(t);
  }
  const expire = str(p, "expire-after");
  if (expire !== undefined) req.queueExpiryTime = timestampFromMs(now + parseDuration(expire, "--expire-after"));
  return req;
}

/**
 * `< DIR` by mistake: Node reads a directory on fd 0 as empty input (no
 * EISDIR), so the command would get EOF at once. Refused before anything is
 * sent.
 */
function checkStdin(ctx: Ctx, flag: string): void {
  let dir = false;
  if (ctx.io.stdinIsDirectory !== undefined) dir = ctx.io.stdinIsDirectory;
  else if (ctx.io.stdin !== process.stdin) return;
  else {
    try {
      dir = fstatSync(0).isDirectory();
    } catch {
      return; // no fd 0 at all: reads end at once, as they always did
    }
  }
  if (dir) throw new UsageError(`${flag}: stdin is a directory (a '< DIR' meant for a file?)`);
}

/** `run -i`: this CLI's stdin into the command's (shells/operator/stdin-pump.ts). */
async function pumpStdin(ctx: Ctx, uuid: string, signal: AbortSignal): Promise<void> {
  const c = timed(ctx);
  let st: PumpStats;
  try {
    st = await pumpStdinInto(
      ctx.io.stdin as AsyncIterable<Buffer | string>,
      {
        write: (data, requestId, after) => c.writeStdin({ issueUuid: uuid, data, appendNewline: false, requestId, afterRequestId: after ?? "" }, { signal }),
        close: (requestId) => callIdempotent(ctx, `stdin of ${uuid}`, (k) => k.closeStdin({ issueUuid: uuid, requestId }, { signal })),
        // The refusal comes from the server's working state; the view it serves follows once
        // the end is durable, so look a few times before calling the refusal an error.
        ended: async () => {
          for (let i = 0; i < 10; i++) {
            if (isTerminalState(commandInfo((await c.getCommand({ issueUuid: uuid })).command!).state)) return true;
            await new Promise((r) => setTimeout(r, 100));
          }
          return false;
        },
      },
      signal,
    );
  } catch (e) {
    throw describeError(e, { server: ctx.server, what: `stdin of ${uuid}` });
  }
  if (ctx.io.env.RVBOX_STDIN_STATS) ctx.err(`rvbox: stdin: ${JSON.stringify(st)}`);
}

async function cmdRun(ctx: Ctx, p: Parsed): Promise<number> {
  // A job never runs on terminals: refused rather than run without one.
  if (bool(p, "tty") && (p.flags.has("clients") || p.flags.has("selector"))) throw new UsageError("-t runs on one client: it does not go with --clients or -l");
  if (p.flags.has("clients") || p.flags.has("selector")) return cmdRunJob(ctx, p, outputMode(p) === "json");
  for (const f of ["max-concurrency", "max-errors"]) if (p.flags.has(f)) throw new UsageError(`--${f} needs --clients or -l (a job)`);
  if (bool(p, "tty")) return cmdRunTerminal(ctx, p);
  const req = buildSubmit(p, Date.now(), (f) => readFileSync(inCwd(ctx.io, f)));
  const follow = bool(p, "follow");
  if (bool(p, "stdin")) checkStdin(ctx, "-i");
  let r: Awaited<ReturnType<ControlClient["submitCommand"]>>;
  try {
    r = await callIdempotent(ctx, `submit to ${req.clientId}`, (c) => c.submitCommand(req as SubmitCommandRequest));
  } catch (e) {
    // The server names its request field; the operator types the flag.
    if (e instanceof OperatorError) e.message = multiClientHint(e.message.replace("allow_unknown_client", "--allow-unknown-client"), req.clientId ?? "");
    throw e;
  }
  const cmd = commandInfo(r.command!);
  const uuid = cmd.uuid;
  if (!follow) {
    if (outputMode(p) === "json") ctx.out(JSON.stringify(cmd, null, 2));
    else ctx.out(uuid);
    if (bool(p, "stdin")) await pumpStdin(ctx, uuid, new AbortController().signal);
    return EXIT.OK;
  }
  ctx.err(`rvbox: command ${uuid} submitted to ${cmd.clientId}`);
  const prog = (req as SubmitCommandRequest).program;
  const first = prog?.case === "argv" ? (prog.value.argv[0] ?? "") : "";
  const notFoundHint = /[\s$]/.test(first)
    ? `argv[0] ${JSON.stringify(first)} looks like a shell command line: run it with --shell (rvbox run ${cmd.clientId} --shell -- '…')`
    : undefined;
  // The reply says whether it waits and why: no GetCommand for a command that starts at once.
  const known = { state: r.command!.state, waitingReason: r.command!.waitingReason };
  return followToEnd(ctx, uuid, { stdin: bool(p, "stdin"), events: bool(p, "events"), notFoundHint, cancelOnInterrupt: bool(p, "cancel-on-interrupt"), known });
}

/**
 * `run -t`: submit with a terminal of this window's size, then follow it with
 * this terminal in raw mode, keys and resizes going to the command
 * (shells/operator/terminal.ts), until it ends; its exit code is ours.
 */
async function cmdRunTerminal(ctx: Ctx, p: Parsed): Promise<number> {
  for (const f of ["open-stdin", "json", "output"]) if (p.flags.has(f)) throw new UsageError(`-t and --${f} do not go together`);
  // Raw mode is this process's terminal: a resident client (RVBOX_PERSIST) has only a copy of the bytes.
  if (ctx.io.stdin !== process.stdin) throw new UsageError("-t needs the terminal itself, not the resident client: run it with RVBOX_PERSIST unset");
  const ttys = [ctx.io.stdout, ctx.io.stderr];
  const size = windowSize(ttys);
  const req = buildSubmit(p, Date.now(), (f) => readFileSync(inCwd(ctx.io, f)));
  req.stdinOpen = true;
  req.terminal = { size, term: ctx.io.env.TERM || DEFAULT_TERM_NAME };
  const r = await callIdempotent(ctx, `submit to ${req.clientId}`, (c) => c.submitCommand(req as SubmitCommandRequest));
  const cmd = commandInfo(r.command!);
  // A server that predates terminals drops the field it does not know (R-T5) and would run the
  // command without one: it is cancelled at once and said so.
  if (!r.command!.spec?.terminal) {
    await callIdempotent(ctx, `cancel of ${cmd.uuid}`, (c) => c.signalCommand({ issueUuid: cmd.uuid, signal: signalKind("CANCEL"), requestId: randomUUID() }));
    throw new OperatorError(`the server at ${ctx.server} does not know terminals (-t needs a server of protocol 1.1); ${cmd.uuid} was cancelled`, EXIT.INVALID);
  }
  ctx.err(`rvbox: command ${cmd.uuid} submitted to ${cmd.clientId} on a ${size.cols}x${size.rows} terminal`);
  const abort = new AbortController();
  const k = timed(ctx);
  const input = new TerminalInput(
    (data, resize, requestId, after) =>
      k.writeStdin(
        { issueUuid: cmd.uuid, data, appendNewline: false, requestId, afterRequestId: after ?? "", ...(resize ? { resize } : {}) },
        { signal: abort.signal },
      ),
    abort.signal,
    // A paste or a pipe faster than the server takes it: stop reading until the queue halves.
    (full) => (full ? ctx.io.stdin.pause() : ctx.io.stdin.resume()),
  );
  const leave = enterRawMode(ctx.io.stdin);
  let raw = true;
  const onData = (b: Buffer | string): void => input.data(typeof b === "string" ? Buffer.from(b) : b);
  ctx.io.stdin.on("data", onData);
  const offResize = onWindowChange(ttys, (s) => input.resize(s));
  // The CLI's own lines (ctx.err, and what followOutput writes to stderr) return the carriage while raw.
  const rctx: Ctx = { ...ctx, io: { ...ctx.io, stderr: rawTextStream(ctx.io.stderr, () => raw) }, err: (line) => ctx.err(raw ? rawLines(line) : line) };
  try {
    // A closed terminal (SIGHUP) or SIGTERM cancels it, as ssh's hang-up ends the remote session.
    return await followToEnd(rctx, cmd.uuid, { cancelOnInterrupt: true, known: { state: r.command!.state, waitingReason: r.command!.waitingReason } });
  } finally {
    offResize();
    ctx.io.stdin.off("data", onData);
    ctx.io.stdin.pause();
    abort.abort();
    leave();
    raw = false;
    if (input.stopped !== null && ctx.io.env.RVBOX_DEBUG) ctx.err(`rvbox: terminal input stopped: ${input.stopped}`);
  }
}

/** Stream to the end and turn the outcome into the exit code contract. */
async function followToEnd(
  ctx: Ctx,
  uuid: string,
  o: {
    stdin?: boolean;
    events?: boolean;
    stream?: StreamName;
    from?: number;
    notFoundHint?: string;
    lines?: LineOptions;
    cancelOnInterrupt?: boolean;
    known?: FollowOptions["known"];
  },
): Promise<number> {
  const abort = new AbortController();
  const leaving = watchLeaving(ctx.io, ctx.err, {
    cancelOnInterrupt: o.cancelOnInterrupt === true,
    what: uuid,
    sendCancel: () => {
      const requestId = randomUUID();
      return callIdempotent(ctx, `cancel of ${uuid}`, (c) => c.signalCommand({ issueUuid: uuid, signal: signalKind("CANCEL"), requestId }));
    },
    abort: () => abort.abort(),
  });
  let stdinErr: unknown = null;
  const stdinDone = o.stdin
    ? pumpStdin(ctx, uuid, abort.signal).catch((e: unknown) => {
        if (!abort.signal.aborted) {
          stdinErr = e;
          ctx.err(`rvbox: stdin: ${describeError(e).message}`);
        }
      })
    : Promise.resolve();
  try {
    const res = await followOutput(ctx.client(), ctx.io, {
      uuid,
      follow: true,
      signal: abort.signal,
      server: ctx.server,
      events: o.events,
      stream: o.stream,
      onlyStreamToStdout: o.stream !== undefined,
      from: o.from,
      lines: o.lines,
      known: o.known,
    }).catch(async (e: unknown) => {
      if (e instanceof OutputClosedError && o.cancelOnInterrupt) await leaving.cancel(`rvbox: the output was closed: cancelling ${uuid}`);
      throw e;
    });
    if (leaving.hungUp) {
      await leaving.cancelling;
      return EXIT.HANGUP;
    }
    if (leaving.detached || res.aborted) {
      ctx.err(`\nrvbox: detached; ${uuid} keeps running (rvbox logs -f ${uuid}, rvbox cancel ${uuid})`);
      return EXIT.CANCELLED;
    }
    const fin = res.finished ? commandInfo(res.finished) : commandInfo((await call(ctx, `command ${uuid}`, (c) => c.getCommand({ issueUuid: uuid }))).command!);
    const code = exitCodeFor(fin);
    if (code === null) {
      ctx.err(`rvbox: the output stream ended while ${uuid} is still ${fin.state}`);
      return EXIT.ERROR;
    }
    if (fin.state !== "succeeded" && !(fin.state === "failed" && fin.exitCode !== null)) {
      ctx.err(`rvbox: command ${uuid} ${fin.state}${outcome(fin) ? ` (${outcome(fin)})` : ""}${fin.reason ? `: ${fin.reason}` : ""}; exit ${code}`);
      if (code === EXIT.NOT_FOUND_PROGRAM && o.notFoundHint) ctx.err(`rvbox: hint: ${o.notFoundHint}`);
    }
    void stdinErr;
    return code;
  } finally {
    leaving.off();
    abort.abort();
    await stdinDone;
    await leaving.cancelling;
  }
}

async function cmdLogs(ctx: Ctx, p: Parsed): Promise<number> {
  const idText = onePositional(p, "ID");
  const stream = str(p, "stream");
  if (stream !== undefined && stream !== "stdout" && stream !== "stderr")
    throw new UsageError(`--stream: expected stdout or stderr, got ${JSON.stringify(stream)}`);
  const fromText = str(p, "from");
  const from = fromText === undefined ? 1 : Number(fromText);
  if (!Number.isSafeInteger(from) || from < 0) throw new UsageError(`--from: expected an event sequence, got ${JSON.stringify(fromText)}`);
  const follow = bool(p, "follow");
  const lines = lineOptions(p);
  const id = await resolveId(ctx, idText);
  if (bool(p, "exit-code")) {
    if (!follow) throw new UsageError("--exit-code needs --follow");
    return followToEnd(ctx, id, { events: bool(p, "events"), stream: stream as StreamName | undefined, from, lines });
  }
  const abort = new AbortController();
  const off = ctx.io.onInterrupt(() => abort.abort());
  try {
    await followOutput(ctx.client(), ctx.io, {
      uuid: id,
      follow,
      from,
      stream: stream as StreamName | undefined,
      onlyStreamToStdout: stream !== undefined,
      events: bool(p, "events"),
      signal: abort.signal,
      server: ctx.server,
      lines,
    });
  } finally {
    off();
  }
  return EXIT.OK;
}

/** --tail, --since, --timestamps: a line view of the output, or undefined for the bytes untouched. */
function lineOptions(p: Parsed): LineOptions | undefined {
  const o: LineOptions = {};
  const tail = str(p, "tail");
  if (tail !== undefined) {
    const n = Number(tail);
    if (!/^\d+$/.test(tail) || !Number.isSafeInteger(n)) throw new UsageError(`--tail: expected a number of lines, got ${JSON.stringify(tail)}`);
    if (n > MAX_TAIL_LINES) throw new UsageError(`--tail: at most ${MAX_TAIL_LINES} lines`);
    o.tail = n;
  }
  const since = instantFlag(p, "since");
  if (since !== undefined) o.since = since;
  if (bool(p, "timestamps")) o.timestamps = true;
  return Object.keys(o).length > 0 ? o : undefined;
}

/** A time flag (`--since`, `--until`): an RFC 3339 instant, or a duration ago (10m). */
function instantFlag(p: Parsed, flag: string): number | undefined {
  const text = str(p, flag);
  if (text === undefined) return undefined;
  if (!/^\d{4}-\d\d-\d\d/.test(text)) return Date.now() - parseDuration(text, `--${flag}`);
  const t = Date.parse(text);
  if (Number.isNaN(t))
    throw new UsageError(`--${flag}: not a time: ${JSON.stringify(text)} (use RFC 3339, e.g. 2026-12-01T10:00:00Z, or a duration such as 10m)`);
  return t;
}

/** --tail keeps this many lines in memory at most. */
const MAX_TAIL_LINES = 100_000;

async function cmdStdin(ctx: Ctx, p: Parsed): Promise<number> {
  const file = str(p, "file");
  const newline = bool(p, "newline", true);
  let id: string;
  let data: Uint8Array;
  if (file !== undefined) {
    id = onePositional(p, "ID");
    if (file === "-") checkStdin(ctx, "--file -");
    try {
      data = file === "-" ? await readAll(ctx.io.stdin) : readFileSync(inCwd(ctx.io, file));
    } catch (e) {
      throw new UsageError(`--file ${file}: ${fileProblem(e)}`);
    }
  } else {
    if (p.positionals.length !== 2)
      throw new UsageError(p.positionals.length < 2 ? "expected ID and TEXT (or --file FILE)" : "expected ID and one TEXT argument (quote it)");
    id = p.positionals[0]!;
    data = Buffer.from(p.positionals[1]!, "utf8");
  }
  id = await resolveId(ctx, id);
  const pieces: Uint8Array[] = [];
  for (let o = 0; o < data.length; o += STDIN_PIECE) pieces.push(data.subarray(o, o + STDIN_PIECE));
  if (pieces.length === 0) pieces.push(new Uint8Array(0));
  let last = 0n;
  for (let i = 0; i < pieces.length; i++) {
    const requestId = randomUUID();
    const isLast = i === pieces.length - 1;
    const r = await callIdempotent(ctx, `command ${id}`, (c) => c.writeStdin({ issueUuid: id, data: pieces[i]!, appendNewline: isLast && newline, requestId }));
    last = r.writeSeq;
  }
  ctx.out(`wrote ${data.length + (newline ? 1 : 0)} bytes to the stdin of ${id} (write ${last})`);
  return EXIT.OK;
}

async function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of s as AsyncIterable<Buffer | string>) parts.push(typeof c === "string" ? Buffer.from(c) : c);
  return Buffer.concat(parts);
}

/** `ls --client C` found nothing: if no client C has registered, say so on stderr (a typo, most likely), with the closest ids. */
async function noteUnknownClient(ctx: Ctx, clientId: string | undefined): Promise<void> {
  if (!clientId) return;
  const known = (await call(ctx, "", (c) => c.listClients({}))).clients.map((c) => c.clientId);
  if (known.includes(clientId)) return;
  const near = closestClients(known, clientId);
  ctx.err(`rvbox ls: no client ${clientId} has registered with this server${near.length > 0 ? `; did you mean ${near.join(", ")}?` : ""}`);
}

async function cmdLs(ctx: Ctx, p: Parsed): Promise<number> {
  const states = new Set<number>();
  for (const s of list(p, "state").flatMap((x) => x.split(","))) {
    const t = s.trim().toLowerCase();
    if (t === "") continue;
    if (t === "active") [1, 2, 3, 4].forEach((v) => states.add(v));
    else if (t === "terminal") [5, 6, 7, 8, 9, 10].forEach((v) => states.add(v));
    else {
      const e = lifecycleEnum(t);
      if (e === null)
        throw new UsageError(
          `--state: unknown state ${JSON.stringify(s)}${didYouMean(t, [...LIFECYCLES, "active", "terminal"])}; known: ${LIFECYCLES.join(", ")}, active, terminal`,
        );
      states.add(e);
    }
  }
  const limitText = str(p, "limit");
  const limit = limitText === undefined ? 100 : Number(limitText);
  if (!Number.isSafeInteger(limit) || limit <= 0) throw new UsageError(`--limit: expected a positive number, got ${JSON.stringify(limitText)}`);
  const since = instantFlag(p, "since");
  const until = instantFlag(p, "until");
  const r = await call(ctx, "", (c) =>
    c.listCommands({
      clientId: str(p, "client") ?? "",
      selector: str(p, "selector") ?? "",
      states: [...states],
      pageSize: Math.min(limit, 10_000),
      ...(since !== undefined ? { createdAfter: timestampFromMs(since) } : {}),
      ...(until !== undefined ? { createdBefore: timestampFromMs(until) } : {}),
    }),
  );
  const rows = r.commands.map(commandInfo).slice(0, limit);
  if (outputMode(p) === "json") {
    ctx.out(JSON.stringify(rows, null, 2));
    return EXIT.OK;
  }
  if (rows.length === 0) {
    ctx.out("no commands");
    await noteUnknownClient(ctx, str(p, "client"));
    return EXIT.OK;
  }
  const wide = outputMode(p) === "wide";
  const now = Date.now();
  ctx.out(
    wide
      ? table(
          ["ID", "CLIENT", "STATE", "REV", "EXIT", "CREATED", "STARTED", "ENDED", "DURATION", "EVENTS", "PROGRAM", "REASON"],
          rows.map((c) => [
            c.uuid,
            c.clientId,
            c.state,
            String(c.revision),
            outcome(c) || "-",
            iso(c.createdAt),
            c.startedAt !== null ? iso(c.startedAt) : "-",
            c.endedAt !== null ? iso(c.endedAt) : "-",
            durationText(c, now),
            String(c.storedThrough),
            c.program,
            c.reason || "-",
          ]),
        )
      : table(
          ["ID", "CLIENT", "STATE", "REV", "EXIT", "CREATED", "DURATION", "PROGRAM"],
          rows.map((c) => [
            c.uuid,
            c.clientId,
            c.state,
            String(c.revision),
            outcome(c) || "-",
            iso(c.createdAt),
            durationText(c, now),
            c.program.length > 60 ? `${c.program.slice(0, 59)}…` : c.program,
          ]),
        ),
  );
  if (r.nextPageToken !== "" && rows.length >= limit) ctx.err(`(more than ${limit}; --limit N shows more)`);
  return EXIT.OK;
}

async function cmdTui(ctx: Ctx, p: Parsed): Promise<number> {
  const simText = str(p, "sim");
  const refreshText = str(p, "refresh");
  const launch: TuiLaunch = {};
  const client = str(p, "client");
  if (client !== undefined) launch.client = client;
  if (refreshText !== undefined) {
    launch.refreshMs = parseDuration(refreshText, "--refresh");
    if (launch.refreshMs < 200)
      throw new UsageError("--refresh: at least 200ms (one refresher serves every view; it is used only against servers without WatchFleet)");
  }
  if (simText !== undefined) {
    const seed = Number(simText);
    if (!Number.isSafeInteger(seed) || seed < 0) throw new UsageError(`--sim: expected a seed (a non-negative integer), got ${JSON.stringify(simText)}`);
    launch.sim = { seed };
    for (const k of ["variant", "node", "command"] as const) {
      const v = str(p, k);
      if (v !== undefined) launch.sim[k] = v;
    }
  } else if (bool(p, "demo")) {
    launch.demo = true;
  } else {
    for (const k of ["variant", "node", "command"]) if (p.flags.has(k)) throw new UsageError(`--${k} needs --sim SEED`);
    launch.server = { baseUrl: ctx.server, token: ctx.token() };
    // Fail fast with a clear message instead of an empty screen.
    await call(ctx, "", (c) => c.listClients({}));
  }
  if (p.positionals.length > 0) throw new UsageError(`unexpected ${JSON.stringify(p.positionals[0])}`);
  return ctx.io.runTui(launch);
}

export { OperatorError };
