// The active index: the server's non-terminal commands, kept so that a step
// costs what the clients with a ready session hold, not what every client
// holds. Without it every step (each output chunk of any command) walked every
// active command three times (pump, inflight count, next wake): 20,000 queued
// for clients that were offline made each step cost milliseconds.
//
//   st.active        every non-terminal uuid, in submission order (restore
//                    rebuilds it in row order, which is that order)
//   byClient         the same uuids per client, in the same order
//   seq              each one's place in that order (for merging clients)
//   charged          the metadata charge of the active commands (submit's budget)
//   expiryFloor      never above the queue expiry of any queued command: the
//                    pump looks for expired ones only once it is due
//   wakes            per client: the earliest command timer of its commands
//                    (timers.ts), reused while no command of the client changed
//                    (`touch`) and the clock is below its `validUntil`
//
// Every write of a field a command timer reads (state, queue expiry, the
// dispatch times, the committed state) calls `touch`; `activeInvariants`
// recomputes every reused wake and fails if one went stale.
//
// A leaf besides server-types.ts: the modules that change commands import it.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import type { ActiveIndex, ServerCommand, ServerState } from "./server-types.js";

export function newActiveIndex(): ActiveIndex {
  return { byClient: new Map(), seq: new Map(), nextSeq: 1, charged: 0, expiryFloor: Number.POSITIVE_INFINITY, wakes: new Map() };
}

/** `c` became active (submitted, or loaded from the store). */
export function activate(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  st.active.add(c.uuid);
  let set = ix.byClient.get(c.clientId);
  if (!set) ix.byClient.set(c.clientId, (set = new Set()));
  set.add(c.uuid);
  ix.seq.set(c.uuid, ix.nextSeq++);
  ix.charged += c.charged;
  touch(st, c);
}

/** `c` is no longer active (terminal, or its client's records dropped). */
export function deactivate(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  if (!st.active.delete(c.uuid)) return;
  const set = ix.byClient.get(c.clientId);
  set?.delete(c.uuid);
  if (set?.size === 0) ix.byClient.delete(c.clientId);
  ix.seq.delete(c.uuid);
  ix.charged -= c.charged;
  ix.wakes.delete(c.clientId);
}

/** A field a command timer reads changed (or is about to, within this step). */
export function touch(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  ix.wakes.delete(c.clientId);
  if (c.state === L.QUEUED && c.queueExpiry < ix.expiryFloor) ix.expiryFloor = c.queueExpiry;
}

/** How many active commands `clientId` has. */
export function activeCount(st: ServerState, clientId: string): number {
  return st.activeIndex.byClient.get(clientId)?.size ?? 0;
}

/** `c`'s place in submission order (active commands only). */
export function activeSeq(st: ServerState, c: ServerCommand): number {
  return st.activeIndex.seq.get(c.uuid)!;
}
