/**
 * FollowOutput batches encoded once. A batch response carries its events in
 * `repeated FollowOutputResponse events = 14`; encoding that through
 * protobuf-es copies every output byte several times (each nested message is
 * written, then moved when its length prefix widens, then the writer's
 * buffer is grown by doubling and sliced) and that was most of the server's
 * CPU on a read-back (and Connect's envelope copies the result once more).
 * Here a batch is laid out by hand in one buffer of the exact size, envelope
 * included: each output event's few scalar fields, then its data copied in
 * once from the decompressed run (or the stored frame, for a reader that
 * takes zstd); follow-http.ts writes that buffer to the
 * socket as it is. Events other than output (markers, lifecycle) are few and
 * go through toBinary.
 *
 * The layout is the standard protobuf encoding of FollowOutputResponse
 * (protos/rvbox/v1/control.proto), checked against toBinary in
 * test/shells/server/follow-batch.test.ts.
 */
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import type { OutputStream } from "../../protos/gen/rvbox/v1/common_pb.js";
import { FollowOutputResponseSchema } from "../../protos/gen/rvbox/v1/control_pb.js";
import { putVarint, varintSize } from "../../core/codec/varint.js";

type FollowItem = MessageInitShape<typeof FollowOutputResponseSchema>;

/** Field 14 of FollowOutputResponse (`events`), length-delimited. */
const TAG_EVENTS = (14 << 3) | WireType.LengthDelimited;

const utf8 = new TextEncoder();
const EMPTY = new Uint8Array(0);

/** An output event before encoding: its scalar fields and the decompressed bytes (or its stored zstd frame and decoded size). */
interface OutputEvent {
  seq: number;
  revision: number;
  timeMs: number;
  stream: OutputStream;
  offset: number;
  data: Uint8Array;
  zstd: Uint8Array;
  originalSize: number;
}

/** Sizes of one output event's encoding: the Timestamp, the OutputData and the whole event. */
function outputSizes(uuidLen: number, e: OutputEvent): { ts: number; od: number; ev: number; secs: number; nanos: number } {
  const secs = Math.floor(e.timeMs / 1000);
  const nanos = Math.round((e.timeMs - secs * 1000) * 1_000_000);
  // Timestamp { int64 seconds = 1; int32 nanos = 2; }, zero fields omitted (proto3).
  const ts = (secs !== 0 ? 1 + varintSize(secs) : 0) + (nanos !== 0 ? 1 + varintSize(nanos) : 0);
  // OutputData { stream = 1; stream_offset = 2; bytes data = 3; bytes zstd = 4; uint32 original_size = 5; }
  const od =
    (e.stream !== 0 ? 1 + varintSize(e.stream) : 0) +
    (e.offset !== 0 ? 1 + varintSize(e.offset) : 0) +
    (e.data.length > 0 ? 1 + varintSize(e.data.length) + e.data.length : 0) +
    (e.zstd.length > 0 ? 1 + varintSize(e.zstd.length) + e.zstd.length : 0) +
    (e.originalSize !== 0 ? 1 + varintSize(e.originalSize) : 0);
  const ev =
    (uuidLen > 0 ? 1 + varintSize(uuidLen) + uuidLen : 0) +
    (e.seq !== 0 ? 1 + varintSize(e.seq) : 0) +
    (e.revision !== 0 ? 1 + varintSize(e.revision) : 0) +
    1 +
    varintSize(ts) +
    ts +
    1 +
    varintSize(od) +
    od;
  return { ts, od, ev, secs, nanos };
}

function writeOutput(b: Uint8Array, at: number, uuid: Uint8Array, e: OutputEvent, z: ReturnType<typeof outputSizes>): number {
  if (uuid.length > 0) {
    b[at++] = 0x0a; // 1: issue_uuid
    at = putVarint(b, at, uuid.length);
    b.set(uuid, at);
    at += uuid.length;
  }
  if (e.seq !== 0) {
    b[at++] = 0x10; // 2: event_seq
    at = putVarint(b, at, e.seq);
  }
  if (e.revision !== 0) {
    b[at++] = 0x18; // 3: command_revision
    at = putVarint(b, at, e.revision);
  }
  b[at++] = 0x22; // 4: time (always present, as toBinary writes a set message field)
  at = putVarint(b, at, z.ts);
  if (z.secs !== 0) {
    b[at++] = 0x08;
    at = putVarint(b, at, z.secs);
  }
  if (z.nanos !== 0) {
    b[at++] = 0x10;
    at = putVarint(b, at, z.nanos);
  }
  b[at++] = 0x2a; // 5: output
  at = putVarint(b, at, z.od);
  if (e.stream !== 0) {
    b[at++] = 0x08;
    at = putVarint(b, at, e.stream);
  }
  if (e.offset !== 0) {
    b[at++] = 0x10;
    at = putVarint(b, at, e.offset);
  }
  if (e.data.length > 0) {
    b[at++] = 0x1a;
    at = putVarint(b, at, e.data.length);
    b.set(e.data, at);
    at += e.data.length;
  }
  if (e.zstd.length > 0) {
    b[at++] = 0x22;
    at = putVarint(b, at, e.zstd.length);
    b.set(e.zstd, at);
    at += e.zstd.length;
  }
  if (e.originalSize !== 0) {
    b[at++] = 0x28;
    at = putVarint(b, at, e.originalSize);
  }
  return at;
}

