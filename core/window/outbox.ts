// Agent send window ("outbox"): R-O1, R-O2, R-O6, R-O7, R-W3, R-W6, R-W8, R-W9.
//
// Theory of operation
// -------------------
// Everything a command produces (output chunks, stdin acks, signal results,
// script progress, lifecycle changes, markers) first becomes a LocalEntry in
// that command's durable local order (`entries`, persisted in table
// "entry"). Entries have no wire sequence yet.
//
// `admit` moves entries, head first, into the send window: it assigns the
// next `event_seq`, encodes the CommandEvent once (compressing output), and
// persists the encoded bytes as a PinnedEvent (table "event") in the same
// batch that deletes the entry. From then on the bytes are pinned: every
// retransmission sends exactly them (R-O2) until a cumulative EventAck
// releases them (R-O6: pinned events are never evicted).
//
// Admission is bounded by the unacknowledged-bytes windows: 1 MiB per command
// and 8 MiB per session (R-W3). Output may only use the window minus a
// metadata reserve, so markers and the final lifecycle event always fit
// (R-W9). Admission goes round-robin over commands, one entry per command per
// round, so one verbose command cannot starve the others (R-W8).
//
// Raw output not yet admitted is bounded three ways:
//  - watermarks (R-W6): once unsequenced raw bytes across all commands exceed
//    the high watermark, new output is summarized into a truncation entry
//    (cause AGENT_WATERMARK) until they fall to the low watermark;
//  - budgets (R-O7, R-W2): when a command exceeds its output budget, or all
//    commands exceed the total, the oldest unsequenced output entries are
//    replaced in place by truncation entries (cause AGENT_BUDGET). Adjacent
//    truncation entries merge. They carry byte ranges but no event range:
//    those bytes never had sequences; the marker takes the next normal
//    event_seq when admitted.
// A stream's byte offsets advance over kept and dropped bytes alike, so the
// server can check that every byte is either delivered or covered by a
// marker.

import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { encodeOutputEvent } from "../codec/hot-codec.js";
import {
  ByteRangeSchema,
  CommandEventSchema,
  OutputChunkSchema,
  OutputStream,
  OutputTruncationSchema,
  TruncationCause,
  type CommandEvent,
} from "../../protos/gen/rvbox/v1/common_pb.js";
import { assert } from "../errors.js";
import type { PersistRecord } from "../effects.js";
import type { CorePorts } from "../ports.js";
import { MAX_CHUNK_BYTES } from "../limits.js";
import { entryKey, eventKey } from "../agent/store-keys.js";

export { entryKey, eventKey };

export type StreamName = "stdout" | "stderr";

export interface ByteRangeData {
  stream: StreamName;
  offset: number;
  length: number;
}

/** A non-output event, stored as the init object of its CommandEvent oneof. */
export type MetaEvent = Exclude<CommandEvent["event"], { case: "output" | "truncation" | undefined }>;

export type LocalEntry =
  | { idx: number; kind: "output"; stream: StreamName; offset: number; data: Uint8Array; revision: number; time: number }
  | { idx: number; kind: "truncation"; cause: TruncationCause; ranges: ByteRangeData[]; revision: number; time: number }
  | { idx: number; kind: "meta"; event: MetaEvent; revision: number; time: number };

export interface PinnedEvent {
  seq: number;
  bytes: Uint8Array;
  /** Generation of the session it was last sent on; 0 = not sent on the current one. */
  sentOn: number;
  /** Only true once its persist is durable: never sent before. */
  durable: boolean;
}

export interface CommandOutbox {
  uuid: string;
  entries: LocalEntry[];
  nextIdx: number;
  pinned: PinnedEvent[];
  pinnedBytes: number;
  nextSeq: number;
  ackedThrough: number;
  rawBytes: number;
  streamNext: { stdout: number; stderr: number };
  /** A terminal lifecycle entry was appended: nothing may follow it. */
  closed: boolean;
}

export interface OutboxLimits {
  windowPerCommand: number;
  windowPerSession: number;
  metadataReserve: number;
  rawHigh: number;
  rawLow: number;
  outputPerCommand: number;
  outputTotal: number;
}

export interface Outbox {
  limits: OutboxLimits;
  commands: Map<string, CommandOutbox>;
  /** uuid admitted from last; round-robin resumes after it. */
  cursor: string;
  sessionPinnedBytes: number;
  rawTotal: number;
  summarizing: boolean;
}

