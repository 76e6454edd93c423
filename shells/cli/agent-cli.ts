/** `rvbox agent`: flags/config -> AgentDaemon, until SIGINT/SIGTERM. */
import { readFileSync } from "node:fs";
import type { ParseArgsConfig } from "node:util";
import { defaultAgentConfig } from "../../core/index.js";
import { AgentDaemon } from "../agent/agent-daemon.js";
import { createLogger, parseLogLevel } from "../runtime/log.js";
import { daemonSignals, numericLimits, readSecret, settings } from "./config.js";

export const AGENT_USAGE = `usage: rvbox agent --server URL --client-id ID --state DIR --token FILE
                   [--max-running N] [--max-queued N] [--cwd DIR] [--ca FILE] [--insecure]
                   [--config FILE] [--log-level LEVEL] [--repair-store]

  --server URL        ws://HOST:PORT/v1/agent or wss://HOST/v1/agent (behind nginx)
  --client-id ID      this host's client id (1-128 printable ASCII)
  --state DIR         durable state: store (instance id, spool, tombstones), scripts
  --token FILE        bearer token for the WebSocket upgrade (SIGHUP re-reads it)
  --max-running N     concurrent commands (default 4); --max-queued N (default 16)
  --cwd DIR           working directory of commands that name none (default: current)
  --ca FILE           PEM CA bundle to verify the server's TLS certificate
  --insecure          accept any TLS certificate (testing only)
  --repair-store      acknowledge an essential-store incident: truncate the journal at the corruption`;

/** The flags (and config-file keys) of this daemon; docs/CONFIG.md lists each. */
export const AGENT_OPTIONS = {
  server: { type: "string" },
  "client-id": { type: "string" },
  state: { type: "string" },
  token: { type: "string" },
  "max-running": { type: "string" },
  "max-queued": { type: "string" },
  cwd: { type: "string" },
  ca: { type: "string" },
  insecure: { type: "boolean" },
  config: { type: "string" },
  "log-level": { type: "string" },
  "repair-store": { type: "boolean" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

export async function agentMain(argv: string[]): Promise<number> {
  const s = settings(argv, AGENT_OPTIONS, AGENT_USAGE);
  const server = s.get("server");
  const clientId = s.get("client-id");
  const state = s.get("state");
  const tokenFile = s.get("token");
  if (!server || !clientId || !state || !tokenFile) throw new Error(`--server, --client-id, --state and --token are required\n\n${AGENT_USAGE}`);
  const ca = s.get("ca");
  const log = createLogger(`agent ${clientId}`, parseLogLevel(s.get("log-level")));
  // Token rotation: SIGHUP (systemctl reload) re-reads the token file; the
  // next connection presents it. A file that cannot be read changes nothing.
  const reload = (daemon: AgentDaemon): void => {
    try {
      daemon.setToken(readSecret(tokenFile, "--token"));
      log.info("token reloaded", { file: tokenFile });
    } catch (err) {
      log.error("token reload failed; the previous token stays in force", { err: (err as Error).message });
    }
  };
  // Listened for from before start (daemonSignals says why).
  const signals = daemonSignals<AgentDaemon>(reload);
  const daemon = await AgentDaemon.start({
    serverUrl: server,
    clientId,
    stateDir: state,
    token: readSecret(tokenFile, "--token"),
    maxRunning: s.int("max-running"),
    maxQueued: s.int("max-queued"),
    cwd: s.get("cwd"),
    ca: ca ? readFileSync(ca) : undefined,
    insecure: s.bool("insecure"),
    repairStore: s.bool("repair-store"),
    limits: numericLimits(s.object("limits"), defaultAgentConfig(clientId).limits, "limits"),
    log,
  });
  signals.started(daemon);
  const sig = await signals.stopped;
  signals.stopReload();
  log.info("stopping", { signal: sig });
  // Commands this agent launched are reported `interrupted` after a restart
  // and never relaunched (the core's rule), so stop them with the agent.
  await daemon.close({ killProcesses: true });
  return 0;
}
