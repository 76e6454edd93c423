// Operator requests: one router to the module that answers each.

import { assert, unreachable } from "../errors.js";
import type { AuditCall, ControlRequest, ControlResult, ServerEnv, ServerState } from "./server-types.js";
import { appendAudit, appendRefusal, auditResult, requestClients } from "./audit.js";
import { authorize, dismissClaim, forgetClient, revokeAuthorization, setDraining, setLabels } from "./clients.js";
import { ackIncident } from "./incidents.js";
import { type ServerCtx, reply } from "./io.js";
import { cancelJob, submitJob } from "./jobs.js";
import { controlSignal } from "./signals.js";
import { controlStdin } from "./stdin.js";
import { submit } from "./submit.js";

/**
 * One operator request. With `audit` (a call the control service made for an
 * identified operator) its reply is held, an audit entry with the result is
 * appended to this step's persist batch, and the reply leaves once that batch
 * is durable (an error reply too, which unaudited would leave at once).
 * With `callId` the reply carries it instead of the request id: request ids
 * are the operators' (idempotency, R-S5), two calls in flight may share one,
 * and each caller must get its own reply.
 */
export function handleControl(st: ServerState, ctx: ServerCtx, r: ControlRequest, env: ServerEnv, audit?: AuditCall, callId?: string): void {
  const out = callId === undefined ? ctx : replyingAs(ctx, r.requestId, callId);
  if (!audit) return route(st, out, r, env);
  // Named before the request runs: forget_client removes the record it names.
  // A job is named after it: the clients its selector resolved to exist only
  // once it was created.
  const before = r.op === "submit_job" ? null : requestClients(st, r);
  let result: ControlResult | null = null;
  const tap = Object.create(ctx) as ServerCtx;
  tap.emit = (e) => {
    if (e.type === "reply" && e.requestId === r.requestId) result = e.result;
    else ctx.emit(e);
  };
  tap.afterDurable = (a) => {
    if (a.kind === "reply" && a.requestId === r.requestId) result = a.result;
    else ctx.afterDurable(a);
  };
  route(st, tap, r, env);
  const answered = result as ControlResult | null;
  assert(answered !== null, `control request ${r.op} was not answered`);
  if (r.op === "audit_refusal") appendRefusal(st, ctx, audit, r.clients, r.code, r.message);
  else {
    const res = auditResult(answered);
    appendAudit(st, ctx, audit, before ?? requestClients(st, r), res.result, res.message);
  }
  out.afterDurable({ kind: "reply", requestId: r.requestId, result: answered });
}

/** `ctx` with the reply to `requestId` addressed to `callId`. */
function replyingAs(ctx: ServerCtx, requestId: string, callId: string): ServerCtx {
  const out = Object.create(ctx) as ServerCtx;
  out.emit = (e) => ctx.emit(e.type === "reply" && e.requestId === requestId ? { ...e, requestId: callId } : e);
  out.afterDurable = (a) => ctx.afterDurable(a.kind === "reply" && a.requestId === requestId ? { ...a, requestId: callId } : a);
  return out;
}

/** Route one operator request to the module that answers it. */
function route(st: ServerState, ctx: ServerCtx, r: ControlRequest, env: ServerEnv): void {
  switch (r.op) {
    case "submit":
      return submit(st, ctx, r, env);
    case "stdin":
    case "close_stdin":
      return controlStdin(st, ctx, r);
    case "signal":
      return controlSignal(st, ctx, r);
    case "authorize":
      return authorize(st, ctx, r);
    case "revoke_authorization":
      return revokeAuthorization(st, ctx, r);
    case "dismiss_claim":
      return dismissClaim(st, ctx, r);
    case "ack_incident":
      return ackIncident(st, ctx, r);
    case "forget_client":
      return forgetClient(st, ctx, r.requestId, r.clientId);
    case "set_draining":
      return setDraining(st, ctx, r);
    case "set_labels":
      return setLabels(st, ctx, r);
    case "audit_refusal":
      // Only its audit entry (handleControl appends it); unaudited, nothing to record.
      return reply(ctx, r.requestId, { ok: true });
    case "submit_job":
      return submitJob(st, ctx, r, env);
    case "cancel_job":
      return cancelJob(st, ctx, r);
    default:
      return unreachable(r, "control request");
  }
}