/** Encoded size of an output event beyond its raw bytes (frame header, block headers, fields). */
export const OUTPUT_EVENT_OVERHEAD_BYTES = 256;

/**
 * Limits that cannot work are a configuration error, refused up front: a
 * window that cannot hold one full chunk would stall a command forever.
 */
export function checkOutboxLimits(l: OutboxLimits): string | null {
  const chunk = MAX_CHUNK_BYTES + OUTPUT_EVENT_OVERHEAD_BYTES;
  if (l.windowPerCommand - l.metadataReserve < chunk) return `windowPerCommand - metadataReserve must hold one ${chunk}-byte output event`;
  if (l.windowPerSession - l.metadataReserve < chunk) return `windowPerSession - metadataReserve must hold one ${chunk}-byte output event`;
  if (l.windowPerSession < l.windowPerCommand) return "windowPerSession must be at least windowPerCommand";
  if (l.metadataReserve < 4096) return "metadataReserve must be at least 4 KiB";
  if (l.rawLow > l.rawHigh) return "rawLow must not exceed rawHigh";
  if (l.outputPerCommand < MAX_CHUNK_BYTES || l.outputTotal < l.outputPerCommand)
    return "output budgets must hold a chunk, and the total at least one command's";
  return null;
}

export function newOutbox(limits: OutboxLimits): Outbox {
  const bad = checkOutboxLimits(limits);
  assert(bad === null, `invalid outbox limits: ${bad}`);
  return { limits, commands: new Map(), cursor: "", sessionPinnedBytes: 0, rawTotal: 0, summarizing: false };
}

export function newCommandOutbox(uuid: string): CommandOutbox {
  return {
    uuid,
    entries: [],
    nextIdx: 1,
    pinned: [],
    pinnedBytes: 0,
    nextSeq: 1,
    ackedThrough: 0,
    rawBytes: 0,
    streamNext: { stdout: 0, stderr: 0 },
    closed: false,
  };
}

/** Row of table "outbox" (key: uuid): the header of one command's outbox. */
export type OutboxRow = Pick<CommandOutbox, "nextIdx" | "nextSeq" | "ackedThrough" | "streamNext" | "closed">;

/** Row of table "event" (key: `eventKey`): a pinned event's encoded bytes, until acknowledged. */
export type EventRow = Pick<PinnedEvent, "seq" | "bytes">;

/** Row of table "entry" (key: `entryKey`): an unsequenced entry, stored as it is in memory. */
export type EntryRow = LocalEntry;

/** Persisted header of a command's outbox (table "outbox"). */
export function outboxHeader(cb: CommandOutbox): PersistRecord {
  const value: OutboxRow = {
    nextIdx: cb.nextIdx,
    nextSeq: cb.nextSeq,
    ackedThrough: cb.ackedThrough,
    streamNext: { ...cb.streamNext },
    closed: cb.closed,
  };
  return { table: "outbox", key: cb.uuid, value };
}

function eventRecord(uuid: string, seq: number, bytes: Uint8Array): PersistRecord {
  const value: EventRow = { seq, bytes };
  return { table: "event", key: eventKey(uuid, seq), value };
}

function entryRecord(uuid: string, e: LocalEntry): PersistRecord {
  return { table: "entry", key: entryKey(uuid, e.idx), value: freezeEntry(e) };
}

function freezeEntry(e: LocalEntry): EntryRow {
  return e.kind === "truncation" ? { ...e, ranges: e.ranges.map((r) => ({ ...r })) } : { ...e };
}

// ---------------------------------------------------------------- appending

/** Append a metadata event (never dropped). */
export function appendMeta(ob: Outbox, cb: CommandOutbox, event: MetaEvent, revision: number, now: number, out: PersistRecord[]): void {
  assert(!cb.closed, `append after terminal lifecycle on ${cb.uuid}`);
  const e: LocalEntry = { idx: cb.nextIdx++, kind: "meta", event, revision, time: now };
  cb.entries.push(e);
  if (event.case === "lifecycle" && isTerminalLifecycleEvent(event)) cb.closed = true;
  out.push(entryRecord(cb.uuid, e), outboxHeader(cb));
  void ob;
}

