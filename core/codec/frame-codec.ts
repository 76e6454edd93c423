// Frame codec (R-T1, R-T2, R-T5): one binary WebSocket message <-> one
// AgentEnvelope. Pure: sizes are checked before protobuf decoding allocates
// anything, and every refusal is a CoreError value.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AgentEnvelopeSchema, type AgentEnvelope } from "../../protos/gen/rvbox/v1/agent_pb.js";
import { Code, coreError, type CoreError } from "../errors.js";
import { MAX_ENVELOPE_BYTES } from "../limits.js";
import { decodeHotEnvelope, encodeEventAckEnvelope } from "./hot-codec.js";

export type PayloadCase = NonNullable<AgentEnvelope["payload"]["case"]>;
export type Payload = AgentEnvelope["payload"];

export type DecodeResult = { ok: true; envelope: AgentEnvelope & { payload: { case: PayloadCase } } } | { ok: false; error: CoreError };

/**
 * Decode one frame. `binary` is false for a WebSocket text frame, which is a
 * protocol error (R-T1).
 */
export function decodeFrame(data: Uint8Array, binary = true): DecodeResult {
  if (!binary) return { ok: false, error: coreError(Code.PROTOCOL_ERROR, "text frames are not part of the protocol") };
  if (data.length > MAX_ENVELOPE_BYTES) {
    return {
      ok: false,
      error: coreError(Code.PAYLOAD_TOO_LARGE, `envelope of ${data.length} bytes exceeds ${MAX_ENVELOPE_BYTES}`),
    };
  }
  // Output events and acks, in canonical form: read by hand (hot-codec.ts).
  const hot = decodeHotEnvelope(data);
  if (hot !== null) return { ok: true, envelope: hot as AgentEnvelope & { payload: { case: PayloadCase } } };
  let envelope: AgentEnvelope;
  try {
    envelope = fromBinary(AgentEnvelopeSchema, data);
  } catch (e) {
    return { ok: false, error: coreError(Code.PROTOCOL_ERROR, `malformed protobuf: ${(e as Error).message}`) };
  }
  if (envelope.payload.case === undefined) {
    // Either no payload at all, or a payload field this version does not
    // know: both are PROTOCOL_ERROR (R-T5), never silently ignored.
    return { ok: false, error: coreError(Code.PROTOCOL_ERROR, "envelope carries no recognized payload") };
  }
  return { ok: true, envelope: envelope as AgentEnvelope & { payload: { case: PayloadCase } } };
}

export interface Fence {
  sessionId: string;
  generation: number;
}

/** Encode an envelope with the session fence and one payload. */
export function encodeEnvelope(fence: Fence | null, payload: Payload): Uint8Array {
  if (payload.case === "eventAck" && payload.value.$unknown === undefined) {
    const hot = encodeEventAckEnvelope(fence, payload.value.issueUuid, payload.value.throughEventSeq);
    if (hot !== null) return hot;
  }
  const env = create(AgentEnvelopeSchema, {
    sessionId: fence?.sessionId ?? "",
    sessionGeneration: BigInt(fence?.generation ?? 0),
    payload,
  });
  return toBinary(AgentEnvelopeSchema, env);
}

/**
 * The fence fields of an envelope (session_id = 1, session_generation = 2),
 * encoded as protobuf-es encodes them: in field order, each only when not
 * its default. Written directly for an ASCII session id of under 128 bytes
 * (every id a server issues); anything else goes through toBinary.
 */
export function envelopeHead(fence: Fence): Uint8Array {
  const id = fence.sessionId;
  let gen = fence.generation;
  let ascii = id.length < 128;
  for (let i = 0; ascii && i < id.length; i++) if (id.charCodeAt(i) > 0x7f) ascii = false;
  if (!ascii || !Number.isSafeInteger(gen) || gen < 0) {
    return toBinary(AgentEnvelopeSchema, create(AgentEnvelopeSchema, { sessionId: id, sessionGeneration: BigInt(gen) }));
  }
  const out: number[] = [];
  if (id.length > 0) {
    out.push((1 << 3) | 2, id.length);
    for (let i = 0; i < id.length; i++) out.push(id.charCodeAt(i));
  }
  if (gen > 0) {
    out.push((2 << 3) | 0);
    while (gen > 0x7f) {
      out.push((gen % 128) | 0x80);
      gen = Math.floor(gen / 128);
    }
    out.push(gen);
  }
  return Uint8Array.from(out);
}

/** A uint64 from the wire as a safe JS number, or null if it cannot be one. */
export function safeNumber(v: bigint): number | null {
  return v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : null;
}

/**
 * Encode an envelope carrying an already-encoded CommandEvent (field 7)
 * without decoding it: the pinned bytes go on the wire exactly as stored
 * (R-O2), and no work is spent re-encoding them on every resend.
 */
export function encodeEventEnvelope(fence: Fence, commandEvent: Uint8Array): Uint8Array {
  const head = envelopeHead(fence);
  const len: number[] = [];
  let n = commandEvent.length;
  while (n > 0x7f) {
    len.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  len.push(n);
  const out = new Uint8Array(head.length + 1 + len.length + commandEvent.length);
  out.set(head, 0);
  out[head.length] = (7 << 3) | 2; // field 7 (command_event), length-delimited
  out.set(len, head.length + 1);
  out.set(commandEvent, head.length + 1 + len.length);
  return out;
}

/**
 * The bytes of top-level length-delimited field `field` of an encoded
 * message, exactly as received, when it occurs exactly once and the message
 * parses as a sequence of well-formed fields; otherwise null (the caller
 * re-encodes the decoded message instead). Protobuf merges repeated
 * occurrences of a message field, so only a single occurrence is the same
 * message as the bytes it was decoded from.
 */
export function singleFieldBytes(b: Uint8Array, field: number): Uint8Array | null {
  let pos = 0;
  let found: Uint8Array | null = null;
  const n = b.length;
  while (pos < n) {
    // Tag and lengths: varints of at most 5 bytes (field numbers and frame sizes fit in 32 bits).
    let tag = 0;
    let shift = 0;
    for (;;) {
      if (pos >= n || shift > 28) return null;
      const x = b[pos++]!;
      tag += (x & 0x7f) * 2 ** shift;
      shift += 7;
      if (!(x & 0x80)) break;
    }
    const wt = tag % 8;
    const f = Math.floor(tag / 8);
    if (wt === 0) {
      let i = 0;
      for (;;) {
        if (pos >= n || i++ >= 10) return null;
        if (!(b[pos++]! & 0x80)) break;
      }
    } else if (wt === 1) pos += 8;
    else if (wt === 5) pos += 4;
    else if (wt === 2) {
      let len = 0;
      shift = 0;
      for (;;) {
        if (pos >= n || shift > 28) return null;
        const x = b[pos++]!;
        len += (x & 0x7f) * 2 ** shift;
        shift += 7;
        if (!(x & 0x80)) break;
      }
      if (pos + len > n) return null;
      if (f === field) {
        if (found !== null) return null;
        found = b.subarray(pos, pos + len);
      }
      pos += len;
    } else return null;
  }
  return pos === n ? found : null;
}
