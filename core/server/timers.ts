// The server's timers: every deadline the server may be woken for, named
// (server-types.ts `Timer`), and the next one (`nextWake`). The pump asks for
// a `wake` at the earliest and records which timer it is for in `st.wake`
// (the effect itself stays `{ type: "wake", at }`: the simulator hashes
// effects, and the name must not change a trace hash). A tick at or after
// that time is the timer firing; the tick handler does what every due timer
// asks (heartbeats, authorization expiry) and the pump does the rest (queue
// expiry, retries, redelivery, pruning).

import { CommandLifecycle as L } from "../../protos/gen/rvbox/v1/common_pb.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import { heartbeatDeadline } from "../session/heartbeat.js";
import type { ServerState, Timer } from "./server-types.js";
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
  for (const conn of st.conns.values()) take(heartbeatDeadline(conn.hb), { kind: "heartbeat", conn: conn.conn });
  for (const client of st.clients.values()) {
    if (client.authorization) take(client.authorization.expiresAt, { kind: "authorization_expiry", clientId: client.clientId });
  }
  // Command timers count only when still ahead (one already due is handled by this step's pump).
  for (const uuid of st.active) {
    const c = st.commands.get(uuid)!;
    if (isTerminal(c.state)) continue;
    if (c.state === L.QUEUED) {
      if (c.queueExpiry > now) take(c.queueExpiry, { kind: "queue_expiry", uuid });
      if (!retryDue(c, now) && c.dispatch.nextAttemptAt > now) take(c.dispatch.nextAttemptAt, { kind: "capacity_retry", uuid });
    } else {
      const at = redeliveryAt(st, c);
      if (at !== null && at > now) take(at, { kind: "redelivery", uuid });
    }
  }
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