function isTerminalLifecycleEvent(ev: MetaEvent): boolean {
  if (ev.case !== "lifecycle") return false;
  const s = ev.value.state ?? 0;
  return s >= 5 && s <= 10; // SUCCEEDED..EXPIRED
}

/**
 * Append captured output. Returns whether the bytes were kept (false: they
 * were summarized into a truncation entry because of the watermark).
 */
export function appendOutput(
  ob: Outbox,
  cb: CommandOutbox,
  stream: StreamName,
  data: Uint8Array,
  revision: number,
  now: number,
  out: PersistRecord[],
): boolean {
  assert(!cb.closed, `output after terminal lifecycle on ${cb.uuid}`);
  if (data.length === 0) return true;
  const offset = cb.streamNext[stream];
  cb.streamNext[stream] += data.length;
  if (ob.summarizing) {
    addTruncation(cb, { stream, offset, length: data.length }, TruncationCause.AGENT_WATERMARK, revision, now, out);
    out.push(outboxHeader(cb));
    return false;
  }
  const e: LocalEntry = { idx: cb.nextIdx++, kind: "output", stream, offset, data, revision, time: now };
  cb.entries.push(e);
  cb.rawBytes += data.length;
  ob.rawTotal += data.length;
  out.push(entryRecord(cb.uuid, e), outboxHeader(cb));
  if (ob.rawTotal > ob.limits.rawHigh) ob.summarizing = true;
  enforceBudgets(ob, cb, out);
  return true;
}

/** Extend the last entry if it is a truncation of this cause, else append one. */
function addTruncation(cb: CommandOutbox, range: ByteRangeData, cause: TruncationCause, revision: number, now: number, out: PersistRecord[]): void {
  const last = cb.entries[cb.entries.length - 1];
  if (last && last.kind === "truncation" && last.cause === cause) {
    mergeRange(last.ranges, range);
    out.push(entryRecord(cb.uuid, last));
    return;
  }
  const e: LocalEntry = { idx: cb.nextIdx++, kind: "truncation", cause, ranges: [{ ...range }], revision, time: now };
  cb.entries.push(e);
  out.push(entryRecord(cb.uuid, e));
}

function mergeRange(ranges: ByteRangeData[], r: ByteRangeData): void {
  for (let i = ranges.length - 1; i >= 0; i--) {
    const x = ranges[i]!;
    if (x.stream !== r.stream) continue;
    if (x.offset + x.length === r.offset) {
      x.length += r.length;
      return;
    }
    break;
  }
  ranges.push({ ...r });
}

/** R-O7: replace the oldest unsequenced output entries while over budget. */
function enforceBudgets(ob: Outbox, cb: CommandOutbox, out: PersistRecord[]): void {
  while (cb.rawBytes > ob.limits.outputPerCommand) evictOldestOutput(ob, cb, out);
  while (ob.rawTotal > ob.limits.outputTotal) {
    let victim: CommandOutbox | undefined;
    for (const c of ob.commands.values()) if (!victim || c.rawBytes > victim.rawBytes) victim = c;
    assert(victim && victim.rawBytes > 0, "output total over budget with no unsequenced output");
    evictOldestOutput(ob, victim, out);
  }
}

function evictOldestOutput(ob: Outbox, cb: CommandOutbox, out: PersistRecord[]): void {
  const i = cb.entries.findIndex((e) => e.kind === "output");
  assert(i >= 0, `evict on ${cb.uuid} without output entries`);
  const e = cb.entries[i]! as Extract<LocalEntry, { kind: "output" }>;
  cb.rawBytes -= e.data.length;
  ob.rawTotal -= e.data.length;
  const range: ByteRangeData = { stream: e.stream, offset: e.offset, length: e.data.length };
  const prev = i > 0 ? cb.entries[i - 1] : undefined;
  const next = cb.entries[i + 1];
  if (prev && prev.kind === "truncation" && prev.cause === TruncationCause.AGENT_BUDGET) {
    mergeRange(prev.ranges, range);
    cb.entries.splice(i, 1);
    out.push({ table: "entry", key: entryKey(cb.uuid, e.idx), value: null }, entryRecord(cb.uuid, prev));
    // Merge a following budget truncation into prev as well.
    if (next && next.kind === "truncation" && next.cause === TruncationCause.AGENT_BUDGET) {
      for (const r of next.ranges) mergeRange(prev.ranges, r);
      cb.entries.splice(i, 1);
      out.push({ table: "entry", key: entryKey(cb.uuid, next.idx), value: null }, entryRecord(cb.uuid, prev));
    }
    return;
  }
  const t: LocalEntry = {
    idx: e.idx,
    kind: "truncation",
    cause: TruncationCause.AGENT_BUDGET,
    ranges: [range],
    revision: e.revision,
    time: e.time,
  };
  cb.entries[i] = t;
  out.push(entryRecord(cb.uuid, t));
}

