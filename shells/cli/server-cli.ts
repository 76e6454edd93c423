/** `rvbox server`: flags/config -> ServerDaemon, until SIGINT/SIGTERM. */
import type { ParseArgsConfig } from "node:util";
import { defaultServerConfig } from "../../core/index.js";
import { createLogger, parseLogLevel } from "../runtime/log.js";
import { AgentTokens, OperatorToken } from "../server/auth.js";
import { ServerDaemon } from "../server/server-daemon.js";
import { numericLimits, parseHostPort, readSecret, settings, untilSignal } from "./config.js";

export const SERVER_USAGE = `usage: rvbox server [--listen HOST:PORT] [--control HOST:PORT] [--data DIR]
                    --agent-tokens FILE --operator-token FILE [--config FILE]
                    [--log-level debug|info|warn|error] [--repair-store]

  --listen HOST:PORT       agent WebSocket endpoint, path /v1/agent (default 127.0.0.1:7400)
  --control HOST:PORT      ConnectRPC control API (default 127.0.0.1:7401)
  --data DIR               durable store and output segments (default ./rvbox-data)
  --agent-tokens FILE      lines "client_id token" or "* token"
  --operator-token FILE    the operators' bearer token
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

export async function serverMain(argv: string[]): Promise<number> {
  const s = settings(argv, SERVER_OPTIONS, SERVER_USAGE);
  const tokensFile = s.get("agent-tokens");
  const operatorFile = s.get("operator-token");
  if (!tokensFile || !operatorFile) throw new Error(`--agent-tokens and --operator-token are required\n\n${SERVER_USAGE}`);
  const log = createLogger("server", parseLogLevel(s.get("log-level")));
  const daemon = await ServerDaemon.start({
    listen: parseHostPort(s.get("listen") ?? "127.0.0.1:7400", "--listen"),
    control: parseHostPort(s.get("control") ?? "127.0.0.1:7401", "--control"),
    dataDir: s.get("data") ?? "./rvbox-data",
    agentTokens: AgentTokens.load(tokensFile),
    operatorToken: new OperatorToken(readSecret(operatorFile, "--operator-token")),
    limits: numericLimits(s.object("limits"), defaultServerConfig().limits, "limits", ["historyMs"]),
    repairStore: s.bool("repair-store"),
    log,
  });
  const sig = await untilSignal();
  log.info("stopping", { signal: sig });
  await daemon.close();
  return 0;
}
