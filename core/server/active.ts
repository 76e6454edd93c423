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
//                    (timers.ts `clientWake`), kept while no command of the
//                    client changed and the clock is below its `validUntil`;
//                    `dirty` names the clients to work out again, and the kept
//                    answers sit in two heaps (`wakeHeap` by timer, `recheck`
//                    by validUntil) so the next wake reads only the top
//   quiet            accepted or running commands the pump found nothing to
//                    send for (`quietOn`): skipped until touched, so a fleet
//                    where every agent runs a long command costs a step
//                    nothing for them
//   parked           per client, queued commands the pump could not dispatch
//                    because the client had no room (`blocked`: drained, no
//                    free capacity, or maxInflightDispatches in flight):
//                    skipped until the room can have grown, so a backlog of
//                    thousands behind a busy agent costs a step nothing
//   loud             per client, its active commands neither quiet nor parked
//                    (only clients with one or more): the clients the pump
//                    visits and the commands it looks at
//
// Every write of a field a command timer or `quietOn` reads (state, queue
// expiry, the dispatch times, the committed state, stdin writes, signals, a
// new session) calls `touch`, which also unparks the command. The room of a
// client grows only when its capacity report grows (onCapacity), its drain
// ends (setDraining), or a dispatched command leaves `dispatched` (setState):
// each calls `unpark`, which makes all of the client's parked commands loud
// again, and the pump re-judges them in submission order.
// `activeIndexInvariants` (invariants.ts) recomputes every kept wake,
// re-judges every quiet mark and every parked client, and fails if one went
// stale.
//
// A leaf besides server-types.ts: the modules that change commands import it.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import TinyQueue from "tinyqueue";
import type { ActiveIndex, ClientRecord, KeptWake, ServerCommand, ServerState } from "./server-types.js";

/** The order of command timers (and of kept answers by them): the deadline, then submission order, then queue expiry before retry. */
export const byTimer = (a: TimerOrder, b: TimerOrder): number => a.at - b.at || a.seq - b.seq || a.sub - b.sub;
type TimerOrder = Pick<KeptWake, "at" | "seq" | "sub">;

export function newActiveIndex(): ActiveIndex {
  return {
    byClient: new Map(),
    seq: new Map(),
    nextSeq: 1,
    charged: 0,
    expiryFloor: Number.POSITIVE_INFINITY,
    wakes: new Map(),
    quiet: new Set(),
    parked: new Map(),
    loud: new Map(),
    dirty: new Set(),
    wakeHeap: new TinyQueue<KeptWake>([], byTimer),
    recheck: new TinyQueue<KeptWake>([], byTimer),
    wakeNow: Number.NEGATIVE_INFINITY,
  };
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
  makeLoud(ix, c.clientId, c.uuid);
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
  ix.dirty.add(c.clientId);
  if (!ix.quiet.delete(c.uuid) && !dropFrom(ix.parked, c.clientId, c.uuid)) dropFrom(ix.loud, c.clientId, c.uuid);
}

/** The pump found nothing to send for `c` (quietOn): skip it until it is touched. */
export function markQuiet(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  if (!dropFrom(ix.loud, c.clientId, c.uuid)) return;
  ix.quiet.add(c.uuid);
}

/** The pump could not dispatch queued `c` because its client had no room (`blocked`): skip it until `unpark`. */
export function park(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  if (!dropFrom(ix.loud, c.clientId, c.uuid)) return;
  let set = ix.parked.get(c.clientId);
  if (!set) ix.parked.set(c.clientId, (set = new Set()));
  set.add(c.uuid);
}

/** `clientId`'s room may have grown: the pump looks at its parked commands again, in submission order. */
export function unpark(st: ServerState, clientId: string): void {
  const ix = st.activeIndex;
  const set = ix.parked.get(clientId);
  if (!set) return;
  ix.parked.delete(clientId);
  for (const uuid of set) makeLoud(ix, clientId, uuid);
}

/**
 * No queued command of this client can be dispatched on `conn` now: it is
 * drained, its agent has no free capacity (what it reported, less the
 * `inflight` dispatches unanswered on this session), or maxInflightDispatches
 * are in flight.
 */
export function blocked(st: ServerState, client: ClientRecord, inflight: number): boolean {
  return client.draining || room(client.capacity) - inflight <= 0 || inflight >= st.config.limits.maxInflightDispatches;
}

/** The capacity a report leaves for dispatches (before what is in flight): a grown room unparks. */
export function room(cl: ClientRecord["capacity"]): number {
  return cl.maxRunning + cl.maxQueued - cl.running - cl.queued;
}

function makeLoud(ix: ActiveIndex, clientId: string, uuid: string): void {
  let set = ix.loud.get(clientId);
  if (!set) ix.loud.set(clientId, (set = new Set()));
  set.add(uuid);
}

/** Remove `uuid` from `clientId`'s set in `m` (dropping an emptied set); whether it was there. */
function dropFrom(m: Map<string, Set<string>>, clientId: string, uuid: string): boolean {
  const set = m.get(clientId);
  if (!set?.delete(uuid)) return false;
  if (set.size === 0) m.delete(clientId);
  return true;
}

/** A field a command timer reads changed (or is about to, within this step). */
export function touch(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  ix.wakes.delete(c.clientId);
  ix.dirty.add(c.clientId);
  if (ix.quiet.delete(c.uuid) || dropFrom(ix.parked, c.clientId, c.uuid)) makeLoud(ix, c.clientId, c.uuid);
  if (c.state === L.QUEUED && c.queueExpiry < ix.expiryFloor) ix.expiryFloor = c.queueExpiry;
}

/**
 * Nothing for the pump to do for `c` on a session of generation `g`: accepted
 * or running, its script uploaded, every stdin write and signal already sent
 * on this session. Visiting it would send nothing and change nothing.
 */
export function quietOn(c: ServerCommand, g: number): boolean {
  if (c.state !== L.ACCEPTED && c.state !== L.RUNNING) return false;
  if (c.script.bytes && !c.script.committed) return false;
  const q = c.stdin.queue;
  if (q.length > 0 && q[q.length - 1]!.seq > c.stdin.sentThrough) return false;
  for (const s of c.signals) if (s.sentOn !== g) return false;
  return true;
}

/** How many active commands `clientId` has. */
export function activeCount(st: ServerState, clientId: string): number {
  return st.activeIndex.byClient.get(clientId)?.size ?? 0;
}

/** `c`'s place in submission order (active commands only). */
export function activeSeq(st: ServerState, c: ServerCommand): number {
  return st.activeIndex.seq.get(c.uuid)!;
}
