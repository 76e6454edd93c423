/**
 * The follow cursor: what one reader of a command's output (`rvbox logs`,
 * `run --follow`, the TUI's output pane) shows of the items the server sends,
 * so that across reconnects and redeliveries each event is shown exactly once
 * and a shortened stream is never silent (R-O3, R-O5, R-O7).
 *
 * Pure: a plain state and `step(cursor, batch)`. A shell only fetches the
 * batches (FollowOutput from `cursor.next`) and prints what `step` returns.
 *
 *   - Sequences: an item whose last event (a retention marker covers a range)
 *     is below `next` was shown already (a resumed stream repeats it) and is
 *     dropped; `next` moves past every item taken. Within one batch the
 *     server sends events in sequence order: a batch whose sequences go
 *     backwards is refused as a whole (an error value, the cursor unchanged).
 *   - Bytes: every stdout/stderr byte offset the reader moves past is either
 *     shown output or covered by a marker. A marker's byte ranges are trimmed
 *     to what this reader has not shown (a live follower that saw bytes before
 *     retention removed them is told only about what it missed; a marker about
 *     nothing is dropped), as is output it already has. If output or a marker
 *     jumps ahead with no marker for the skipped bytes, a `gap` item is made
 *     for them (and counted in `gaps`), so even a server that forgot a marker
 *     cannot make the stream look complete.
 */
import { lastSeqOf, type ByteSpan, type OutputItem, type StreamName } from "./items.js";

export interface FollowCursor {
  /** Next event sequence to ask for (FollowOutput from_event_seq): the resume position. */
  readonly next: number;
  /** Bytes accounted for so far, per stream (null: not known yet, a reader that began after event 1). */
  readonly offsets: Readonly<Record<StreamName, number | null>>;
  /** Byte ranges no marker covered (each shown as a `gap` item). */
  readonly gaps: number;
}

export type CursorError =
  /** A batch's event sequences go backwards (`index`: the first item out of order). */
  | { code: "OUT_OF_ORDER"; index: number; seq: number; after: number }
  /** An item's sequence is not a positive integer. */
  | { code: "BAD_SEQ"; index: number; seq: number };

/** What one item of a batch came to: the items to show (none, itself, trimmed, a gap before it) and `next` after it. */
export interface Admitted {
  shown: OutputItem[];
  next: number;
}

export type StepResult = { ok: true; cursor: FollowCursor; admitted: Admitted[] } | { ok: false; error: CursorError };

/** A reader starting at event `from` (1: the whole output, so both streams start at offset 0). */
export function newCursor(from = 1): FollowCursor {
  const next = Math.max(1, from);
  return next === 1 ? { next, offsets: { stdout: 0, stderr: 0 }, gaps: 0 } : { next, offsets: { stdout: null, stderr: null }, gaps: 0 };
}

/** One batch, in the order the server sent it. */
export function step(cursor: FollowCursor, batch: readonly OutputItem[]): StepResult {
  for (let i = 0; i < batch.length; i++) {
    const seq = batch[i]!.seq;
    if (!Number.isSafeInteger(seq) || seq < 1) return { ok: false, error: { code: "BAD_SEQ", index: i, seq } };
    if (i > 0 && seq < batch[i - 1]!.seq) return { ok: false, error: { code: "OUT_OF_ORDER", index: i, seq, after: batch[i - 1]!.seq } };
  }
  const admitted: Admitted[] = [];
  let c = cursor;
  for (const it of batch) {
    const r = admit(c, it);
    c = r.cursor;
    admitted.push({ shown: r.shown, next: c.next });
  }
  return { ok: true, cursor: c, admitted };
}

/** One item (no order check against its neighbours: `step` does that per batch). */
export function admit(cursor: FollowCursor, it: OutputItem): { cursor: FollowCursor; shown: OutputItem[] } {
  const last = lastSeqOf(it);
  if (last < cursor.next) return { cursor, shown: [] }; // shown before a reconnect
  const offsets = { ...cursor.offsets };
  const shown: OutputItem[] = [];
  const gap = (seq: number, stream: StreamName, from: number, to: number): void => {
    shown.push({ kind: "gap", seq, stream, offset: from, length: to - from });
  };
  switch (it.kind) {
    case "output": {
      if (it.stream === "unknown") {
        shown.push(it);
        break;
      }
      const s = it.stream;
      let { offset, data } = it;
      const exp = offsets[s];
      if (exp !== null && offset > exp) gap(it.seq, s, exp, offset);
      if (exp !== null && offset < exp) {
        const skip = Math.min(data.length, exp - offset);
        data = data.subarray(skip);
        offset += skip;
      }
      offsets[s] = Math.max(exp ?? 0, offset + data.length);
      if (data.length > 0) shown.push(data === it.data ? it : { ...it, offset, data });
      break;
    }
    case "truncation": {
      if (it.ranges.length === 0) {
        shown.push(it);
        break;
      }
      const ranges: ByteSpan[] = [];
      for (const r of it.ranges) {
        if (r.stream === "unknown") {
          ranges.push(r);
          continue;
        }
        const exp = offsets[r.stream];
        const end = r.offset + r.length;
        if (exp !== null && r.offset > exp) gap(it.seq, r.stream, exp, r.offset);
        const start = exp === null ? r.offset : Math.max(r.offset, exp);
        if (end > start) ranges.push({ stream: r.stream, offset: start, length: end - start });
        offsets[r.stream] = Math.max(exp ?? 0, end);
      }
      if (ranges.length === 0) break;
      const events = it.events ? { first: Math.max(it.events.first, Math.min(cursor.next, it.events.last)), last: it.events.last } : null;
      shown.push({ ...it, ranges, events });
      break;
    }
    default:
      shown.push(it);
  }
  const gaps = cursor.gaps + shown.filter((x) => x.kind === "gap").length;
  return { cursor: { next: Math.max(cursor.next, last + 1), offsets, gaps }, shown };
}

/** Broken invariants of a cursor (none: []). */
export function cursorInvariants(c: FollowCursor): string[] {
  const out: string[] = [];
  if (!Number.isSafeInteger(c.next) || c.next < 1) out.push(`next ${c.next} is not a positive integer`);
  for (const s of ["stdout", "stderr"] as const) {
    const o = c.offsets[s];
    if (o !== null && (!Number.isSafeInteger(o) || o < 0)) out.push(`${s} offset ${o} is not a byte offset`);
  }
  if (c.gaps < 0) out.push(`gaps ${c.gaps} < 0`);
  return out;
}

/** A cursor error in the operator's words. */
export function cursorErrorText(e: CursorError): string {
  switch (e.code) {
    case "OUT_OF_ORDER":
      return `the server sent event ${e.seq} after event ${e.after} in one batch (out of order)`;
    case "BAD_SEQ":
      return `the server sent an event with sequence ${e.seq}`;
  }
}
