// Signals (R-S4, R-S5): each takes a new durable revision; sent once per
// session until its result arrives. A signal to a command never dispatched
// ends it at the server.

import { create } from "@bufbuild/protobuf";
import { SignalCommandSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, SignalKind } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { Code } from "../errors.js";
import { MAX_PENDING_SIGNALS } from "../limits.js";
import type { ConnState, ControlRequest, ServerCommand, ServerState } from "./server-types.js";
import { persistCommand, remember, setState } from "./commands.js";
import { missingMessage } from "./history.js";
import { type ServerCtx, reply, replyError, send } from "./io.js";

/** R-S4, R-S5: a signal takes a new revision (a retry of its request_id gets the same one). */
export function controlSignal(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "signal" }>): void {
  const c = st.commands.get(r.uuid);
  if (!c) return replyError(ctx, r.requestId, Code.NOT_FOUND, missingMessage(st, r.uuid), r.uuid);
  const prior = c.requests[r.requestId];
  if (prior !== undefined) return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: prior });
  if (SignalKind[r.signal] === undefined || r.signal === SignalKind.UNSPECIFIED) return replyError(ctx, r.requestId, Code.VALIDATION, "unknown signal", r.uuid);
  if (isTerminal(c.state)) return replyError(ctx, r.requestId, Code.VALIDATION, `command is already ${L[c.state]?.toLowerCase()}`, r.uuid);
  if (c.signals.length >= MAX_PENDING_SIGNALS)
    return replyError(ctx, r.requestId, Code.CAPACITY, `${c.signals.length} signals already outstanding; retry once they are answered`, r.uuid);
  const ending = r.signal !== SignalKind.USER1 && r.signal !== SignalKind.USER2;
  // Refused before anything is remembered: a refusal must not evict the
  // remembered answer of an earlier request (R-S5).
  if (c.state === L.QUEUED && !ending) return replyError(ctx, r.requestId, Code.VALIDATION, "the command is not running yet", r.uuid);
  c.revision++;
  remember(c, r.requestId, c.revision);
  if (c.state === L.QUEUED) {
    // Never reached an agent: the server ends it itself.
    setState(st, ctx, c, L.CANCELLED, "server", `${SignalKind[r.signal]?.toLowerCase()} before dispatch`);
    return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: c.revision });
  }
  c.signals.push({ revision: c.revision, signal: r.signal, requestId: r.requestId, sentOn: 0 });
  persistCommand(st, ctx, c);
  return reply(ctx, r.requestId, { ok: true, uuid: c.uuid, revision: c.revision });
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
