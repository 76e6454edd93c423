// Signals (R-S4, R-S5): each takes a new durable revision; sent once per
// session until its result arrives. A signal to a command never dispatched
// ends it at the server.

import { create } from "@bufbuild/protobuf";
import { SignalCommandSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { Code, type CoreError, coreError } from "../errors.js";
import { MAX_PENDING_SIGNALS } from "../limits.js";
import type { ConnState, ControlRequest, ServerCommand, ServerState } from "./server-types.js";
import { persistCommand, remember, setState } from "./commands.js";
import { touch } from "./active.js";
import { missingMessage } from "./history.js";
import { type ServerCtx, closeConn, reply, replyError, send } from "./io.js";
import { openIncident } from "./incidents.js";

/** R-S4, R-S5: a signal takes a new revision (a retry of its request_id gets the same one). */
export function controlSignal(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "signal" }>): void {
  const c = st.commands.get(r.uuid);
  if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
  const res = signalCommand(st, ctx, c, r.requestId, r.signal, r.force === true);
  if ("code" in res) return replyError(ctx, r.requestId, res.code, res.message, r.uuid);
  return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: res.revision });
}

/**
 * One signal request for command `c` under `requestId`: its revision (the
 * one already given if the request id was seen), or why it is refused. Used
 * by SignalCommand and by a job's cancel (one request per child).
 */
export function signalCommand(
  st: ServerState,
  ctx: ServerCtx,
  c: ServerCommand,
  requestId: string,
  signal: SignalKind,
  force = false,
): { revision: number } | CoreError {
  const prior = c.requests[requestId];
  if (prior !== undefined) return { revision: prior };
  if (SignalKind[signal] === undefined || signal === SignalKind.UNSPECIFIED) return coreError(Code.VALIDATION, "unknown signal");
  if (isTerminal(c.state)) return coreError(Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`);
  if (c.signals.length >= MAX_PENDING_SIGNALS) return coreError(Code.CAPACITY, `${c.signals.length} signals already outstanding; retry once they are answered`);
  const ending = signal !== SignalKind.USER1 && signal !== SignalKind.USER2;
  // Refused before anything is remembered: a refusal must not evict the
  // remembered answer of an earlier request (R-S5).
  if (c.state === L.QUEUED && !ending) return coreError(Code.VALIDATION, "the command is not running yet");
  if (force && !ending) return coreError(Code.VALIDATION, "only an ending signal (cancel, terminate, kill) can be forced");
  c.revision++;
  remember(c, requestId, c.revision);
  if (force && c.state !== L.QUEUED) {
    forceEnd(st, ctx, c, `force-cancelled (${SignalKind[signal]?.toLowerCase()}) by an admin`);
    return { revision: c.revision };
  }
  if (c.state === L.QUEUED) {
    // Never reached an agent: the server ends it itself.
    setState(st, ctx, c, L.CANCELLED, "server", `${SignalKind[signal]?.toLowerCase()} before dispatch`);
    return { revision: c.revision };
  }
  c.signals.push({ revision: c.revision, signal, requestId, sentOn: 0 });
  touch(st, c);
  persistCommand(st, ctx, c);
  return { revision: c.revision };
}

/**
 * End a dispatched, accepted or running command at the server without waiting
 * for its agent (an admin's forced cancel; forgetting its client): `cancelled`,
 * ended by the server, with an incident, since the agent may have launched it
 * and its outcome there is unknown. Being terminal it is never dispatched
 * again (at most once); the agent's copy, if any, is terminated at its next
 * reconciliation (R-D11), so a live session holding it is closed now.
 */
export function forceEnd(st: ServerState, ctx: ServerCtx, c: ServerCommand, why: string): void {
  const was = L[c.state]?.toLowerCase();
  const reason = `${why} while ${was}; the server stopped waiting for the agent, whose outcome is unknown`;
  const conn = st.clients.get(c.clientId)?.conn ?? 0;
  const holds = conn !== 0 && st.conns.get(conn)?.generation === c.dispatch.dispatchedOn && c.dispatch.dispatchedOn !== 0;
  setState(st, ctx, c, L.CANCELLED, "server", reason);
  openIncident(st, ctx, c.clientId, c.uuid, "force_cancelled", reason);
  // The session's reconciliation is what stops a copy still running there.
  if (holds) closeConn(st, ctx, conn, Code.CONFLICT, `command ${c.uuid} was ended by the server; reconnect to reconcile`, false);
}

export function pumpSignals(ctx: ServerCtx, conn: ConnState, c: ServerCommand): void {
  for (const s of c.signals) {
    if (s.sentOn === conn.generation) continue;
    // A revision not yet durable could be handed out again after a crash, and the
    // agent would discard the second request as a duplicate.
    if (s.revision > c.committed.revision) continue;
    send(ctx, conn, {
      case: "signalCommand",
      value: create(SignalCommandSchema, { issueUuid: c.uuid, commandRevision: BigInt(s.revision), signal: s.signal }),
    });
    s.sentOn = conn.generation;
  }
}
