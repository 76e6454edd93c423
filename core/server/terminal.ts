// Terminals (`rvbox run -t`, protocol 1.1, R-T4/R-T5). A command with
// ExecutionSpec.terminal goes only to a session that negotiated 1.1: an agent
// at 1.0 would ignore the unknown field (R-T5) and run the process without a
// terminal. So a submit for a client connected at 1.0 is refused, and a
// command that meets a 1.0 session at dispatch (the agent was downgraded, or
// was offline at submit) ends `rejected` with the reason, never dispatched.
// Resizes (StdinWrite.resize) exist only for such commands, so they reach
// only 1.1 sessions as well.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { speaksTerminal, TERMINAL_VERSION, type Version, versionText } from "../codec/version.js";
import { codeName, Code } from "../errors.js";
import { setState } from "./commands.js";
import type { ServerCtx } from "./io.js";
import type { ConnState, ServerCommand, ServerState } from "./server-types.js";

/** Why a terminal cannot go to `clientId`'s agent at version `v`. */
export function terminalRefusal(clientId: string, v: Version): string {
  return (
    `the agent of ${clientId} speaks protocol ${versionText(v)}; a terminal (rvbox run -t) needs ${versionText(TERMINAL_VERSION)}: ` +
    "upgrade that agent, or run without -t (it never runs without its terminal)"
  );
}

/** Submit: a terminal for a client whose live session negotiated an older minor is refused now (null: no objection). */
export function terminalSubmitRefusal(st: ServerState, clientId: string): string | null {
  const client = st.clients.get(clientId);
  const conn = client && client.conn !== 0 ? st.conns.get(client.conn) : undefined;
  if (!conn || conn.version === null || speaksTerminal(conn.version)) return null;
  return terminalRefusal(clientId, conn.version);
}

/**
 * Dispatch: true when `c` needs a terminal that `conn` cannot carry; it then
 * ends `rejected` (server-decided, permanent, never launched: R-D4).
 */
export function refuseTerminalDispatch(st: ServerState, ctx: ServerCtx, conn: ConnState, c: ServerCommand): boolean {
  if (!c.spec.terminal || speaksTerminal(conn.version)) return false;
  const v = conn.version ?? { major: 1, minor: 0 };
  setState(st, ctx, c, L.REJECTED, "server", `${codeName(Code.INCOMPATIBLE_VERSION)}: ${terminalRefusal(c.clientId, v)}`);
  ctx.emit({ type: "trace", event: "terminal_refused", detail: { uuid: c.uuid, client: c.clientId, version: versionText(v) } });
  return true;
}