function asOutput(it: FollowItem): OutputEvent | null {
  if (it.item?.case !== "output") return null;
  const o = it.item.value as { stream?: OutputStream; streamOffset?: bigint; data?: Uint8Array; zstd?: Uint8Array; originalSize?: number };
  const t = it.time as { seconds?: bigint; nanos?: number } | undefined;
  const timeMs = t ? Number(t.seconds ?? 0n) * 1000 + (t.nanos ?? 0) / 1_000_000 : 0;
  return {
    seq: Number(it.eventSeq ?? 0n),
    revision: Number(it.commandRevision ?? 0n),
    timeMs,
    stream: o.stream ?? 0,
    offset: Number(o.streamOffset ?? 0n),
    data: o.data ?? EMPTY,
    zstd: o.zstd ?? EMPTY,
    originalSize: o.originalSize ?? 0,
  };
}

/**
 * The Connect envelope (1 flag byte, 4 length bytes) and the encoded
 * FollowOutputResponse carrying `items` as its `events` (field 14), in one
 * buffer of the exact size: each output event's data is copied once, from
 * the decompressed run into place.
 */
export function batchEnvelope(uuid: string, items: readonly FollowItem[]): Buffer {
  const uuidBytes = utf8.encode(uuid);
  const parts: Array<{ out: OutputEvent; z: ReturnType<typeof outputSizes> } | Uint8Array> = [];
  let events = 0;
  for (const it of items) {
    const out = asOutput(it);
    let len: number;
    if (out && (it.issueUuid ?? "") === uuid && it.time !== undefined) {
      const z = outputSizes(uuidBytes.length, out);
      parts.push({ out, z });
      len = z.ev;
    } else {
      const b = toBinary(FollowOutputResponseSchema, create(FollowOutputResponseSchema, it));
      parts.push(b);
      len = b.length;
    }
    events += 1 + varintSize(len) + len;
  }
  const lastSeq = Number(items[items.length - 1]?.eventSeq ?? 0n);
  // FollowOutputResponse { issue_uuid = 1; event_seq = 2; repeated events = 14; }
  const message = (uuidBytes.length > 0 ? 1 + varintSize(uuidBytes.length) + uuidBytes.length : 0) + (lastSeq !== 0 ? 1 + varintSize(lastSeq) : 0) + events;
  // Not zero-filled: every byte is written below (checked at the end).
  const buf = Buffer.allocUnsafe(5 + message);
  buf[0] = 0; // flags: an uncompressed message
  buf.writeUInt32BE(message, 1);
  let at = 5;
  if (uuidBytes.length > 0) {
    buf[at++] = 0x0a;
    at = putVarint(buf, at, uuidBytes.length);
    buf.set(uuidBytes, at);
    at += uuidBytes.length;
  }
  if (lastSeq !== 0) {
    buf[at++] = 0x10;
    at = putVarint(buf, at, lastSeq);
  }
  for (const p of parts) {
    buf[at++] = TAG_EVENTS;
    if (p instanceof Uint8Array) {
      at = putVarint(buf, at, p.length);
      buf.set(p, at);
      at += p.length;
    } else {
      at = putVarint(buf, at, p.z.ev);
      at = writeOutput(buf, at, uuidBytes, p.out, p.z);
    }
  }
  if (at !== buf.length) throw new Error(`FollowOutput batch encoding: wrote ${at} of ${buf.length} bytes`);
  return buf;
}

/** One event alone (the original form), enveloped. */
export function singleEnvelope(it: FollowItem): Buffer {
  const b = toBinary(FollowOutputResponseSchema, create(FollowOutputResponseSchema, it));
  const buf = Buffer.allocUnsafe(5 + b.length);
  buf[0] = 0;
  buf.writeUInt32BE(b.length, 1);
  buf.set(b, 5);
  return buf;
}
