// The agent's outputs, shared by every concern module: send a payload on the
// current session, send an error, trace, and append an event (a lifecycle
// transition or another metadata event) to a command's outbox. A leaf: it
// imports none of its sibling modules (only the agent's types), so every concern can use it without an import cycle.

import { create } from "@bufbuild/protobuf";
import { type CommandLifecycle, ControlErrorSchema, LifecycleTransitionSchema } from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert, Code, codeName } from "../errors.js";
import { encodeEnvelope, type Payload } from "../codec/frame-codec.js";
import { laneOf } from "../protocol/envelopes.js";
import { MAX_REASON_CHARS } from "../limits.js";
import type { PersistRecord } from "../effects.js";
import type { StepContext } from "../step-context.js";
import { appendMeta, type MetaEvent } from "../window/outbox.js";
import type { AgentCommand, AgentDeferred, AgentEffect, AgentState } from "./agent-types.js";

export type AgentCtx = StepContext<AgentEffect, AgentDeferred>;

/** How a frame handler answers a bad frame: an AgentError, closing the session or not. */
export type Fail = (code: Code, message: string, close: boolean) => void;

export function trace(
  event: string,
  detail: Record<string, string | number | boolean>,
): { type: "trace"; event: string; detail: Record<string, string | number | boolean> } {
  return { type: "trace", event, detail };
}

/** Send a payload on the current connection with the current fence, on its lane (ENVELOPES). */
export function send(st: AgentState, ctx: AgentCtx, payload: Payload): void {
  const s = st.session;
  if (s.conn === 0 || payload.case === undefined) return;
  ctx.emit({ type: "send", conn: s.conn, lane: laneOf(payload.case), data: encodeEnvelope(s.fence, payload), kind: payload.case });
}

export function sendError(st: AgentState, ctx: AgentCtx, code: Code, message: string, close: boolean): void {
  if (st.session.conn === 0) return;
  send(st, ctx, { case: "error", value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code, message }), closeSession: close } });
}

/** The live command `uuid`; an unknown one (not even a tombstone) is answered CODE_NOT_FOUND. */
export function liveCommand(st: AgentState, uuid: string, fail: Fail): AgentCommand | null {
  const c = st.commands.get(uuid);
  if (c) return c;
  if (!st.tombstones.has(uuid)) fail(Code.NOT_FOUND, `unknown command ${uuid}`, false);
  return null;
}

/** Append a lifecycle transition to the command's outbox (asserts the outbox exists). */
export function appendLifecycle(
  st: AgentState,
  ctx: AgentCtx,
  c: AgentCommand,
  state: CommandLifecycle,
  extra: { exitCode?: number; signalName?: string; reason?: string; code?: Code },
  revision = c.revision,
): void {
  const cb = st.outbox.commands.get(c.uuid);
  assert(cb !== undefined, `no outbox for ${c.uuid}`);
  const reason = (extra.reason ?? "").slice(0, MAX_REASON_CHARS);
  const value = create(LifecycleTransitionSchema, {
    state,
    signalName: (extra.signalName ?? "").slice(0, 64),
    reason,
    ...(extra.exitCode !== undefined ? { exitCode: extra.exitCode } : {}),
    ...(extra.code !== undefined
      ? { error: create(ControlErrorSchema, { code: extra.code, message: reason || codeName(extra.code), issueUuid: c.uuid }) }
      : {}),
  });
  const records: PersistRecord[] = [];
  appendMeta(st.outbox, cb, { case: "lifecycle", value }, revision, ctx.wall, records);
  ctx.persist(...records);
}

/** Append a metadata event to the command's outbox, unless the outbox is closed (or gone). */
export function appendEvent(st: AgentState, ctx: AgentCtx, c: AgentCommand, ev: MetaEvent, revision = c.revision): void {
  const cb = st.outbox.commands.get(c.uuid);
  if (!cb || cb.closed) return;
  const records: PersistRecord[] = [];
  appendMeta(st.outbox, cb, ev, revision, ctx.wall, records);
  ctx.persist(...records);
}