// ---------------------------------------------------------------- admission

function encodeEntry(uuid: string, seq: number, e: LocalEntry, ports: CorePorts): Uint8Array {
  let event: CommandEvent["event"];
  if (e.kind === "output") {
    const zstdData = ports.compress(e.data);
    const stream = e.stream === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR;
    // The bytes protobuf-es would write, written by hand (hot-codec.ts).
    const hot = encodeOutputEvent({ uuid, seq, revision: e.revision, timeMs: e.time, stream, offset: e.offset, originalSize: e.data.length, zstdData });
    if (hot !== null) return hot;
    event = {
      case: "output",
      value: create(OutputChunkSchema, {
        stream,
        streamOffset: BigInt(e.offset),
        originalSize: e.data.length,
        zstdData,
      }),
    };
  } else if (e.kind === "truncation") {
    event = {
      case: "truncation",
      value: create(OutputTruncationSchema, {
        cause: e.cause,
        removedBytes: e.ranges.map((r) =>
          create(ByteRangeSchema, {
            stream: r.stream === "stdout" ? OutputStream.STDOUT : OutputStream.STDERR,
            offset: BigInt(r.offset),
            length: BigInt(r.length),
          }),
        ),
      }),
    };
  } else {
    event = e.event;
  }
  const msg = create(CommandEventSchema, {
    issueUuid: uuid,
    eventSeq: BigInt(seq),
    commandRevision: BigInt(e.revision),
    time: timestampFromMs(e.time),
    event,
  });
  return toBinary(CommandEventSchema, msg);
}

/**
 * Admit entries into the window, round-robin across commands. Persists the
 * pinned bytes and deletes the entries in `out`; the caller marks the new
 * pinned events durable when that batch is.
 */
export function admit(ob: Outbox, ports: CorePorts, out: PersistRecord[]): Array<{ uuid: string; seq: number }> {
  const admitted: Array<{ uuid: string; seq: number }> = [];
  const order = rotate([...ob.commands.keys()], ob.cursor);
  let progress = true;
  while (progress) {
    progress = false;
    for (const uuid of order) {
      const cb = ob.commands.get(uuid)!;
      const e = cb.entries[0];
      if (!e) continue;
      const isOutput = e.kind === "output";
      const reserve = isOutput ? ob.limits.metadataReserve : 0;
      const fits = (n: number): boolean =>
        cb.pinnedBytes + n <= ob.limits.windowPerCommand - reserve && ob.sessionPinnedBytes + n <= ob.limits.windowPerSession - reserve;
      // Compression is the expensive part: rule out output that cannot fit
      // by its upper bound before encoding, then check the real size.
      if (isOutput && !fits(e.data.length + OUTPUT_EVENT_OVERHEAD_BYTES)) continue;
      const seq = cb.nextSeq;
      const bytes = encodeEntry(uuid, seq, e, ports);
      if (isOutput) assert(bytes.length <= e.data.length + OUTPUT_EVENT_OVERHEAD_BYTES, `output event of ${bytes.length} bytes for ${e.data.length} raw`);
      if (!fits(bytes.length)) continue;
      cb.entries.shift();
      cb.nextSeq++;
      if (isOutput) {
        cb.rawBytes -= e.data.length;
        ob.rawTotal -= e.data.length;
      }
      const p: PinnedEvent = { seq, bytes, sentOn: 0, durable: false };
      cb.pinned.push(p);
      cb.pinnedBytes += bytes.length;
      ob.sessionPinnedBytes += bytes.length;
      out.push({ table: "entry", key: entryKey(uuid, e.idx), value: null }, eventRecord(uuid, seq, bytes), outboxHeader(cb));
      admitted.push({ uuid, seq });
      ob.cursor = uuid;
      progress = true;
    }
  }
  if (ob.summarizing && ob.rawTotal <= ob.limits.rawLow) ob.summarizing = false;
  return admitted;
}

