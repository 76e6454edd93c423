// Event ingest (R-O2..R-O5, R-W7).
//
// event_seq must be exactly receivedThrough + 1; a lower one is a resend and
// must match the digest of what was stored (R-O2); a higher one is a gap
// (CODE_SEQUENCE_VIOLATION, close). Output offsets must continue each stream
// exactly, either by bytes or by a truncation marker's ranges, so every byte
// is accounted for. A resend with other bytes or an offset that does not
// continue contradicts stored history: the session closes with
// CODE_SEQUENCE_VIOLATION and the command ends interrupted ("history
// diverged", with an incident), else the pinned resend would repeat forever.
// The event is persisted and the cumulative EventAck leaves only once that
// persist is durable (R-O3: `releaseAck`, `sendAcks`). When ingress bytes awaiting durability exceed
// the high watermark the connection is closed without acknowledgement (R-W7).

import { toBinary } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { type CommandEvent, CommandEventSchema, CommandLifecycle as L, OutputStream } from "../../protos/gen/rvbox/v1/common_pb.js";
import { digest53 } from "../bytes.js";
import { safeNumber } from "../codec/frame-codec.js";
import { canTransition, isTerminal } from "../dispatch/lifecycle.js";
import { Code, unreachable } from "../errors.js";
import { MAX_CHUNK_BYTES, SCRIPT_CHUNK_BYTES, SERVER_RECENT_DIGESTS, SERVER_ROW_EVENTS_PER_COMMAND } from "../limits.js";
import type { StreamName } from "../window/outbox.js";
import type { ConnState, ServerCommand, ServerDeferred, ServerEnv, ServerState } from "./server-types.js";
import { type EventRow, eventRecord, scriptDelete } from "./store.js";
import { persistCommand, setState } from "./commands.js";
import { prunedFor } from "./history.js";
import { openIncident } from "./incidents.js";
import { type Fail, type ServerCtx, closeConn, sendAck } from "./io.js";
import { addToSegments } from "./retention.js";
import { releaseStdin } from "./stdin.js";

/** An event contradicts stored history: interrupt the command with an incident, then close (see handleCommandEvent). */
function diverged(st: ServerState, ctx: ServerCtx, c: ServerCommand, fail: Fail, message: string): void {
  setState(st, ctx, c, L.INTERRUPTED, "server", `history diverged: ${message}`);
  openIncident(
    st,
    ctx,
    c.clientId,
    c.uuid,
    "history_diverged",
    `${message}: the agent's events contradict those stored for this command; two copies of this instance (a cloned host?) ran it, or the agent resent an event with other bytes (R-O2). Stored output is kept as it is; the command was interrupted`,
  );
  fail(Code.SEQUENCE_VIOLATION, message, true);
}

const streamName = (s: OutputStream): StreamName | null => (s === OutputStream.STDOUT ? "stdout" : s === OutputStream.STDERR ? "stderr" : null);

