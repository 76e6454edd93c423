// Hand-written protobuf for the frames every command's output rides on:
// an AgentEnvelope carrying a CommandEvent with an OutputChunk (agent ->
// server, one per chunk) or an EventAck (server -> agent, one per
// acknowledgement), and the CommandEvent bytes the agent pins (R-O2).
//
// Theory of operation
// -------------------
// protobuf-es reads and writes messages by walking their descriptors, which
// costs several times what the few fields of these messages need. Here each
// function handles only the canonical, unambiguous case and answers `null`
// for everything else, and the caller then goes through protobuf-es as
// before. So the result is always what protobuf-es gives:
//
//   decode: every field known and of its declared wire type, each at most
//     once at every level, at most one payload, strings ASCII, integers of
//     safe integers (64-bit fields) or in range (32-bit fields). Anything
//     else (unknown fields, repeats that protobuf would merge, non-ASCII,
//     large or negative numbers, truncation) is `null`: protobuf-es decides,
//     including every error. Objects are built with the keys protobuf-es
//     gives them, in its order; bytes fields are views into the frame, as
//     protobuf-es makes them.
//   encode: fields in field-number order, each only when not its default,
//     as protobuf-es writes them; `null` for non-ASCII strings and numbers
//     outside non-negative safe integers.
//
// test/core/codec/hot-codec.test.ts checks both against protobuf-es on generated
// messages, mutated frames and random bytes.

import type { AgentEnvelope, EventAck } from "../../protos/gen/rvbox/v1/agent_pb.js";
import type { CommandEvent, OutputChunk } from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert } from "../errors.js";
import { putVarint, varintSize } from "./varint.js";

// ---------------------------------------------------------------- decoding

/** Reader state: the position, and the value of the last varint read. */
interface Cursor {
  pos: number;
  v: number;
}

/**
 * A varint of at most `maxBytes` bytes at c.pos into c.v; false if longer,
 * truncated or past `end`. Every term is exact; a sum past 2^53 may round,
 * but never down to a safe integer, so callers compare with MAX_SAFE_INTEGER.
 */
function varint(b: Uint8Array, c: Cursor, end: number, maxBytes: number): boolean {
  let v = 0;
  let mul = 1;
  for (let i = 0; i < maxBytes; i++) {
    if (c.pos >= end) return false;
    const x = b[c.pos++]!;
    v += (x & 0x7f) * mul;
    if ((x & 0x80) === 0) {
      c.v = v;
      return true;
    }
    mul *= 128;
  }
  return false;
}

const U64 = 8; // bytes: then checked to be a safe integer (exact as a JS number)
const U32 = 5; // bytes: then range-checked against int32 or uint32
const INT32_MAX = 0x7fffffff;
const UINT32_MAX = 0xffffffff;

/** An ASCII string of `len` bytes at `pos`, or null. */
function ascii(b: Uint8Array, pos: number, len: number): string | null {
  let s = "";
  for (let i = pos; i < pos + len; i++) {
    const x = b[i]!;
    if (x > 0x7f) return null;
    s += String.fromCharCode(x);
  }
  return s;
}

/** Length-delimited field body: c.pos at its start, returns its end, or -1. */
function body(b: Uint8Array, c: Cursor, end: number): number {
  if (!varint(b, c, end, 4)) return -1;
  const e = c.pos + c.v;
  return e > end ? -1 : e;
}

/** An ASCII string field's body at c.pos (moving past it), or null. */
function readString(b: Uint8Array, c: Cursor, end: number): string | null {
  const e = body(b, c, end);
  if (e < 0) return null;
  const s = ascii(b, c.pos, e - c.pos);
  c.pos = e;
  return s;
}

/** A uint64 field's varint as protobuf-es gives it (a bigint), when it is a safe integer; else null. */
function readU64(b: Uint8Array, c: Cursor, end: number): bigint | null {
  return varint(b, c, end, U64) && c.v <= Number.MAX_SAFE_INTEGER ? BigInt(c.v) : null;
}

type Timestamp = NonNullable<CommandEvent["time"]>;

function decodeTimestamp(b: Uint8Array, c: Cursor, end: number): Timestamp | null {
  let seconds = 0n;
  let nanos = 0;
  let seen = 0;
  while (c.pos < end) {
    if (!varint(b, c, end, 1)) return null;
    const tag = c.v;
    if (tag === 0x08 && !(seen & 1)) {
      const v = readU64(b, c, end); // int64: the same for non-negative values
      if (v === null) return null;
      seconds = v;
      seen |= 1;
    } else if (tag === 0x10 && !(seen & 2)) {
      if (!varint(b, c, end, U32) || c.v > INT32_MAX) return null;
      nanos = c.v;
      seen |= 2;
    } else return null;
  }
  return { $typeName: "google.protobuf.Timestamp", seconds, nanos };
}

