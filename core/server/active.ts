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
//   expiries         every queued command's queue expiry in a heap (stale
//                    entries skipped: `expiryKept` names the live one): the
//                    pump expires exactly the due ones, oldest first, without
//                    walking the rest
//   wakes            per active command: its earliest timer (timers.ts
//                    `commandWake`), kept while the command did not change
//                    and the clock is below its `validUntil`; `dirty` names
//                    the commands to work out again, and the kept answers sit
//                    in two heaps (`wakeHeap` by timer, `recheck` by
//                    validUntil) so the next wake reads only the top
//   quiet            commands the pump found nothing to do for until they
//                    change: accepted or running ones with nothing to send
//                    (`quietOn`), skipped until touched, so a fleet where
//                    every agent runs a long command costs a step nothing for
//                    them; and dispatched ones sent on the current session,
//                    durably recorded, their redelivery not yet due
//                    (dispatch.ts), skipped until touched or until that
//                    redelivery comes due (timers.ts `wakeDueCommands`), so
//                    a fan-out to thousands of agents does not walk every
//                    unanswered dispatch on each CommandAccepted; and queued
//                    ones whose capacity retry is ahead and whose client has
//                    room, skipped until touched or until that retry comes
//                    due, so a fleet-wide CAPACITY rejection does not walk
//                    every command in backoff for a minute
//   unanswered       per client, its quiet dispatched commands: the pump
//                    counts them in the session's inflight without visiting
//                    them
//   parked           per client, queued commands the pump could not dispatch
//                    because the client had no room (`blocked`: drained, no
//                    free capacity, or maxInflightDispatches in flight), in a
//                    heap by submission order: skipped until the room grows,
//                    so a backlog of thousands behind a busy agent costs a
//                    step nothing
//   roomGrew         clients whose room may have grown: the pump releases
//                    their oldest parked commands, as many as the room holds
//                    (`release`), and no more
//   loud             per client, its active commands neither quiet nor parked
//                    (only clients with one or more): the clients the pump
//                    visits and the commands it looks at
//
// Every write of a field a command timer or `quietOn` reads (state, queue
// expiry, the dispatch times, the committed state, stdin writes, signals, a
// new session) calls `touch`, which also unparks the command. The room of a
// client grows only when its capacity report grows (onCapacity), its drain
// ends (setDraining), a dispatched command leaves `dispatched` (setState), or
// it registers: each calls `unpark`, which flags the client in `roomGrew`.
// `activeIndexInvariants` (invariants.ts) recomputes every kept wake,
// re-judges every quiet mark and every parked client, and fails if one went
// stale.
//
// A leaf besides server-types.ts: the modules that change commands import it.

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { LazyHeap } from "../lazy-heap.js";
import { EXPIRY_HEAP_SLACK, PARKED_HEAP_SLACK, WAKE_HEAP_SLACK } from "../limits.js";
import type { ActiveIndex, ClientRecord, KeptWake, ParkedQueue, ServerCommand, ServerState } from "./server-types.js";

/** The order of command timers (and of kept answers by them): the deadline, then submission order, then queue expiry before retry. */
export const byTimer = (a: TimerOrder, b: TimerOrder): number => a.at - b.at || a.seq - b.seq || a.sub - b.sub;
type TimerOrder = Pick<KeptWake, "at" | "seq" | "sub">;