export function handleCommandEvent(
  st: ServerState,
  ctx: ServerCtx,
  conn: ConnState,
  ev: CommandEvent,
  frameBytes: number,
  env: ServerEnv,
  fail: Fail,
  /** The encoded CommandEvent exactly as received, when the frame holds it once (else null: re-encoded). */
  evBytes: Uint8Array | null = null,
): void {
  const c = st.commands.get(ev.issueUuid);
  if (!c && prunedFor(st, ev.issueUuid, conn.clientId)) {
    // Settled history: its events were stored before it was pruned. A resend
    // (or a stale copy's event) is ignored, as for any terminal command; the
    // ReconcileResult of the next session tells the agent to drop its copy.
    ctx.emit({ type: "trace", event: "event_ignored", detail: { uuid: ev.issueUuid, seq: String(ev.eventSeq), why: "pruned from history" } });
    return;
  }
  if (!c || c.clientId !== conn.clientId) return fail(Code.NOT_FOUND, `event for unknown command ${ev.issueUuid}`, false, ev.issueUuid);
  const seq = safeNumber(ev.eventSeq);
  if (seq === null || seq === 0) return fail(Code.SEQUENCE_VIOLATION, `event_seq ${ev.eventSeq} impossible`, true);
  // Ended by the server itself (cancelled before dispatch, expired, interrupted by
  // reconciliation): the agent's copy is stale history. Its events are ignored
  // whatever their sequence; the ReconcileResult tells the agent to drop it.
  // (Checking sequences first would close every session on a "gap" and the
  // result that ends the copy would never arrive: a livelock.)
  if (isTerminal(c.state) && c.exit.terminalSource === "server") return;
  // An event that contradicts history already stored (a resend with other
  // bytes, output that does not continue its stream) cannot be repaired: R-O2
  // pins every resend, so the agent would send the same event on every session
  // and each would be closed, a livelock that also starves the client's other
  // commands. Two copies of one instance (a cloned host) each running the
  // command produce exactly this; so does an agent breaking R-O2. The stored
  // history stays as it is, the command ends INTERRUPTED by the server with an
  // incident (as reconciliation does for a copy that is behind, "diverged"),
  // and the session still closes with the violation. From then on the copy's
  // events are ignored (above) and the next ReconcileResult terminates it.
  // (`diverged()`, at the top of this file; the command is never terminal
  // where it is called: the check above returned.)
  // The digest of the event's bytes as received: every retry must resend
  // identical bytes (R-O2). For a canonical encoder (every RVBox agent:
  // protobuf-es, whose sub-message bytes inside an envelope are those of the
  // message alone) this is the digest of the re-encoded event, without
  // encoding it again.
  const digest = digest53(evBytes ?? toBinary(CommandEventSchema, ev));
  if (isTerminal(c.state)) {
    // History is settled. An identical resend (its ack was lost) is acknowledged
    // again; anything else comes from a copy that diverged (e.g. a cloned
    // instance) and is ignored: closing here would keep the ReconcileResult that
    // discards that copy from ever arriving.
    // Acknowledge only through the resent seq: storedThrough may include events
    // from another copy of this instance that this agent never assigned.
    if (seq <= c.ingest.storedThrough && c.ingest.digests[seq] === digest) sendAck(ctx, conn, c.uuid, seq);
    else ctx.emit({ type: "trace", event: "event_ignored", detail: { uuid: c.uuid, seq, why: "command is terminal" } });
    return;
  }
  if (seq <= c.ingest.receivedThrough) {
    const known = c.ingest.digests[seq];
    if (known !== undefined && known !== digest) return diverged(st, ctx, c, fail, `event ${seq} of ${c.uuid} resent with different bytes`);
    if (seq <= c.ingest.storedThrough) sendAck(ctx, conn, c.uuid, c.ingest.storedThrough);
    return;
  }
  if (seq !== c.ingest.receivedThrough + 1) return fail(Code.SEQUENCE_VIOLATION, `event ${seq} of ${c.uuid} after ${c.ingest.receivedThrough}: gap`, true);
  if (ev.event.case !== "output" && c.ingest.rowEvents >= rowEventBound(c))
    return fail(Code.CAPACITY, `${c.uuid} already has ${c.ingest.rowEvents} stored non-output events, the most it may have`, true);
  if (c.state === L.QUEUED || c.state === L.DISPATCHED) {
    // The agent can only emit events for a command it accepted: the
    // CommandAccepted must have been lost. Adopt it.
    setState(st, ctx, c, L.ACCEPTED, "agent");
  }
  if (conn.ingressPending + frameBytes > st.config.limits.ingressHigh) {
    // R-W7: never acknowledge or discard a sequenced event; close, the agent resends.
    closeConn(st, ctx, conn.conn, Code.CAPACITY, "server ingress high watermark", true);
    return;
  }
  const rev = safeNumber(ev.commandRevision) ?? 0;
  const time = ev.time ? timestampMs(ev.time) : ctx.wall;
  const base = { seq, revision: rev, time, digest };
  let record: EventRow;
  const e = ev.event;
  switch (e.case) {
    case "output": {
      const stream = streamName(e.value.stream);
      if (!stream) return fail(Code.PROTOCOL_ERROR, "output chunk without a stream", true);
      const size = e.value.originalSize;
      if (size > MAX_CHUNK_BYTES) return fail(Code.PAYLOAD_TOO_LARGE, `output chunk declares ${size} bytes`, true);
      if (e.value.zstdData.length > MAX_CHUNK_BYTES + 1024) return fail(Code.PAYLOAD_TOO_LARGE, "compressed chunk larger than any 64 KiB input needs", true);
      const offset = safeNumber(e.value.streamOffset);
      if (offset !== c.ingest.streamNext[stream])
        return diverged(st, ctx, c, fail, `${stream} offset ${e.value.streamOffset}, expected ${c.ingest.streamNext[stream]}`);
      const chk = env.ports.checkCompressed(e.value.zstdData, size);
      if (!chk.ok) return fail(chk.code, chk.message, true);
      c.ingest.streamNext[stream] += size;
      record = { ...base, kind: "output", stream, offset, originalSize: size, zstd: e.value.zstdData };
      addToSegments(st, ctx, c, seq, e.value.zstdData.length, { stream, offset, length: size });
      break;
    }
    case "truncation": {
      if (e.value.removedEvents) return fail(Code.PROTOCOL_ERROR, "agent truncation markers carry no event range", true);
      const ranges: Array<{ stream: StreamName; offset: number; length: number }> = [];
      const next = { ...c.ingest.streamNext };
      for (const r of e.value.removedBytes) {
        const stream = streamName(r.stream);
        const offset = safeNumber(r.offset);
        const length = safeNumber(r.length);
        if (!stream || offset === null || length === null || length === 0) return fail(Code.PROTOCOL_ERROR, "bad truncation range", true);
        if (offset !== next[stream]) return diverged(st, ctx, c, fail, `truncation of ${stream} at ${offset}, expected ${next[stream]}`);
        next[stream] += length;
        ranges.push({ stream, offset, length });
      }
      c.ingest.streamNext = next;
      record = { ...base, kind: "truncation", cause: e.value.cause, ranges };
      break;
    }
    case "lifecycle": {
      const to = e.value.state;
      if (to !== c.state && !canTransition(c.state, to)) return fail(Code.SEQUENCE_VIOLATION, `lifecycle ${L[c.state]} -> ${L[to] ?? to} is not allowed`, true);
      if (to === L.ACCEPTED || to === L.QUEUED || to === L.DISPATCHED) return fail(Code.PROTOCOL_ERROR, `agent lifecycle event ${L[to]}`, true);
      if (e.value.exitCode !== undefined) c.exit.exitCode = e.value.exitCode;
      c.exit.signalName = e.value.signalName;
      record = {
        ...base,
        kind: "lifecycle",
        state: to,
        exitCode: e.value.exitCode ?? null,
        signalName: e.value.signalName,
        reason: e.value.reason,
        error: e.value.error ? { code: e.value.error.code, message: e.value.error.message } : null,
      };
      if (to !== c.state) setState(st, ctx, c, to, "agent", e.value.reason, time);
      if (isTerminal(to)) c.signals = [];
      break;
    }
    case "stdinAck": {
      const ws = safeNumber(e.value.writeSeq);
      if (ws === null || ws >= c.stdin.nextSeq) return fail(Code.SEQUENCE_VIOLATION, `stdin ack for write ${e.value.writeSeq} never sent`, true);
      releaseStdin(ctx, c, ws);
      record = { ...base, kind: "stdin_ack", writeSeq: ws, closed: e.value.closed, failure: e.value.failure };
      break;
    }
    case "signalResult":
      c.signals = c.signals.filter((s) => s.revision > rev);
      record = { ...base, kind: "signal_result", signal: e.value.signal, delivered: e.value.delivered, detail: e.value.detail };
      break;
    case "scriptUpload": {
      const got = safeNumber(e.value.receivedBytes);
      const size = c.spec.program.case === "script" ? Number(c.spec.program.value.sizeBytes) : -1;
      if (got === null || got > size || got < c.script.acked) return fail(Code.SEQUENCE_VIOLATION, `script progress ${e.value.receivedBytes} impossible`, true);
      c.script.acked = got;
      if (e.value.complete) {
        c.script.committed = true;
        c.script.bytes = null;
        ctx.persist(scriptDelete(c.uuid));
      }
      record = { ...base, kind: "script_upload", receivedBytes: got, complete: e.value.complete };
      break;
    }
    case "incomplete":
      record = { ...base, kind: "incomplete", streams: e.value.streams.map((s) => streamName(s)), reason: e.value.reason };
      break;
    case undefined:
      return fail(Code.PROTOCOL_ERROR, "command event without a recognized payload", true);
    default:
      return unreachable(e, "command event payload");
  }
  c.ingest.receivedThrough = seq;
  if (e.case !== "output") c.ingest.rowEvents++;
  c.ingest.digests[seq] = digest;
  delete c.ingest.digests[seq - SERVER_RECENT_DIGESTS];
  conn.ingressPending += frameBytes;
  ctx.persist(eventRecord(c.uuid, record));
  persistCommand(st, ctx, c);
  ctx.afterDurable({ kind: "ack", conn: conn.conn, uuid: c.uuid, through: seq, bytes: frameBytes });
}

