// The agent's side of the event window (core/window/outbox.ts owns the
// window itself): entries are admitted into the window at the end of every
// step, each newly pinned event becomes sendable only once its persist is
// durable (the `pinned` deferred action below), pinned events go out on a
// reconciled session (and again, from the first unacknowledged one, on each
// new session: R-H6, R-D7), and a cumulative EventAck releases them (R-O6).

import type { EventAck } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { encodeEventEnvelope, safeNumber } from "../codec/frame-codec.js";
import { Code } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import { acknowledge, admit } from "../window/outbox.js";
import type { AgentEnv, AgentState, PinnedDeferred } from "./agent-types.js";
import type { AgentCtx, Fail } from "./io.js";

export function handleEventAck(st: AgentState, ctx: AgentCtx, a: EventAck, fail: Fail): void {
  const cb = st.outbox.commands.get(a.issueUuid);
  if (!cb) return; // Already retired: a late or repeated ack.
  const through = safeNumber(a.throughEventSeq);
  const records: PersistRecord[] = [];
  if (through === null || !acknowledge(st.outbox, cb, through, records)) {
    return fail(Code.SEQUENCE_VIOLATION, `EventAck through ${a.throughEventSeq} for ${a.issueUuid} beyond last assigned ${cb.nextSeq - 1}`, true);
  }
  ctx.persist(...records);
}

/** Admit entries into the window; each admitted event waits for its persist (`pinned`). */
export function admitEntries(st: AgentState, ctx: AgentCtx, env: AgentEnv): void {
  const records: PersistRecord[] = [];
  const admitted = admit(st.outbox, env.ports, records);
  ctx.persist(...records);
  for (const a of admitted) ctx.afterDurable({ kind: "pinned", uuid: a.uuid, seq: a.seq });
}

/** The pinned event's bytes are durable: it may be sent. */
export function runPinnedDeferred(st: AgentState, a: PinnedDeferred): void {
  const cb = st.outbox.commands.get(a.uuid);
  const p = cb?.pinned.find((x) => x.seq === a.seq);
  if (p) p.durable = true;
}

/** After a reconcile snapshot left: retransmit everything pinned, from the first unacknowledged event (R-H6, R-D7). */
export function resendPinned(st: AgentState): void {
  for (const cb of st.outbox.commands.values()) for (const p of cb.pinned) p.sentOn = 0;
}

/** Send every durable pinned event not yet sent on this session. */
export function sendPinned(st: AgentState, ctx: AgentCtx): void {
  const s = st.session;
  if (s.phase !== "established" || !st.reconciled || !s.fence) return;
  const gen = s.fence.generation;
  for (const cb of st.outbox.commands.values()) {
    for (const p of cb.pinned) {
      if (!p.durable || p.sentOn === gen) continue;
      p.sentOn = gen;
      ctx.emit({ type: "send", conn: s.conn, lane: "data", kind: "commandEvent", data: encodeEventEnvelope(s.fence, p.bytes) });
    }
  }
}
