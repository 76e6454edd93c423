/** `rvbox server`: flags/config -> ServerDaemon, until SIGINT/SIGTERM. */
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { defaultServerConfig, type ServerLimits } from "../../core/index.js";
import { createLogger, type Logger, parseLogLevel } from "../runtime/log.js";
import { AgentTokens, OperatorToken } from "../server/auth.js";
import { identityError, mintToken, OperatorIdentities, operatorLine, type Role } from "../server/operators.js";
import { checkStoreUrl, ServerDaemon } from "../server/server-daemon.js";
import { migrateToPostgres } from "../server/migrate-store.js";
import * as path from "node:path";
import { daemonSignals, numericLimits, parseHostPort, settings } from "./config.js";

export const SERVER_USAGE = `usage: rvbox server [--listen HOST:PORT] [--control HOST:PORT] [--data DIR | --store URL]
                    --agent-tokens FILE (--operator-token FILE | --identities FILE) [--config FILE]
                    [--log-level debug|info|warn|error] [--repair-store]
       rvbox server operator add NAME --role viewer|operator|admin [--selector SEL] --identities FILE
       rvbox server migrate --from DATA_DIR --to postgres://USER@HOST:PORT/DATABASE

  --listen HOST:PORT       agent WebSocket endpoint, path /v1/agent (default 127.0.0.1:7400)
  --control HOST:PORT      ConnectRPC control API (default 127.0.0.1:7401)
  --data DIR               durable store and output segments (default ./rvbox-data)
  --store URL              keep the state in PostgreSQL instead: postgres://USER@HOST:PORT/DB
                           (a password from PGPASSWORD or ~/.pgpass, not the URL)
  --agent-tokens FILE      lines "client_id token" or "* token"
  --operator-token FILE    the operators' bearer tokens, one per line: each is the
                           identity "admin" (role admin)
  --identities FILE        named operator identities with roles, lines
                           "NAME ROLE sha256:HEX [SELECTOR]" (docs/CONFIG.md); mint one
                           with: rvbox server operator add NAME --role R --identities FILE
                           (SIGHUP re-reads the token and operator files)
  --config FILE            JSON with the same keys, plus "limits": {outputPerCommand, ...}
  --repair-store           acknowledge a corrupt journal: truncate it at the corruption`;

/** The flags (and config-file keys) of this daemon; docs/CONFIG.md lists each. */
export const SERVER_OPTIONS = {
  listen: { type: "string" },
  control: { type: "string" },
  data: { type: "string" },
  store: { type: "string" },
  "agent-tokens": { type: "string" },
  "operator-token": { type: "string" },
  identities: { type: "string" },
  config: { type: "string" },
  "log-level": { type: "string" },
  "repair-store": { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

// A token or identities file with nothing in it is refused, at start and on a
// reload (which then keeps the previous set): caught empty mid-write, or
// emptied by mistake, it would lock every agent or every operator out.

/** The limits a config file may set: every numeric one (the store decides historyInStore). */
function settableLimits(): Omit<ServerLimits, "historyInStore"> {
  const { historyInStore: _, ...rest } = defaultServerConfig().limits;
  return rest;
}

function loadAgentTokens(file: string): AgentTokens {
  let t: AgentTokens;
  try {
    t = AgentTokens.load(file);
  } catch (err) {
    throw new Error(`--agent-tokens ${file}: ${(err as Error).message}`);
  }
  if (t.size === 0) throw new Error(`--agent-tokens ${file} holds no token`);
  return t;
}

function loadOperatorToken(file: string): OperatorToken {
  try {
    return OperatorToken.load(file);
  } catch (err) {
    throw new Error(`--operator-token ${file}: ${(err as Error).message}`);
  }
}

export function loadOperators(file: string): OperatorIdentities {
  let ids: OperatorIdentities;
  try {
    ids = OperatorIdentities.load(file);
  } catch (err) {
    throw new Error(`--identities ${file}: ${(err as Error).message}`);
  }
  if (ids.size === 0) throw new Error(`--identities ${file} holds no identity (every call would be refused)`);
  return ids;
}

/** The token and identities files a server reads, and the agent tokens it holds (replaced in place on a reload). */
export interface TokenFiles {
  agentTokensFile: string;
  operatorTokenFile?: string | undefined;
  identitiesFile?: string | undefined;
  agentTokens: AgentTokens;
}

/** What a reload asks of the daemon: take the operator sets (ending streams they no longer allow), close revoked agent sessions. */
export interface ReloadTarget {
  reloadOperators(ids: OperatorIdentities | undefined, legacy: OperatorToken | undefined): number;
  closeRevokedSessions(): number;
}

/**
 * Token rotation (SIGHUP): re-read every file; if any does not parse or holds
 * nothing, nothing changes and the error is logged. Returns whether it took.
 */
export function reloadTokens(f: TokenFiles, log: Logger, daemon: ReloadTarget): boolean {
  try {
    const a = loadAgentTokens(f.agentTokensFile);
    const o = f.operatorTokenFile ? loadOperatorToken(f.operatorTokenFile) : undefined;
    const ids = f.identitiesFile ? loadOperators(f.identitiesFile) : undefined;
    f.agentTokens.replaceWith(a);
    const streamsEnded = daemon.reloadOperators(ids, o);
    const closed = daemon.closeRevokedSessions();
    log.info("tokens reloaded", { agentTokens: a.size, operatorTokens: o?.size ?? 0, operators: ids?.size ?? 0, sessionsClosed: closed, streamsEnded });
    return true;
  } catch (err) {
    log.error("token reload failed; the previous tokens stay in force", { err: (err as Error).message });
    return false;
  }
}

export const OPERATOR_ADD_USAGE = `usage: rvbox server operator add NAME --role viewer|operator|admin [--selector SEL] --identities FILE

Mints a random token for a new operator identity, appends its line (the token's
SHA-256, never the token) to FILE and prints the token once. Role operator needs
--selector: the label selector of the clients it may run on (e.g. role=web).
A running server picks the new identity up on SIGHUP.`;

/** `rvbox server operator add ...`: mint an identity (prints the token once). */
export function operatorAdd(argv: string[], out: (line: string) => void = (l) => void process.stdout.write(`${l}\n`)): number {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { role: { type: "string" }, selector: { type: "string" }, identities: { type: "string" }, help: { type: "boolean", short: "h" } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    out(OPERATOR_ADD_USAGE);
    return 0;
  }
  const [verb, name, ...extra] = positionals;
  if (verb !== "add" || name === undefined || extra.length > 0 || !values.role || !values.identities) throw new Error(OPERATOR_ADD_USAGE);
  const selector = values.selector ?? "";
  const bad = identityError(name, values.role, selector);
  if (bad) throw new Error(bad);
  const file = values.identities;
  const existing = existsSync(file) ? readFileSync(file, "utf8") : "";
  const ids = existing ? OperatorIdentities.parse(existing) : null;
  if (ids?.names.includes(name)) throw new Error(`${file}: operator ${name} already exists (remove its line to replace it)`);
  const token = mintToken();
  const line = operatorLine(name, values.role as Role, selector, token);
  appendFileSync(file, `${existing !== "" && !existing.endsWith("\n") ? "\n" : ""}${line}\n`, { mode: 0o600 });
  out(token);
  process.stderr.write(
    `operator ${name} (role ${values.role}${selector ? `, clients matching ${selector}` : ""}) added to ${file}; the token above is shown only now\n`,
  );
  return 0;
}

export const MIGRATE_USAGE = `usage: rvbox server migrate --from DATA_DIR --to postgres://USER@HOST:PORT/DATABASE

Copies a stopped server's embedded store (its --data directory) into an empty
PostgreSQL database, then checks the copy row by row and byte by byte against
the source. Start the server with --store URL afterwards; the source is left
as it was.`;

/** `rvbox server migrate --from DIR --to URL`. */
export async function migrateMain(argv: string[], out: (line: string) => void = (l) => void process.stderr.write(`${l}\n`)): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { from: { type: "string" }, to: { type: "string" }, help: { type: "boolean", short: "h" } },
    strict: true,
  });
  if (values.help) {
    out(MIGRATE_USAGE);
    return 0;
  }
  if (!values.from || !values.to) throw new Error(MIGRATE_USAGE);
  if (!existsSync(path.join(values.from, "db"))) throw new Error(`--from ${values.from}: no server store there (no db/ directory)`);
  const r = await migrateToPostgres(values.from, checkStoreUrl(values.to), defaultServerConfig().limits.segmentBytes, out);
  out(`migrated ${r.commands} commands; start the server with --store ${values.to.replace(/\/\/[^@/]*@/, "//…@")}`);
  return 0;
}

