// The server's timers: every deadline the server may be woken for, named
// (server-types.ts `Timer`), and the next one (`nextWake`). The pump asks for
// a `wake` at the earliest and records which timer it is for in `st.wake`
// (the effect itself stays `{ type: "wake", at }`: the simulator hashes
// effects, and the name must not change a trace hash). A tick at or after
// that time is the timer firing; the tick handler does what every due timer
// asks (heartbeats, authorization expiry) and the pump does the rest (queue
// expiry, retries, redelivery, pruning).

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { CAPACITY_RETRY_CAP_MS } from "../limits.js";
import type { CommandWake, KeptWake, ServerState, Timer, WakeAnswer } from "./server-types.js";
import { byTimer, touch } from "./active.js";
import { earliestHeartbeat } from "./heartbeats.js";
import { authorizedClients, inClientOrder } from "./clients.js";
import { redeliveryAt, retryDue } from "./dispatch.js";

export interface Wake {
  /** Deadline clock. */
  at: number;
  timer: Timer;
}

/**
 * The earliest timer (null: nothing to wake for). `backlog`: pruning stopped
 * at its per-step bound and wants to go on at once. Of timers due at the same
 * instant the first in this order is named: prune backlog or history age,
 * heartbeats, authorizations, then commands (queue expiry, capacity retry,
 * redelivery) in submission order.
 */
export function nextWake(st: ServerState, now: number, backlog: boolean): Wake | null {
  let best: Wake | null = null;
  const take = (at: number, timer: Timer): void => {
    if (best === null || at < best.at) best = { at, timer };
  };
  if (backlog) take(now, { kind: "prune_backlog" });
  else {
    const h = historyAge(st, now);
    if (h) take(h.at, h.timer);
  }
  const hb = earliestHeartbeat(st);
  if (hb) take(hb.at, { kind: "heartbeat", conn: hb.conn });
  // Of authorizations expiring at the same instant the first client record names the timer (as a walk over them would).
  const held = authorizedClients(st);
  const at = Math.min(...held.map((c) => c.authorization!.expiresAt));
  const [auth] = inClientOrder(
    st,
    held.filter((c) => c.authorization!.expiresAt === at),
  );
  if (auth) take(at, { kind: "authorization_expiry", clientId: auth.clientId });
  // Command timers count only when still ahead (one already due is handled by this step's pump).
  // Each command's answer is reused while it did not change (active.ts `touch`) and the clock is below its validUntil.
  const cmd = earliestCommandWake(st, now);
  if (cmd) take(cmd.at, cmd.timer);
  return best;
}

/**
 * When the oldest history entry reaches historyMs (null: never by age, or
 * already due: then it waits only for its last persist, and the durable input
 * that settles it runs the next step). historyMs 0: every entry is already
 * due, so null.
 */
export function historyAge(st: ServerState, now: number): Wake | null {
  for (const [uuid, endedAt] of st.history) {
    const due = endedAt + st.config.limits.historyMs;
    return due > now ? { at: due, timer: { kind: "history_age", uuid } } : null;
  }
  return null;
}

/**
 * The earliest command timer ahead of `now`. Each active command's answer
 * (`commandWake`) is kept until the command is touched (then it
 * is `dirty`) or the clock reaches its validUntil; the kept answers sit in a
 * heap by earliest timer (ties: submission order) and, when they stop holding
 * before that timer, in a second heap by that instant. A step works out again
 * only the commands that changed or ran out, and reads the top: a client's
 * backlog of thousands is not walked when one of its commands changes.
 */
function earliestCommandWake(st: ServerState, now: number): CommandWake | null {
  const ix = st.activeIndex;
  if (now < ix.wakeNow) for (const uuid of st.active) ix.dirty.add(uuid);
  ix.wakeNow = now;
  for (const uuid of ix.dirty) refresh(st, uuid, now);
  ix.dirty.clear();
  // A command that ended shrinks the bound without a push: hold it here too.
  keepBound(st);
  for (let e = ix.recheck.peek(); e !== undefined && (ix.wakes.get(e.uuid) !== e.cw || e.at <= now); e = ix.recheck.peek()) {
    ix.recheck.pop();
    if (ix.wakes.get(e.uuid) === e.cw) refresh(st, e.uuid, now);
  }
  for (let e = ix.wakeHeap.peek(); e !== undefined; e = ix.wakeHeap.peek()) {
    if (ix.wakes.get(e.uuid) !== e.cw) ix.wakeHeap.pop();
    else if (e.at > now) return e.cw.best;
    else {
      ix.wakeHeap.pop();
      refresh(st, e.uuid, now);
    }
  }
  return null;
}