function decodeOutputChunk(b: Uint8Array, c: Cursor, end: number): OutputChunk | null {
  let stream = 0;
  let streamOffset = 0n;
  let originalSize = 0;
  let zstdData = b.subarray(end, end);
  let seen = 0;
  while (c.pos < end) {
    if (!varint(b, c, end, 1)) return null;
    const tag = c.v;
    if (tag === 0x08 && !(seen & 1)) {
      if (!varint(b, c, end, U32) || c.v > INT32_MAX) return null;
      stream = c.v;
      seen |= 1;
    } else if (tag === 0x10 && !(seen & 2)) {
      const v = readU64(b, c, end);
      if (v === null) return null;
      streamOffset = v;
      seen |= 2;
    } else if (tag === 0x18 && !(seen & 4)) {
      if (!varint(b, c, end, U32) || c.v > UINT32_MAX) return null;
      originalSize = c.v;
      seen |= 4;
    } else if (tag === 0x22 && !(seen & 8)) {
      const e = body(b, c, end);
      if (e < 0) return null;
      zstdData = b.subarray(c.pos, e);
      c.pos = e;
      seen |= 8;
    } else return null;
  }
  return { $typeName: "rvbox.v1.OutputChunk", stream, streamOffset, originalSize, zstdData };
}

function decodeCommandEvent(b: Uint8Array, c: Cursor, end: number): CommandEvent | null {
  const ev: CommandEvent = {
    $typeName: "rvbox.v1.CommandEvent",
    issueUuid: "",
    eventSeq: 0n,
    commandRevision: 0n,
    event: { case: undefined },
  };
  let seen = 0;
  while (c.pos < end) {
    if (!varint(b, c, end, 1)) return null;
    const tag = c.v;
    if (tag === 0x0a && !(seen & 1)) {
      const s = readString(b, c, end);
      if (s === null) return null;
      ev.issueUuid = s;
      seen |= 1;
    } else if (tag === 0x10 && !(seen & 2)) {
      const v = readU64(b, c, end);
      if (v === null) return null;
      ev.eventSeq = v;
      seen |= 2;
    } else if (tag === 0x18 && !(seen & 4)) {
      const v = readU64(b, c, end);
      if (v === null) return null;
      ev.commandRevision = v;
      seen |= 4;
    } else if (tag === 0x22 && !(seen & 8)) {
      const e = body(b, c, end);
      if (e < 0) return null;
      const t = decodeTimestamp(b, c, e);
      if (t === null) return null;
      ev.time = t;
      seen |= 8;
    } else if (tag === 0x2a && !(seen & 16)) {
      const e = body(b, c, end);
      if (e < 0) return null;
      const o = decodeOutputChunk(b, c, e);
      if (o === null) return null;
      ev.event = { case: "output", value: o };
      seen |= 16;
    } else return null;
  }
  return ev;
}

function decodeEventAck(b: Uint8Array, c: Cursor, end: number): EventAck | null {
  let issueUuid = "";
  let throughEventSeq = 0n;
  let seen = 0;
  while (c.pos < end) {
    if (!varint(b, c, end, 1)) return null;
    const tag = c.v;
    if (tag === 0x0a && !(seen & 1)) {
      const s = readString(b, c, end);
      if (s === null) return null;
      issueUuid = s;
      seen |= 1;
    } else if (tag === 0x10 && !(seen & 2)) {
      const v = readU64(b, c, end);
      if (v === null) return null;
      throughEventSeq = v;
      seen |= 2;
    } else return null;
  }
  return { $typeName: "rvbox.v1.EventAck", issueUuid, throughEventSeq };
}

/**
 * An envelope carrying a CommandEvent with output (or no event) or an
 * EventAck, decoded without protobuf-es; null when the frame is anything
 * else or not in the canonical form above (the caller then uses fromBinary).
 */
export function decodeHotEnvelope(b: Uint8Array): AgentEnvelope | null {
  const c: Cursor = { pos: 0, v: 0 };
  const end = b.length;
  let sessionId = "";
  let sessionGeneration = 0n;
  let payload: AgentEnvelope["payload"] | null = null;
  let seen = 0;
  while (c.pos < end) {
    if (!varint(b, c, end, 1)) return null;
    const tag = c.v;
    if (tag === 0x0a && !(seen & 1)) {
      const s = readString(b, c, end);
      if (s === null) return null;
      sessionId = s;
      seen |= 1;
    } else if (tag === 0x10 && !(seen & 2)) {
      const v = readU64(b, c, end);
      if (v === null) return null;
      sessionGeneration = v;
      seen |= 2;
    } else if ((tag === 0x3a || tag === 0x42) && payload === null) {
      const e = body(b, c, end);
      if (e < 0) return null;
      if (tag === 0x3a) {
        const ev = decodeCommandEvent(b, c, e);
        if (ev === null) return null;
        payload = { case: "commandEvent", value: ev };
      } else {
        const ack = decodeEventAck(b, c, e);
        if (ack === null) return null;
        payload = { case: "eventAck", value: ack };
      }
    } else return null;
  }
  if (payload === null) return null;
  return { $typeName: "rvbox.v1.AgentEnvelope", sessionId, sessionGeneration, payload };
}

