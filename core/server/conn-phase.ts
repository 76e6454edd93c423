// The server connection's phases (one per agent WebSocket) and their one
// writer. A connection that closes is dropped from the state, so there is no
// closed phase:
//
//   hello --valid ClientHello--> welcoming --client record durable--> reconciling
//     --ReconcileSnapshot, result durable--> ready
//
// Which envelope kinds each phase accepts is core/protocol/envelopes.ts.

import { assert } from "../errors.js";
import type { ConnPhase, ConnState } from "./server-types.js";

export const CONN_PHASES: Readonly<Record<ConnPhase, { readonly next: readonly ConnPhase[]; readonly meaning: string }>> = {
  hello: { next: ["welcoming"], meaning: "opened; waiting for the ClientHello" },
  welcoming: { next: ["reconciling"], meaning: "registered; the client record with its new generation is being persisted" },
  reconciling: { next: ["ready"], meaning: "welcome and ReconcileRequest sent; waiting for the snapshot and the durable result" },
  ready: { next: [], meaning: "ReconcileResult sent: commands may be dispatched (R-D8)" },
};

/** The one writer of `conn.phase`: only forward, one step at a time. */
export function setPhase(conn: ConnState, to: ConnPhase): void {
  assert(CONN_PHASES[conn.phase].next.includes(to), `connection ${conn.conn}: phase ${conn.phase} -> ${to} is not a transition`);
  conn.phase = to;
}