/**
 * Kept command timers that came due by `now`, before the pump looks at the
 * loud commands: a quiet command among them (a dispatch whose redelivery is
 * due, a queued one whose capacity retry is) is touched, so it is loud again
 * and the pump visits it; any other's answer is worked out again, as the
 * next wake would (earliestCommandWake).
 */
export function wakeDueCommands(st: ServerState, now: number): void {
  const ix = st.activeIndex;
  // A deadline clock that went back can make a capacity retry due at once
  // (retryDue: implausibly far ahead), with no timer of its own: wake them all.
  if (now < ix.wakeNow) for (const uuid of [...ix.quiet]) touch(st, st.commands.get(uuid)!);
  for (let e = ix.wakeHeap.peek(); e !== undefined; e = ix.wakeHeap.peek()) {
    if (ix.wakes.get(e.uuid) !== e.cw) ix.wakeHeap.pop();
    else if (e.at > now) return;
    else {
      ix.wakeHeap.pop();
      if (ix.quiet.has(e.uuid)) touch(st, st.commands.get(e.uuid)!);
      else refresh(st, e.uuid, now);
    }
  }
}

/** Work out `uuid`'s answer afresh and keep it (none once it is no longer active). */
function refresh(st: ServerState, uuid: string, now: number): void {
  const ix = st.activeIndex;
  if (!st.active.has(uuid)) {
    ix.wakes.delete(uuid);
    return;
  }
  const cw = commandWake(st, uuid, now);
  ix.wakes.set(uuid, cw);
  const b = cw.best;
  if (b) ix.wakeHeap.push({ at: b.at, seq: b.seq, sub: b.sub, uuid, cw });
  if (cw.validUntil < (b?.at ?? Number.POSITIVE_INFINITY)) ix.recheck.push({ at: cw.validUntil, seq: 0, sub: 0, uuid, cw });
  keepBound(st);
}

/** Past WAKE_HEAP_SLACK + 2 × active commands (stale entries), the heaps are rebuilt from the kept answers. */
function keepBound(st: ServerState): void {
  const ix = st.activeIndex;
  const n = st.active.size;
  if (ix.wakeHeap.over(n) || ix.recheck.over(n)) rebuildKept(st);
}

function rebuildKept(st: ServerState): void {
  const ix = st.activeIndex;
  const byTimerEntries: KeptWake[] = [];
  const recheckEntries: KeptWake[] = [];
  for (const [uuid, cw] of ix.wakes) {
    const b = cw.best;
    if (b) byTimerEntries.push({ at: b.at, seq: b.seq, sub: b.sub, uuid, cw });
    if (cw.validUntil < (b?.at ?? Number.POSITIVE_INFINITY)) recheckEntries.push({ at: cw.validUntil, seq: 0, sub: 0, uuid, cw });
  }
  ix.wakeHeap.rebuild(byTimerEntries);
  ix.recheck.rebuild(recheckEntries);
}

/**
 * The earliest timer of command `uuid` ahead of `now` (queue expiry, capacity
 * retry, redelivery), and until when that answer holds while the command does
 * not change: its first such deadline, or the instant a capacity retry
 * counted as due because it lies implausibly far ahead (retryDue) stops being so.
 */
export function commandWake(st: ServerState, uuid: string, now: number): WakeAnswer {
  let best: CommandWake | null = null;
  let validUntil = Number.POSITIVE_INFINITY;
  const take = (at: number, sub: number, timer: Timer): void => {
    const w = { at, seq, sub, timer };
    if (best === null || byTimer(w, best) < 0) best = w;
    if (at < validUntil) validUntil = at;
  };
  const c = st.commands.get(uuid)!; // active: the index holds no terminal command
  const seq = st.activeIndex.seq.get(uuid)!;
  if (c.state === L.QUEUED) {
    if (c.queueExpiry > now) take(c.queueExpiry, 0, { kind: "queue_expiry", uuid });
    const next = c.dispatch.nextAttemptAt;
    if (!retryDue(c, now) && next > now) take(next, 1, { kind: "capacity_retry", uuid });
    else if (next - now > CAPACITY_RETRY_CAP_MS && next - CAPACITY_RETRY_CAP_MS < validUntil) validUntil = next - CAPACITY_RETRY_CAP_MS;
  } else {
    const at = redeliveryAt(st, c);
    if (at !== null && at > now) take(at, 0, { kind: "redelivery", uuid });
  }
  return { best, computedAt: now, validUntil };
}
