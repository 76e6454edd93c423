// The reader oracle (R-O3, R-O5, R-O7): run the core's follow cursor
// (core/reader/follow-cursor.ts) over what the server durably stored for a
// terminal command, as a reader that is redelivered part of every batch
// would get it, and check the item stream it shows against the bytes the
// process wrote: each event once, every byte shown with its content or
// covered by a marker, in order, no gap, and (for a command whose process
// exited) nothing missing at the end. It only observes: no randomness, no
// effect on the run.

import { bytesEqual } from "../core/bytes.js";
import { lifecycleName } from "../core/reader/command-view.js";
import { newCursor, step, type FollowCursor } from "../core/reader/follow-cursor.js";
import type { OutputItem, StreamName } from "../core/reader/items.js";
import type { StoredEvent } from "./coverage.js";
import { decodeRawZstdFrame } from "./zstd-raw.js";

/** A server retention marker (core/server RetentionMarker) as the oracle reads it. */
export interface RetentionSpan {
  firstSeq: number;
  lastSeq: number;
  ranges: ReadonlyArray<{ stream: StreamName; offset: number; length: number }>;
}

/** One stored event as the item a reader gets (fields the cursor ignores are left empty). */
function itemOf(e: StoredEvent): OutputItem | string {
  const seq = e.seq;
  switch (e.kind) {
    case "output": {
      const data = decodeRawZstdFrame(e.zstd!);
      if (!data) return `event ${seq}: stored frame does not decode`;
      return { kind: "output", seq, stream: e.stream!, offset: e.offset!, data };
    }
    case "truncation":
      return { kind: "truncation", seq, cause: "unknown", events: null, ranges: (e.ranges ?? []).map((r) => ({ ...r })) };
    case "lifecycle":
      return { kind: "lifecycle", seq, revision: 0, state: lifecycleName(e.state ?? 0), exitCode: null, signalName: "", reason: "", error: "" };
    default:
      // stdin_ack, signal_result, script_upload, incomplete: events without bytes; the cursor passes them on.
      return { kind: "incomplete", seq, streams: [], reason: e.kind };
  }
}

/**
 * The stored events 1..through with the server's retention markers merged as
 * a reader is sent them (the marker where its range begins, the output rows
 * it covers left out). Markers whose event range holds an agent truncation
 * are not merged (the server interleaves their byte ranges; see
 * shells/server/control-service.ts follow): the plain events are used then.
 */
export function readerStream(events: ReadonlyMap<number, StoredEvent>, through: number, retention: readonly RetentionSpan[]): OutputItem[] | string {
  const markers = retention.filter((m) => {
    for (let s = m.firstSeq; s <= Math.min(m.lastSeq, through); s++) if (events.get(s)?.kind === "truncation") return false;
    return m.firstSeq <= through;
  });
  const items: OutputItem[] = [];
  let mi = 0;
  const sorted = [...markers].sort((a, b) => a.firstSeq - b.firstSeq);
  for (let seq = 1; seq <= through; seq++) {
    while (mi < sorted.length && sorted[mi]!.firstSeq <= seq) {
      const m = sorted[mi++]!;
      const ranges = [...m.ranges].sort((a, b) => (a.stream === b.stream ? a.offset - b.offset : a.stream < b.stream ? -1 : 1)).map((r) => ({ ...r }));
      items.push({ kind: "truncation", seq: m.firstSeq, cause: "server-retention", events: { first: m.firstSeq, last: m.lastSeq }, ranges });
    }
    const e = events.get(seq);
    if (!e) return `event ${seq} missing`;
    if (e.kind === "output" && sorted.some((m) => m.firstSeq <= seq && seq <= m.lastSeq)) continue;
    const it = itemOf(e);
    if (typeof it === "string") return it;
    items.push(it);
  }
  return items;
}

/** Batches of three items, each after the first starting one item back (a redelivery), then a resumed reader. */
function deliver(items: readonly OutputItem[]): { shown: OutputItem[]; cursor: FollowCursor } | string {
  let cursor = newCursor();
  const shown: OutputItem[] = [];
  for (let i = 0; i < items.length; i += 2) {
    const r = step(cursor, items.slice(Math.max(0, i - 1), i + 2));
    if (!r.ok) return `the cursor refused a batch: ${r.error.code} at ${r.error.seq}`;
    cursor = r.cursor;
    for (const a of r.admitted) shown.push(...a.shown);
  }
  return { shown, cursor };
}

/** null when the reader's stream is what the process wrote. */
export function followCoverageOf(
  events: ReadonlyMap<number, StoredEvent>,
  through: number,
  retention: readonly RetentionSpan[],
  seen: { stdout: Uint8Array; stderr: Uint8Array },
  full: boolean,
): string | null {
  const items = readerStream(events, through, retention);
  if (typeof items === "string") return items;
  const got = deliver(items);
  if (typeof got === "string") return got;
  const once = step(newCursor(), items);
  if (!once.ok) return `the cursor refused the whole stream: ${once.error.code} at ${once.error.seq}`;
  const sig = (xs: readonly OutputItem[]): string => xs.map((x) => `${x.kind}@${x.seq}${x.kind === "output" ? `:${x.offset}+${x.data.length}` : ""}`).join(",");
  if (sig(got.shown) !== sig(once.admitted.flatMap((a) => a.shown))) return "redelivered batches show other items than the stream in one batch";
  const end: Record<StreamName, number> = { stdout: 0, stderr: 0 };
  let lastSeq = 0;
  for (const it of got.shown) {
    if (it.kind === "gap") return `${it.stream} bytes ${it.offset}..${it.offset + it.length} shown as a gap (no marker) before event ${it.seq}`;
    if (it.seq < lastSeq) return `event ${it.seq} shown after event ${lastSeq}`;
    if (it.seq === lastSeq && it.kind !== "truncation") return `event ${it.seq} shown twice`;
    lastSeq = it.seq;
    if (it.kind === "output") {
      if (it.stream === "unknown") return `event ${it.seq}: output of no stream`;
      const s = it.stream;
      if (it.offset !== end[s]) return `${s} shown from ${it.offset}, expected ${end[s]} (event ${it.seq})`;
      const want = seen[s].subarray(it.offset, it.offset + it.data.length);
      if (want.length !== it.data.length || !bytesEqual(want, it.data))
        return `${s} bytes ${it.offset}..${it.offset + it.data.length} shown differ from what the process wrote (event ${it.seq})`;
      end[s] += it.data.length;
    } else if (it.kind === "truncation") {
      for (const r of it.ranges) {
        if (r.stream === "unknown") return `event ${it.seq}: a marker of no stream`;
        if (r.offset !== end[r.stream]) return `${r.stream} marker from ${r.offset}, expected ${end[r.stream]} (event ${it.seq})`;
        end[r.stream] += r.length;
      }
    }
  }
  if (got.cursor.gaps !== 0) return `${got.cursor.gaps} gaps counted`;
  if (got.cursor.next !== through + 1) return `the reader would resume at ${got.cursor.next}, stored through ${through}`;
  for (const s of ["stdout", "stderr"] as const) {
    if (full ? end[s] !== seen[s].length : end[s] > seen[s].length) return `${s}: the reader accounts for ${end[s]} bytes, the process wrote ${seen[s].length}`;
  }
  return null;
}