export function newActiveIndex(): ActiveIndex {
  return {
    byClient: new Map(),
    seq: new Map(),
    nextSeq: 1,
    charged: 0,
    expiries: new LazyHeap<ExpiryEntry>(byExpiry, EXPIRY_HEAP_SLACK),
    expiryKept: new Map(),
    wakes: new Map(),
    quiet: new Set(),
    unanswered: new Map(),
    parked: new Map(),
    roomGrew: new Set(),
    loud: new Map(),
    dirty: new Set(),
    wakeHeap: new LazyHeap<KeptWake>(byTimer, WAKE_HEAP_SLACK),
    recheck: new LazyHeap<KeptWake>(byTimer, WAKE_HEAP_SLACK),
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
  ix.wakes.delete(c.uuid);
  ix.dirty.add(c.uuid);
  if (ix.expiryKept.delete(c.uuid)) keepExpiryBound(ix);
  if (!unquiet(ix, c) && !unparkOne(ix, c.clientId, c.uuid)) dropFrom(ix.loud, c.clientId, c.uuid);
}

/**
 * The pump found nothing to do for `c` until it changes: skip it until it is
 * touched (a dispatched one also once its redelivery comes due).
 */
export function markQuiet(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  if (!dropFrom(ix.loud, c.clientId, c.uuid)) return;
  ix.quiet.add(c.uuid);
  if (c.state === L.DISPATCHED) addTo(ix.unanswered, c.clientId, c.uuid);
}

/** Take `c` out of the quiet set (and out of its client's unanswered ones); whether it was quiet. */
function unquiet(ix: ActiveIndex, c: ServerCommand): boolean {
  if (!ix.quiet.delete(c.uuid)) return false;
  dropFrom(ix.unanswered, c.clientId, c.uuid);
  return true;
}

/** How many of `clientId`'s dispatched commands are quiet (each sent on its current session, none answered yet). */
export function quietUnanswered(st: ServerState, clientId: string): number {
  return st.activeIndex.unanswered.get(clientId)?.size ?? 0;
}

type ParkedEntry = { seq: number; uuid: string };
const bySeq = (a: ParkedEntry, b: ParkedEntry): number => a.seq - b.seq;

/** The pump could not dispatch queued `c` because its client had no room (`blocked`): skip it until its room grows. */
export function park(st: ServerState, c: ServerCommand): void {
  const ix = st.activeIndex;
  if (!dropFrom(ix.loud, c.clientId, c.uuid)) return;
  let q = ix.parked.get(c.clientId);
  if (!q) ix.parked.set(c.clientId, (q = { live: new Set(), heap: new LazyHeap<ParkedEntry>(bySeq, PARKED_HEAP_SLACK) }));
  q.live.add(c.uuid);
  q.heap.push({ seq: ix.seq.get(c.uuid)!, uuid: c.uuid });
  keepParkedBound(ix, q);
}

/** Past PARKED_HEAP_SLACK + 2 × parked commands (stale entries), the heap is rebuilt from those parked. */
function keepParkedBound(ix: ActiveIndex, q: ParkedQueue): void {
  q.heap.keepBound(q.live.size, () => [...q.live].map((uuid) => ({ seq: ix.seq.get(uuid)!, uuid })));
}

/** `clientId`'s room may have grown: the pump releases its oldest parked commands, as many as the room holds (`release`). */
export function unpark(st: ServerState, clientId: string): void {
  if (st.activeIndex.parked.has(clientId)) st.activeIndex.roomGrew.add(clientId);
}

/**
 * Hand the pump `clientId`'s oldest parked commands: every one up to and
 * including the `n`-th whose capacity retry is due (`due`), `n` being its
 * `places`: each due one takes a place, the others are skipped. The rest stay
 * parked: with that many due ones ahead of them they find no place in this
 * pass either.
 */
export function release(st: ServerState, clientId: string, n: number, due: (c: ServerCommand) => boolean): ServerCommand[] {
  const ix = st.activeIndex;
  ix.roomGrew.delete(clientId);
  const q = ix.parked.get(clientId);
  const out: ServerCommand[] = [];
  let placed = 0;
  while (q && q.live.size > 0 && placed < n) {
    const e = q.heap.pop();
    if (e === undefined) break;
    if (!unparkOne(ix, clientId, e.uuid)) continue; // stale: touched or ended since
    const c = st.commands.get(e.uuid)!;
    makeLoud(ix, clientId, e.uuid);
    out.push(c);
    if (due(c)) placed++;
  }
  return out;
}

/** Unmark one parked command (not made loud here); whether it was parked. */
function unparkOne(ix: ActiveIndex, clientId: string, uuid: string): boolean {
  const q = ix.parked.get(clientId);
  if (!q?.live.delete(uuid)) return false;
  if (q.live.size === 0) {
    ix.parked.delete(clientId);
    ix.roomGrew.delete(clientId);
  } else keepParkedBound(ix, q);
  return true;
}

/**
 * How many more of this client's queued commands can be dispatched on its
 * session now (0 or less: none, it is `blocked`): none while it is drained;
 * else its agent's free capacity (what it reported, less the `inflight`
 * dispatches unanswered on this session), at most maxInflightDispatches less
 * those in flight.
 */
export function places(st: ServerState, client: ClientRecord, inflight: number): number {
  if (client.draining) return 0;
  return Math.min(room(client.capacity) - inflight, st.config.limits.maxInflightDispatches - inflight);
}

export function blocked(st: ServerState, client: ClientRecord, inflight: number): boolean {
  return places(st, client, inflight) <= 0;
}

/** The capacity a report leaves for dispatches (before what is in flight): a grown room unparks. */
export function room(cl: ClientRecord["capacity"]): number {
  return cl.maxRunning + cl.maxQueued - cl.running - cl.queued;
}

function makeLoud(ix: ActiveIndex, clientId: string, uuid: string): void {
  addTo(ix.loud, clientId, uuid);
}

/** Add `uuid` to `clientId`'s set in `m` (creating it). */
function addTo(m: Map<string, Set<string>>, clientId: string, uuid: string): void {
  let set = m.get(clientId);
  if (!set) m.set(clientId, (set = new Set()));
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
  ix.wakes.delete(c.uuid);
  ix.dirty.add(c.uuid);
  if (unquiet(ix, c) || unparkOne(ix, c.clientId, c.uuid)) makeLoud(ix, c.clientId, c.uuid);
  if (c.state !== L.QUEUED) {
    if (ix.expiryKept.delete(c.uuid)) keepExpiryBound(ix);
  } else if (ix.expiryKept.get(c.uuid) !== c.queueExpiry) {
    ix.expiryKept.set(c.uuid, c.queueExpiry);
    ix.expiries.push({ at: c.queueExpiry, seq: ix.seq.get(c.uuid)!, uuid: c.uuid });
    keepExpiryBound(ix);
  }
}

/** Past EXPIRY_HEAP_SLACK + 2 × queued commands (stale entries), the expiry heap is rebuilt from the live ones. */
function keepExpiryBound(ix: ActiveIndex): void {
  ix.expiries.keepBound(ix.expiryKept.size, () => [...ix.expiryKept].map(([uuid, at]) => ({ at, seq: ix.seq.get(uuid)!, uuid })));
}

type ExpiryEntry = { at: number; seq: number; uuid: string };
const byExpiry = (a: ExpiryEntry, b: ExpiryEntry): number => a.at - b.at || a.seq - b.seq;

/** The earliest queue expiry of a queued command (Infinity: none); stale entries on top are dropped. */
export function nextQueueExpiry(st: ServerState): number {
  const ix = st.activeIndex;
  return ix.expiries.top((e) => ix.expiryKept.get(e.uuid) === e.at)?.at ?? Number.POSITIVE_INFINITY;
}

/** The queued commands whose queue expiry is at or before `now`, in submission order (their entries are taken out). */
export function takeExpired(st: ServerState, now: number): string[] {
  const ix = st.activeIndex;
  const due: ExpiryEntry[] = [];
  while (nextQueueExpiry(st) <= now) {
    const e = ix.expiries.pop()!;
    ix.expiryKept.delete(e.uuid);
    due.push(e);
  }
  return due.sort((a, b) => a.seq - b.seq).map((e) => e.uuid);
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
