// Agent session reducer: R-F1, R-F2, R-F7 (agent side), R-H1, R-H2, R-H4, R-H6.
//
// Theory of operation
// -------------------
// One connection at a time. Phases:
//
//   idle --start--> connecting --transport_open--> registering --welcome--> established
//     ^                 |                              |                        |
//     |                 +------ transport_closed / dead heartbeat / fatal ------+
//     |                                   v
//     +------------------------------- backoff --(timer)--> connecting
//
// Each connection gets a fresh connection number; frames and closes of any
// other number are stale and ignored. In `registering` the agent has sent
// ClientHello and accepts only ServerWelcome (or an AgentError). A welcome
// gives the fence (session_id, generation); from then on every envelope the
// agent sends carries it and every envelope it receives must carry it exactly,
// else CODE_STALE_GENERATION and the session closes (R-F7).
//
// Backoff is full jitter over [0, min(60 s, 1 s * 2^attempt)), drawn from the
// state's PRNG (R-H4). The attempt counter resets once a session has been
// established for 60 s. Heartbeat: 10 s silent -> Ping, 30 s -> dead (R-H1/2).

import { assert, unreachable } from "../errors.js";
import { BACKOFF_STABLE_RESET_MS } from "../limits.js";
import type { RngState } from "../rng.js";
import { backoffDelay } from "./backoff.js";
import { heartbeatDeadline, heartbeatDue, newHeartbeat, onActivity, type Heartbeat } from "./heartbeat.js";
import type { Fence } from "../codec/frame-codec.js";
import type { Version } from "../codec/version.js";

export type AgentSessionPhase = "idle" | "connecting" | "registering" | "established" | "backoff";

export interface AgentSession {
  phase: AgentSessionPhase;
  /** Current connection number (0: none). */
  conn: number;
  lastConn: number;
  attempt: number;
  retryAt: number;
  establishedAt: number;
  hb: Heartbeat;
  fence: Fence | null;
  selected: Version | null;
  /** Highest generation ever welcomed (generations only grow). */
  maxGeneration: number;
  /** The backoff was reset for this session after it stayed up 60 s. */
  stableReset: boolean;
}

/** The session phase table: from each phase, the phases it may move to (the diagram above). */
export const SESSION_PHASES = {
  idle: ["connecting"],
  connecting: ["registering", "backoff"],
  registering: ["established", "backoff"],
  established: ["backoff"],
  backoff: ["connecting"],
} as const satisfies Record<AgentSessionPhase, readonly AgentSessionPhase[]>;

/** The one writer of the session phase. */
function setSessionPhase(s: AgentSession, to: AgentSessionPhase): void {
  assert((SESSION_PHASES[s.phase] as readonly AgentSessionPhase[]).includes(to), `session phase ${s.phase} -> ${to} is not in the phase table`);
  s.phase = to;
}

export function newAgentSession(): AgentSession {
  return {
    phase: "idle",
    conn: 0,
    lastConn: 0,
    attempt: 0,
    retryAt: 0,
    establishedAt: 0,
    hb: newHeartbeat(0),
    fence: null,
    selected: null,
    maxGeneration: 0,
    stableReset: false,
  };
}

export type SessionAction =
  | { type: "connect"; conn: number }
  | { type: "send_hello"; conn: number }
  | { type: "ping"; conn: number }
  | { type: "close"; conn: number; reason: string }
  | { type: "lost"; conn: number; reason: string }
  | { type: "established"; conn: number };

/** Begin connecting (from idle or when a backoff expires). */
export function sessionConnect(s: AgentSession, now: number, acts: SessionAction[]): void {
  assert(s.phase === "idle" || s.phase === "backoff", `connect from ${s.phase}`);
  s.lastConn++;
  s.conn = s.lastConn;
  setSessionPhase(s, "connecting");
  s.hb = newHeartbeat(now);
  s.fence = null;
  acts.push({ type: "connect", conn: s.conn });
}

export function sessionTransportOpen(s: AgentSession, conn: number, now: number, acts: SessionAction[]): void {
  if (conn !== s.conn || s.phase !== "connecting") return;
  setSessionPhase(s, "registering");
  s.hb = newHeartbeat(now);
  acts.push({ type: "send_hello", conn });
}

/** Any valid inbound frame or pong on the current connection. */
export function sessionActivity(s: AgentSession, conn: number, now: number): void {
  if (conn === s.conn && (s.phase === "registering" || s.phase === "established")) onActivity(s.hb, now);
}

export function sessionWelcome(s: AgentSession, conn: number, fence: Fence, selected: Version, now: number, acts: SessionAction[]): void {
  assert(conn === s.conn && s.phase === "registering", "welcome outside registering");
  setSessionPhase(s, "established");
  s.fence = fence;
  s.selected = selected;
  s.establishedAt = now;
  s.stableReset = false;
  if (fence.generation > s.maxGeneration) s.maxGeneration = fence.generation;
  acts.push({ type: "established", conn });
}