/** The most stored non-output events `c` may have (SERVER_ROW_EVENTS_PER_COMMAND). */
export function rowEventBound(c: ServerCommand): number {
  const script = c.spec.program.case === "script" ? Math.ceil(Number(c.spec.program.value.sizeBytes) / SCRIPT_CHUNK_BYTES) : 0;
  return SERVER_ROW_EVENTS_PER_COMMAND + (c.stdin.nextSeq - 1) + c.revision + script;
}

/** Acknowledgements released in one step, one per (connection, command): the highest seq. */
export type AckBatch = Map<string, { conn: number; uuid: string; through: number }>;

/** The after-durable half of handleCommandEvent: the event is stored; its ack is sent once per batch (sendAcks). */
export function releaseAck(st: ServerState, acks: AckBatch, a: Extract<ServerDeferred, { kind: "ack" }>): void {
  const conn = st.conns.get(a.conn);
  if (conn) conn.ingressPending -= a.bytes;
  const cmd = st.commands.get(a.uuid);
  if (cmd && a.through > cmd.ingest.storedThrough) cmd.ingest.storedThrough = a.through;
  const key = `${a.conn}/${a.uuid}`;
  const prev = acks.get(key);
  if (!prev || prev.through < a.through) acks.set(key, { conn: a.conn, uuid: a.uuid, through: a.through });
}

/** R-O3: one cumulative EventAck per (connection, command) released, on a session that may still carry it. */
export function sendAcks(st: ServerState, ctx: ServerCtx, acks: AckBatch): void {
  for (const a of acks.values()) {
    const conn = st.conns.get(a.conn);
    const cmd = st.commands.get(a.uuid);
    if (!conn || !cmd || (conn.phase !== "ready" && conn.phase !== "reconciling")) continue;
    sendAck(ctx, conn, a.uuid, cmd.ingest.storedThrough);
  }
}