export async function serverMain(argv: string[]): Promise<number> {
  if (argv[0] === "operator") return operatorAdd(argv.slice(1));
  if (argv[0] === "migrate") return migrateMain(argv.slice(1));
  const s = settings(argv, SERVER_OPTIONS, SERVER_USAGE);
  const tokensFile = s.get("agent-tokens");
  const operatorFile = s.get("operator-token");
  const operatorsFile = s.get("identities");
  if (!tokensFile || (!operatorFile && !operatorsFile))
    throw new Error(`--agent-tokens and --operator-token (or --identities) are required\n\n${SERVER_USAGE}`);
  const log = createLogger("server", parseLogLevel(s.get("log-level")));
  const agentTokens = loadAgentTokens(tokensFile);
  const operatorToken = operatorFile ? loadOperatorToken(operatorFile) : undefined;
  const operators = operatorsFile ? loadOperators(operatorsFile) : undefined;
  // Token rotation: SIGHUP (systemctl reload) re-reads both files. A file
  // that does not parse changes nothing. An agent session whose token is gone
  // is closed (its agent reconnects with its current token); an operator
  // stream (FollowOutput, WatchFleet) whose token or role no longer allows it
  // is ended; unary calls already running finish.
  const files = { agentTokensFile: tokensFile, operatorTokenFile: operatorFile, identitiesFile: operatorsFile, agentTokens };
  const reload = (daemon: ServerDaemon): void => void reloadTokens(files, log, daemon);
  // Listened for from before start (daemonSignals says why).
  const signals = daemonSignals<ServerDaemon>(reload);
  // Told to stop while the start still waits for its database (open-store.ts): stop waiting.
  const starting = new AbortController();
  void signals.stopped.then(() => starting.abort());
  const daemon = await ServerDaemon.start({
    signal: starting.signal,
    listen: parseHostPort(s.get("listen") ?? "127.0.0.1:7400", "--listen"),
    control: parseHostPort(s.get("control") ?? "127.0.0.1:7401", "--control"),
    dataDir: s.get("data") ?? "./rvbox-data",
    store: s.get("store"),
    agentTokens,
    ...(operatorToken ? { operatorToken } : {}),
    ...(operators ? { operators } : {}),
    limits: numericLimits(s.object("limits"), settableLimits(), "limits", ["historyMs", "followStreamsAdminReserve"]),
    repairStore: s.bool("repair-store"),
    log,
  }).catch((err: unknown) => {
    if (starting.signal.aborted) return null;
    throw err;
  });
  if (daemon === null) {
    log.info("stopped before the store could be opened");
    return 0;
  }
  signals.started(daemon);
  const sig = await signals.stopped;
  signals.stopReload();
  log.info("stopping", { signal: sig });
  await daemon.close();
  return 0;
}