/**
 * The connection ended (closed by the peer or the network, or by us through
 * `sessionFail`). Schedules the next attempt.
 */
export function sessionTransportClosed(s: AgentSession, conn: number, reason: string, now: number, rng: RngState, acts: SessionAction[]): void {
  if (conn !== s.conn || s.phase === "idle" || s.phase === "backoff") return;
  enterBackoff(s, reason, now, rng, acts);
}

/** We decided the session is over: close it and back off. */
export function sessionFail(s: AgentSession, reason: string, now: number, rng: RngState, acts: SessionAction[]): void {
  if (s.phase === "idle" || s.phase === "backoff") return;
  acts.push({ type: "close", conn: s.conn, reason });
  enterBackoff(s, reason, now, rng, acts);
}

function enterBackoff(s: AgentSession, reason: string, now: number, rng: RngState, acts: SessionAction[]): void {
  const conn = s.conn;
  if (s.phase === "established" && now - s.establishedAt >= BACKOFF_STABLE_RESET_MS) s.attempt = 0;
  const delay = backoffDelay(rng, s.attempt);
  s.attempt = Math.min(s.attempt + 1, 64);
  setSessionPhase(s, "backoff");
  s.retryAt = now + delay;
  s.fence = null;
  s.conn = 0;
  acts.push({ type: "lost", conn, reason });
}

/** Wait in backoff at least until `at` (the server said this instance was replaced). */
export function sessionHoldOff(s: AgentSession, at: number): void {
  if (s.phase !== "backoff") return;
  s.retryAt = Math.max(s.retryAt, at);
  s.attempt = 64;
}

/** Timer work: heartbeat, stable reset, backoff expiry. */
export function sessionTick(s: AgentSession, now: number, rng: RngState, acts: SessionAction[]): void {
  if (s.phase === "backoff" && now >= s.retryAt) {
    sessionConnect(s, now, acts);
    return;
  }
  if (s.phase === "established" && !s.stableReset && now - s.establishedAt >= BACKOFF_STABLE_RESET_MS) {
    s.attempt = 0;
    s.stableReset = true;
  }
  if (s.phase === "registering" || s.phase === "established") {
    if (now < heartbeatDeadline(s.hb)) return;
    const v = heartbeatDue(s.hb, now);
    if (v === "ping") acts.push({ type: "ping", conn: s.conn });
    else if (v === "dead") sessionFail(s, "heartbeat: no inbound activity for 30 s", now, rng, acts);
  }
}

/** The session's named timers (R-H1, R-H2, R-H4). */
export type SessionTimer =
  /** The backoff is over: connect again. */
  | { timer: "reconnect" }
  /** No inbound activity: a Ping is due (10 s), or the session is dead (30 s). */
  | { timer: "heartbeat"; due: "ping" | "dead" }
  /** The session stayed up 60 s: the backoff attempt counter resets. */
  | { timer: "backoff_reset" };

/** The session's earliest timer, or null when none runs (idle, connecting). */
export function sessionWake(s: AgentSession): { at: number; timer: SessionTimer } | null {
  switch (s.phase) {
    case "backoff":
      return { at: s.retryAt, timer: { timer: "reconnect" } };
    case "registering":
      return heartbeatWake(s);
    case "established": {
      const hb = heartbeatWake(s);
      const reset = s.establishedAt + BACKOFF_STABLE_RESET_MS;
      return s.stableReset || hb.at <= reset ? hb : { at: reset, timer: { timer: "backoff_reset" } };
    }
    case "idle":
    case "connecting":
      return null;
    default:
      return unreachable(s.phase, "agent session phase");
  }
}

function heartbeatWake(s: AgentSession): { at: number; timer: SessionTimer } {
  return { at: heartbeatDeadline(s.hb), timer: { timer: "heartbeat", due: s.hb.pinged ? "dead" : "ping" } };
}

export function sessionDeadline(s: AgentSession): number | null {
  return sessionWake(s)?.at ?? null;
}

/** Does an inbound envelope carry exactly the current fence? */
export function fenceMatches(s: AgentSession, sessionId: string, generation: bigint): boolean {
  return s.fence !== null && s.fence.sessionId === sessionId && BigInt(s.fence.generation) === generation;
}

export function agentSessionInvariants(s: AgentSession): void {
  assert((s.conn === 0) === (s.phase === "idle" || s.phase === "backoff"), `conn ${s.conn} in phase ${s.phase}`);
  assert((s.fence !== null) === (s.phase === "established"), "fence only while established");
  assert(s.conn <= s.lastConn, "conn beyond lastConn");
  if (s.fence) assert(s.fence.generation <= s.maxGeneration, "fence generation beyond max");
}
