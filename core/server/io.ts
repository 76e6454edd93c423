// The server's outputs: envelopes to an agent (send, sendError, sendAck),
// closing a connection, and replies to operators. A leaf: it imports no other
// module of core/server, so every concern module can use it.

import { create } from "@bufbuild/protobuf";
import { AgentErrorSchema } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { ControlErrorSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { type Payload, type PayloadCase, encodeEnvelope } from "../codec/frame-codec.js";
import { type Code, codeName, coreError } from "../errors.js";
import type { StepContext } from "../step-context.js";
import type { ConnState, ControlResult, ServerDeferred, ServerEffect, ServerState } from "./server-types.js";

export type ServerCtx = StepContext<ServerEffect, ServerDeferred>;

export type Fail = (code: Code, message: string, close: boolean, uuid?: string) => void;

export function send(ctx: ServerCtx, conn: ConnState, payload: Payload, lane: "priority" | "data" = "data"): void {
  if (payload.case === undefined) return;
  sendEncoded(ctx, conn, payload.case, encodeFor(conn, payload), lane);
}

/** The envelope `send` would emit to `conn` (to check its size first). */
export function encodeFor(conn: ConnState, payload: Payload): Uint8Array {
  return encodeEnvelope(conn.sessionId ? { sessionId: conn.sessionId, generation: conn.generation } : null, payload);
}

/** Send an envelope made by `encodeFor` for the same connection. */
export function sendEncoded(ctx: ServerCtx, conn: ConnState, kind: PayloadCase, data: Uint8Array, lane: "priority" | "data" = "data"): void {
  ctx.emit({ type: "send", conn: conn.conn, lane, kind, data });
}

export function sendError(ctx: ServerCtx, conn: ConnState, code: Code, message: string, close: boolean, uuid?: string): void {
  send(
    ctx,
    conn,
    {
      case: "error",
      value: create(AgentErrorSchema, { error: create(ControlErrorSchema, { code, message, issueUuid: uuid ?? "" }), closeSession: close }),
    },
    "priority",
  );
}

export function sendAck(ctx: ServerCtx, conn: ConnState, uuid: string, through: number): void {
  send(ctx, conn, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: uuid, throughEventSeq: BigInt(through) } });
}

/** Close a connection (optionally with a structured error first). Nothing of it is acknowledged afterwards. */
export function closeConn(st: ServerState, ctx: ServerCtx, connId: number, code: Code, message: string, withError: boolean): void {
  const conn = st.conns.get(connId);
  if (!conn) return;
  if (withError) sendError(ctx, conn, code, message, true);
  ctx.emit({ type: "close", conn: connId, reason: `${codeName(code)}: ${message}` });
  ctx.emit({ type: "trace", event: "conn_closed", detail: { conn: connId, client: conn.clientId, code: codeName(code), message } });
  dropConn(st, connId);
}

export function dropConn(st: ServerState, connId: number): void {
  const conn = st.conns.get(connId);
  if (!conn) return;
  st.conns.delete(connId);
  const client = conn.clientId ? st.clients.get(conn.clientId) : undefined;
  if (client && client.conn === connId) client.conn = 0;
}

export function reply(ctx: ServerCtx, requestId: string, result: ControlResult): void {
  ctx.afterDurable({ kind: "reply", requestId, result });
}

export function replyError(ctx: ServerCtx, requestId: string, code: Code, message: string, uuid?: string): void {
  ctx.emit({ type: "reply", requestId, result: { ok: false, error: coreError(code, message, uuid) } });
}

/** A reply parked by `reply` leaves once the persist it answers for is durable. */
export function releaseReply(ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "reply" }>): void {
  ctx.emit({ type: "reply", requestId: a.requestId, result: a.result });
}
