// The command record: its one state writer (`setState`), the persist that
// carries its outward view to readers once durable (`persistCommand`, whose
// after-durable half `releaseCommitted` is here), and the small helpers every
// concern module shares.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { canTransition, isTerminal } from "../dispatch/lifecycle.js";
import { assert } from "../errors.js";
import { MAX_REQUEST_IDS_PER_COMMAND } from "../limits.js";
import type { CommittedView, ConnState, ServerCommand, ServerDeferred, ServerState } from "./server-types.js";
import { commandRecord, scriptDelete, stdinRowsDelete } from "./store.js";
import { noteEnded } from "./history.js";
import type { ServerCtx } from "./io.js";
import { recharge } from "./metadata.js";
import { deactivate, touch, unpark } from "./active.js";

/** The outward view a durable copy of `c` would show. */
export function viewOf(c: ServerCommand): CommittedView {
  return {
    state: c.state,
    exitCode: c.exit.exitCode,
    signalName: c.exit.signalName,
    reason: c.exit.reason,
    storedThrough: c.ingest.receivedThrough,
    revision: c.revision,
    stdinAssigned: c.stdin.nextSeq - 1,
    startedTime: c.startedTime,
    endedTime: c.endedTime,
  };
}

/** Persist the command record; readers see its new view once that persist is durable. */
export function persistCommand(st: ServerState, ctx: ServerCtx, c: ServerCommand): void {
  recharge(st, c);
  ctx.persist(commandRecord(c));
  ctx.afterDurable({ kind: "committed", uuid: c.uuid, view: viewOf(c) });
}

/** Readers see a command's new view once the persist that holds it is durable (persistCommand). */
export function releaseCommitted(st: ServerState, a: Extract<ServerDeferred, { kind: "committed" }>): void {
  const c = st.commands.get(a.uuid);
  if (!c) return;
  c.committed = a.view;
  if (st.active.has(c.uuid)) touch(st, c);
}

/** Remember request_id -> number for idempotent retries, forgetting the oldest past the bound. */
export function remember(c: ServerCommand, requestId: string, n: number): void {
  c.requests[requestId] = n;
  const keys = Object.keys(c.requests);
  if (keys.length > MAX_REQUEST_IDS_PER_COMMAND) delete c.requests[keys[0]!];
}

/**
 * The one writer of a command's state. `at`: the wall time of the transition
 * (the agent's event time for its own events). `announce` false: a move
 * between queued and dispatched (or staying queued) that the caller persists
 * itself and traces in its own words (dispatch, requeue); nothing else may be
 * silent, and a terminal state is always announced.
 */
export function setState(
  st: ServerState,
  ctx: ServerCtx,
  c: ServerCommand,
  to: L,
  source: "agent" | "server",
  reason = "",
  at = ctx.wall,
  announce = true,
): void {
  assert(!isTerminal(c.state), `terminal ${L[c.state]} of ${c.uuid} may not change to ${L[to]}`);
  // One fewer in flight: the client's queued commands may have room again (active.ts).
  if (c.state === L.DISPATCHED && to !== L.DISPATCHED) unpark(st, c.clientId);
  if (!announce) {
    assert(
      (to === L.QUEUED || to === L.DISPATCHED) && (to === c.state || canTransition(c.state, to)),
      `silent transition ${L[c.state]} -> ${L[to]} for ${c.uuid}`,
    );
    c.state = to;
    touch(st, c);
    return;
  }
  assert(canTransition(c.state, to), `illegal transition ${L[c.state]} -> ${L[to]} for ${c.uuid}`);
  c.state = to;
  touch(st, c);
  if (to === L.RUNNING && c.startedTime === 0) c.startedTime = at;
  if (isTerminal(to)) {
    c.endedTime = at;
    deactivate(st, c);
    noteEnded(st, c, ctx.now);
    c.exit.terminalSource = source;
    if (reason) c.exit.reason = reason;
    c.script.bytes = null;
    ctx.persist(scriptDelete(c.uuid));
    if (c.stdin.queue.some((o) => o.seq > c.stdin.inlineThrough)) ctx.persist(stdinRowsDelete(c.uuid));
    c.stdin.queue = [];
    c.stdin.queuedBytes = 0;
    c.signals = [];
  }
  persistCommand(st, ctx, c);
  ctx.emit({ type: "trace", event: "state", detail: { uuid: c.uuid, state: L[to] ?? to, source, reason } });
}

export function readyConn(st: ServerState, clientId: string): ConnState | undefined {
  const client = st.clients.get(clientId);
  const conn = client && client.conn !== 0 ? st.conns.get(client.conn) : undefined;
  return conn && conn.phase === "ready" ? conn : undefined;
}
