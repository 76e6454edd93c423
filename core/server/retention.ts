// Stored output and rolling retention (R-O5): output events are grouped into
// segments per command; past the per-command or per-client budget whole old
// segments go, oldest first, recorded in one cumulative marker per command.
// The files go only once that marker is durable (`drop_output`, released
// here).

import type { StreamName } from "../window/outbox.js";
import type { ServerCommand, ServerDeferred, ServerState } from "./server-types.js";
import { retentionRecord } from "./store.js";
import type { ServerCtx } from "./io.js";
import { recharge } from "./metadata.js";

/** Keep the per-client retained-output index in step with a command's stored bytes. */
export function noteOutput(st: ServerState, c: ServerCommand, delta: number): void {
  let e = st.clientOutput.get(c.clientId);
  if (!e) st.clientOutput.set(c.clientId, (e = { bytes: 0, uuids: new Set() }));
  e.bytes += delta;
  if (c.output.storedOutputBytes > 0) e.uuids.add(c.uuid);
  else e.uuids.delete(c.uuid);
}

export function addToSegments(
  st: ServerState,
  ctx: ServerCtx,
  c: ServerCommand,
  seq: number,
  bytes: number,
  range: { stream: StreamName; offset: number; length: number },
): void {
  const L2 = st.config.limits;
  let seg = c.output.segments[c.output.segments.length - 1];
  if (!seg || seg.bytes >= L2.segmentBytes) {
    seg = { firstSeq: seq, lastSeq: seq, bytes: 0, ranges: [] };
    c.output.segments.push(seg);
  }
  seg.lastSeq = seq;
  seg.bytes += bytes;
  const last = seg.ranges[seg.ranges.length - 1];
  if (last && last.stream === range.stream && last.offset + last.length === range.offset) last.length += range.length;
  else seg.ranges.push({ ...range });
  c.output.storedOutputBytes += bytes;
  noteOutput(st, c, bytes);
  // R-O5: rolling retention drops whole old segments (never the one being written).
  while (c.output.storedOutputBytes > L2.outputPerCommand && c.output.segments.length > 1) dropOldestSegment(st, ctx, c);
  const client = st.clientOutput.get(c.clientId)!;
  while (client.bytes > L2.outputPerClient) {
    // The client's oldest retained output goes first (the index is in order of first output).
    let victim: ServerCommand | undefined;
    for (const uuid of client.uuids) {
      const x = st.commands.get(uuid)!;
      if (x.output.segments.length > (x === c ? 1 : 0)) {
        victim = x;
        break;
      }
    }
    if (!victim) break;
    dropOldestSegment(st, ctx, victim);
  }
}

function dropOldestSegment(st: ServerState, ctx: ServerCtx, c: ServerCommand): void {
  const seg = c.output.segments.shift()!;
  c.output.storedOutputBytes -= seg.bytes;
  noteOutput(st, c, -seg.bytes);
  // Segments go oldest first, so everything removed is one prefix of the output:
  // one cumulative marker per command (bounded), extended on every drop. Its
  // event range covers output events only; other events are never removed.
  let marker = c.output.retention[0];
  if (!marker) {
    marker = { firstSeq: seg.firstSeq, lastSeq: seg.lastSeq, ranges: [], at: ctx.wall };
    c.output.retention.push(marker);
  }
  marker.lastSeq = seg.lastSeq;
  marker.at = ctx.wall;
  for (const r of seg.ranges) {
    const same = marker.ranges.find((x) => x.stream === r.stream && x.offset + x.length === r.offset);
    if (same) same.length += r.length;
    else marker.ranges.push({ ...r });
  }
  recharge(st, c);
  ctx.persist(retentionRecord(c.uuid, marker));
  // Files go only once the marker that says so is durable.
  ctx.afterDurable({ kind: "drop_output", uuid: c.uuid, throughSeq: seg.lastSeq });
  ctx.emit({ type: "trace", event: "retention", detail: { uuid: c.uuid, firstSeq: seg.firstSeq, lastSeq: seg.lastSeq } });
}

/** Output files go only once the retention marker that says so is durable (dropOldestSegment). */
export function releaseDropOutput(ctx: ServerCtx, a: Extract<ServerDeferred, { kind: "drop_output" }>): void {
  ctx.emit({ type: "drop_output", uuid: a.uuid, throughSeq: a.throughSeq });
}
