// Heartbeat deadlines (R-H1, R-H2) of every connection, earliest first, so
// that neither the next wake nor a tick walks every connection: with thousands
// of idle agents connected, each of their pongs (a step) and each heartbeat
// tick walked them all.
//
// A min-heap of {at, order, conn} with lazy deletion (core/lazy-heap.ts),
// ordered by deadline and then by the order the connections opened (the order
// a walk over `st.conns` visits them in, so ties resolve as they did). A
// connection's deadline moves on every inbound frame; the new one is pushed
// (`track`) and the old entry is left behind, stale: an entry counts only
// while its connection is open, opened as that entry's `order`, and still has
// that deadline. Between steps the heap holds at most HEARTBEAT_HEAP_SLACK +
// 2 * connections entries (earliestHeartbeat, which every step's wake asks,
// enforces it).

import { assert } from "../errors.js";
import { LazyHeap } from "../lazy-heap.js";
import { HEARTBEAT_HEAP_SLACK } from "../limits.js";
import { heartbeatDeadline } from "../session/heartbeat.js";
import type { ConnState, HeartbeatEntry, HeartbeatIndex, ServerState } from "./server-types.js";

const byDeadline = (a: HeartbeatEntry, b: HeartbeatEntry): number => a.at - b.at || a.order - b.order;

export function newHeartbeatIndex(): HeartbeatIndex {
  return { heap: new LazyHeap(byDeadline, HEARTBEAT_HEAP_SLACK), nextOrder: 1 };
}

/** The next opening order (for a connection being opened). */
export function nextConnOrder(st: ServerState): number {
  return st.heartbeats.nextOrder++;
}

/** Record `conn`'s current deadline (after it opened, or after its heartbeat changed). */
export function track(st: ServerState, conn: ConnState): void {
  const ix = st.heartbeats;
  ix.heap.push({ at: heartbeatDeadline(conn.hb), order: conn.hbOrder, conn: conn.conn });
  keepBound(st);
}

function live(st: ServerState, e: HeartbeatEntry): ConnState | undefined {
  const c = st.conns.get(e.conn);
  return c && c.hbOrder === e.order && heartbeatDeadline(c.hb) === e.at ? c : undefined;
}

function keepBound(st: ServerState): void {
  st.heartbeats.heap.keepBound(st.conns.size, () => [...st.conns.values()].map((c) => ({ at: heartbeatDeadline(c.hb), order: c.hbOrder, conn: c.conn })));
}

/** The earliest heartbeat deadline of an open connection (null: none open). */
export function earliestHeartbeat(st: ServerState): HeartbeatEntry | null {
  keepBound(st);
  return st.heartbeats.heap.top((e) => live(st, e) !== undefined) ?? null;
}

/**
 * The open connections whose deadline is at or before `now`, in the order they
 * opened; their entries leave the heap (the caller acts on each, then `track`s
 * those still open).
 */
export function dueHeartbeats(st: ServerState, now: number): ConnState[] {
  const heap = st.heartbeats.heap;
  const due = new Map<number, ConnState>();
  for (let e = heap.peek(); e !== undefined && e.at <= now; e = heap.peek()) {
    heap.pop();
    const c = live(st, e);
    if (c) due.set(c.hbOrder, c);
  }
  return [...due.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => c);
}

/** Every open connection has a live entry with its current deadline, and the heap is within its bound. */
export function heartbeatInvariants(st: ServerState): void {
  const ix = st.heartbeats;
  assert(ix.heap.length <= ix.heap.bound(st.conns.size), `heartbeat heap holds ${ix.heap.length} entries for ${st.conns.size} connections`);
  const seen = new Set<number>();
  for (const e of ix.heap.entries()) if (live(st, e)) seen.add(e.conn);
  for (const c of st.conns.values()) {
    assert(c.hbOrder > 0 && c.hbOrder < ix.nextOrder, `conn ${c.conn}: opening order ${c.hbOrder} out of range`);
    assert(seen.has(c.conn), `conn ${c.conn}: its heartbeat deadline ${heartbeatDeadline(c.hb)} is not in the heartbeat heap`);
  }
}