// ---------------------------------------------------------------- encoding

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** A varint field (one-byte tag), written only when not 0, as protobuf-es writes implicit-presence scalars. */
function putScalar(out: Uint8Array, pos: number, tag: number, n: number): number {
  if (n === 0) return pos;
  out[pos] = tag;
  return putVarint(out, pos + 1, n);
}

/** A length-delimited field's tag and length; its body follows. */
function putHead(out: Uint8Array, pos: number, tag: number, len: number): number {
  out[pos] = tag;
  return putVarint(out, pos + 1, len);
}

/** An ASCII string field, written only when not empty. */
function putString(out: Uint8Array, pos: number, tag: number, s: string): number {
  if (s.length === 0) return pos;
  pos = putHead(out, pos, tag, s.length);
  for (let i = 0; i < s.length; i++) out[pos++] = s.charCodeAt(i);
  return pos;
}

const okNumber = (n: number): boolean => Number.isSafeInteger(n) && n >= 0;

/** A field's size: tag (one byte here) plus a varint, or 0 when the value is the default. */
const scalarSize = (n: number): number => (n === 0 ? 0 : 1 + varintSize(n));
/** A length-delimited field's size: tag, length, body. */
const lenSize = (n: number): number => 1 + varintSize(n) + n;

export interface HotOutputEvent {
  uuid: string;
  seq: number;
  revision: number;
  /** Event time, milliseconds since the epoch (Timestamp as timestampFromMs makes it). */
  timeMs: number;
  /** OutputStream enum value. */
  stream: number;
  offset: number;
  originalSize: number;
  zstdData: Uint8Array;
}

/**
 * The bytes toBinary(CommandEventSchema, ...) gives for a CommandEvent with
 * an OutputChunk and `time` = timestampFromMs(timeMs); null when a value is
 * outside what this writer handles (the caller then uses protobuf-es).
 */
export function encodeOutputEvent(e: HotOutputEvent): Uint8Array | null {
  const { uuid, seq, revision, timeMs, stream, offset, originalSize, zstdData } = e;
  if (!isAscii(uuid) || !okNumber(seq) || !okNumber(revision) || !okNumber(timeMs)) return null;
  if (!okNumber(stream) || stream > INT32_MAX || !okNumber(offset) || !okNumber(originalSize) || originalSize > UINT32_MAX) return null;
  const seconds = Math.floor(timeMs / 1000);
  const nanos = (timeMs - seconds * 1000) * 1_000_000;
  const tsLen = scalarSize(seconds) + scalarSize(nanos);
  const chunkLen = scalarSize(stream) + scalarSize(offset) + scalarSize(originalSize) + (zstdData.length > 0 ? lenSize(zstdData.length) : 0);
  const total = (uuid.length > 0 ? lenSize(uuid.length) : 0) + scalarSize(seq) + scalarSize(revision) + lenSize(tsLen) + lenSize(chunkLen);
  const out = new Uint8Array(total);
  let p = putString(out, 0, 0x0a, uuid);
  p = putScalar(out, p, 0x10, seq);
  p = putScalar(out, p, 0x18, revision);
  p = putHead(out, p, 0x22, tsLen);
  p = putScalar(out, p, 0x08, seconds);
  p = putScalar(out, p, 0x10, nanos);
  p = putHead(out, p, 0x2a, chunkLen);
  p = putScalar(out, p, 0x08, stream);
  p = putScalar(out, p, 0x10, offset);
  p = putScalar(out, p, 0x18, originalSize);
  if (zstdData.length > 0) {
    p = putHead(out, p, 0x22, zstdData.length);
    out.set(zstdData, p);
    p += zstdData.length;
  }
  assert(p === total, `encodeOutputEvent: wrote ${p} of ${total} bytes`);
  return out;
}

/**
 * The bytes toBinary gives for an envelope with `fence` and an EventAck
 * payload; null when a value is outside what this writer handles.
 */
export function encodeEventAckEnvelope(fence: { sessionId: string; generation: number } | null, uuid: string, through: bigint): Uint8Array | null {
  const sid = fence?.sessionId ?? "";
  const gen = fence?.generation ?? 0;
  if (!isAscii(sid) || !isAscii(uuid) || !okNumber(gen) || through < 0n || through > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  const seq = Number(through);
  const ackLen = (uuid.length > 0 ? lenSize(uuid.length) : 0) + scalarSize(seq);
  const total = (sid.length > 0 ? lenSize(sid.length) : 0) + scalarSize(gen) + lenSize(ackLen);
  const out = new Uint8Array(total);
  let p = putString(out, 0, 0x0a, sid);
  p = putScalar(out, p, 0x10, gen);
  p = putHead(out, p, 0x42, ackLen);
  p = putString(out, p, 0x0a, uuid);
  p = putScalar(out, p, 0x10, seq);
  assert(p === total, `encodeEventAckEnvelope: wrote ${p} of ${total} bytes`);
  return out;
}