function rotate(keys: string[], after: string): string[] {
  const i = keys.indexOf(after);
  return i < 0 ? keys : [...keys.slice(i + 1), ...keys.slice(0, i + 1)];
}

/**
 * Cumulative acknowledgement through `through`. Returns false if it acknowledges
 * a sequence never assigned (an impossible sequence from the peer).
 */
export function acknowledge(ob: Outbox, cb: CommandOutbox, through: number, out: PersistRecord[]): boolean {
  if (through >= cb.nextSeq) return false;
  if (through <= cb.ackedThrough) return true;
  while (cb.pinned.length > 0 && cb.pinned[0]!.seq <= through) {
    const p = cb.pinned.shift()!;
    cb.pinnedBytes -= p.bytes.length;
    ob.sessionPinnedBytes -= p.bytes.length;
    out.push({ table: "event", key: eventKey(cb.uuid, p.seq), value: null });
  }
  cb.ackedThrough = through;
  out.push(outboxHeader(cb));
  return true;
}

/** Everything of this command has been acknowledged and nothing more can come. */
export function fullyAcknowledged(cb: CommandOutbox): boolean {
  return cb.closed && cb.entries.length === 0 && cb.pinned.length === 0;
}

export function removeCommand(ob: Outbox, uuid: string, out: PersistRecord[]): void {
  const cb = ob.commands.get(uuid);
  if (!cb) return;
  for (const e of cb.entries) {
    if (e.kind === "output") ob.rawTotal -= e.data.length;
    out.push({ table: "entry", key: entryKey(uuid, e.idx), value: null });
  }
  for (const p of cb.pinned) {
    ob.sessionPinnedBytes -= p.bytes.length;
    out.push({ table: "event", key: eventKey(uuid, p.seq), value: null });
  }
  out.push({ table: "outbox", key: uuid, value: null });
  ob.commands.delete(uuid);
  if (ob.cursor === uuid) ob.cursor = "";
}

/** Last event_seq assigned (0 if none). */
export function lastAssigned(cb: CommandOutbox): number {
  return cb.nextSeq - 1;
}

// ---------------------------------------------------------------- invariants

export function outboxInvariants(ob: Outbox): void {
  let session = 0;
  let raw = 0;
  for (const [uuid, cb] of ob.commands) {
    assert(cb.uuid === uuid, "outbox key mismatch");
    let pinnedBytes = 0;
    let expect = cb.ackedThrough + 1;
    for (const p of cb.pinned) {
      assert(p.seq === expect, `${uuid}: pinned seqs not contiguous after ack (${p.seq} != ${expect})`);
      expect++;
      pinnedBytes += p.bytes.length;
    }
    assert(expect === cb.nextSeq, `${uuid}: nextSeq ${cb.nextSeq} != last pinned + 1 (${expect})`);
    assert(pinnedBytes === cb.pinnedBytes, `${uuid}: pinnedBytes drift`);
    assert(cb.pinnedBytes <= ob.limits.windowPerCommand, `${uuid}: per-command window exceeded`);
    let r = 0;
    let lastIdx = 0;
    for (let i = 0; i < cb.entries.length; i++) {
      const e = cb.entries[i]!;
      assert(e.idx > lastIdx, `${uuid}: local order not increasing`);
      lastIdx = e.idx;
      if (e.kind === "output") r += e.data.length;
      if (e.kind === "meta" && isTerminalLifecycleEvent(e.event)) assert(i === cb.entries.length - 1, `${uuid}: entry after terminal lifecycle`);
    }
    assert(lastIdx < cb.nextIdx, `${uuid}: entry idx beyond nextIdx`);
    assert(r === cb.rawBytes, `${uuid}: rawBytes drift`);
    assert(cb.rawBytes <= ob.limits.outputPerCommand, `${uuid}: output budget exceeded`);
    session += pinnedBytes;
    raw += r;
  }
  assert(session === ob.sessionPinnedBytes, "session pinned bytes drift");
  assert(ob.sessionPinnedBytes <= ob.limits.windowPerSession, "session window exceeded");
  assert(raw === ob.rawTotal, "raw total drift");
  assert(ob.rawTotal <= ob.limits.outputTotal, "output total budget exceeded");
}
