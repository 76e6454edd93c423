// Heartbeat (R-H1, R-H2): the same algorithm on both endpoints. Any valid
// inbound frame (including a WebSocket Pong) is activity. 10 s without
// activity: send one Ping. 30 s without activity: the session is dead.

import { HEARTBEAT_DEAD_AFTER_MS, HEARTBEAT_PING_AFTER_MS } from "../limits.js";

export interface Heartbeat {
  lastInbound: number;
  /** A ping was sent since the last inbound activity. */
  pinged: boolean;
}

export function newHeartbeat(now: number): Heartbeat {
  return { lastInbound: now, pinged: false };
}

export function onActivity(hb: Heartbeat, now: number): void {
  if (now > hb.lastInbound) hb.lastInbound = now;
  hb.pinged = false;
}

export type HeartbeatVerdict = "ok" | "ping" | "dead";

/** What is due at `now`. Call only when `now >= heartbeatDeadline(hb)`. */
export function heartbeatDue(hb: Heartbeat, now: number): HeartbeatVerdict {
  const idle = now - hb.lastInbound;
  if (idle >= HEARTBEAT_DEAD_AFTER_MS) return "dead";
  if (idle >= HEARTBEAT_PING_AFTER_MS && !hb.pinged) {
    hb.pinged = true;
    return "ping";
  }
  return "ok";
}

export function heartbeatDeadline(hb: Heartbeat): number {
  return hb.pinged ? hb.lastInbound + HEARTBEAT_DEAD_AFTER_MS : hb.lastInbound + HEARTBEAT_PING_AFTER_MS;
}
