/** `rvbox server`: flags/config -> ServerDaemon, until SIGINT/SIGTERM. */
import type { ParseArgsConfig } from "node:util";
import { defaultServerConfig } from "../../core/index.js";
import { createLogger, parseLogLevel } from "../runtime/log.js";
import { AgentTokens, OperatorToken } from "../server/auth.js";
import { ServerDaemon } from "../server/server-daemon.js";
import { numericLimits, onReload, parseHostPort, settings, untilSignal } from "./config.js";

export const SERVER_USAGE = `usage: rvbox server [--listen HOST:PORT] [--control HOST:PORT] [--data DIR]
                    --agent-tokens FILE --operator-token FILE [--config FILE]
                    [--log-level debug|info|warn|error] [--repair-store]

  --listen HOST:PORT       agent WebSocket endpoint, path /v1/agent (default 127.0.0.1:7400)
  --control HOST:PORT      ConnectRPC control API (default 127.0.0.1:7401)
  --data DIR               durable store and output segments (default ./rvbox-data)
  --agent-tokens FILE      lines "client_id token" or "* token"
  --operator-token FILE    the operators' bearer tokens, one per line
                           (SIGHUP re-reads both token files)
  --config FILE            JSON with the same keys, plus "limits": {outputPerCommand, ...}
  --repair-store           acknowledge a corrupt journal: truncate it at the corruption`;

/** The flags (and config-file keys) of this daemon; docs/CONFIG.md lists each. */
export const SERVER_OPTIONS = {
  listen: { type: "string" },
  control: { type: "string" },
  data: { type: "string" },
  "agent-tokens": { type: "string" },
  "operator-token": { type: "string" },
  config: { type: "string" },
  "log-level": { type: "string" },
  "repair-store": { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

function loadAgentTokens(file: string): AgentTokens {
  try {
    return AgentTokens.load(file);
  } catch (err) {
    throw new Error(`--agent-tokens ${file}: ${(err as Error).message}`);
  }
}

function loadOperatorToken(file: string): OperatorToken {
  try {
    return OperatorToken.load(file);
  } catch (err) {
    throw new Error(`--operator-token ${file}: ${(err as Error).message}`);
  }
}

export async function serverMain(argv: string[]): Promise<number> {
  const s = settings(argv, SERVER_OPTIONS, SERVER_USAGE);
  const tokensFile = s.get("agent-tokens");
  const operatorFile = s.get("operator-token");
  if (!tokensFile || !operatorFile) throw new Error(`--agent-tokens and --operator-token are required\n\n${SERVER_USAGE}`);
  const log = createLogger("server", parseLogLevel(s.get("log-level")));
  const agentTokens = loadAgentTokens(tokensFile);
  const operatorToken = loadOperatorToken(operatorFile);
  const daemon = await ServerDaemon.start({
    listen: parseHostPort(s.get("listen") ?? "127.0.0.1:7400", "--listen"),
    control: parseHostPort(s.get("control") ?? "127.0.0.1:7401", "--control"),
    dataDir: s.get("data") ?? "./rvbox-data",
    agentTokens,
    operatorToken,
    limits: numericLimits(s.object("limits"), defaultServerConfig().limits, "limits", ["historyMs"]),
    repairStore: s.bool("repair-store"),
    log,
  });
  // Token rotation: SIGHUP (systemctl reload) re-reads both files. A file
  // that does not parse changes nothing. An agent session whose token is gone
  // is closed (its agent reconnects with its current token); operator calls
  // and streams already running finish (a token is checked per call).
  const stopReload = onReload(() => {
    try {
      const a = loadAgentTokens(tokensFile);
      // A file caught empty (mid-write) would lock every agent out.
      if (a.size === 0) throw new Error(`--agent-tokens ${tokensFile} holds no token`);
      const o = loadOperatorToken(operatorFile);
      agentTokens.replaceWith(a);
      operatorToken.replaceWith(o);
      const closed = daemon.closeRevokedSessions();
      log.info("tokens reloaded", { agentTokens: a.size, operatorTokens: o.size, sessionsClosed: closed });
    } catch (err) {
      log.error("token reload failed; the previous tokens stay in force", { err: (err as Error).message });
    }
  });
  const sig = await untilSignal();
  stopReload();
  log.info("stopping", { signal: sig });
  await daemon.close();
  return 0;
}
