// The agent session reducer pinned exactly: every phase guard with an input in
// the wrong phase, stale connection numbers, the 60 s stable reset at the
// boundary (1 ms before, at, after), the exact backoff arithmetic (the delay is
// the PRNG's draw, so the same seed reproduces it), every deadline, the fence
// check and each invariant with a corrupted state.
import { describe, expect, it } from "vitest";
import {
  agentSessionInvariants,
  fenceMatches,
  newAgentSession,
  sessionActivity,
  sessionConnect,
  sessionDeadline,
  sessionFail,
  sessionTick,
  sessionTransportClosed,
  sessionTransportOpen,
  sessionWelcome,
  type AgentSession,
  type SessionAction,
} from "../../../core/session/agent-session.js";
import { backoffDelay } from "../../../core/session/backoff.js";
import { heartbeatDeadline, heartbeatDue, newHeartbeat, onActivity } from "../../../core/session/heartbeat.js";
import { rngFromSeed, type RngState } from "../../../core/rng.js";
import { InvariantViolation } from "../../../core/errors.js";

const T0 = 1_700_000_000_000;
const V = { major: 1, minor: 0 };

/** The delay the session will draw next, without consuming the session's PRNG. */
function nextDelay(rng: RngState, attempt: number): number {
  return backoffDelay({ ...rng }, attempt);
}

function connecting(now = T0): { s: AgentSession; acts: SessionAction[] } {
  const s = newAgentSession();
  const acts: SessionAction[] = [];
  sessionConnect(s, now, acts);
  return { s, acts };
}

function registering(now = T0): { s: AgentSession; acts: SessionAction[] } {
  const r = connecting(now);
  sessionTransportOpen(r.s, r.s.conn, now, r.acts);
  return r;
}

function established(now = T0, generation = 3): { s: AgentSession; acts: SessionAction[] } {
  const r = registering(now);
  sessionWelcome(r.s, r.s.conn, { sessionId: "sid", generation }, V, now, r.acts);
  return r;
}

function snapshot(s: AgentSession): AgentSession {
  return structuredClone(s);
}

describe("agent session: initial state and connect", () => {
  it("R-H4: a new session is idle with no connection, no fence, attempt 0 and no stable reset yet", () => {
    expect(newAgentSession()).toEqual({
      phase: "idle",
      conn: 0,
      lastConn: 0,
      attempt: 0,
      retryAt: 0,
      establishedAt: 0,
      hb: { lastInbound: 0, pinged: false },
      fence: null,
      selected: null,
      maxGeneration: 0,
      stableReset: false,
    });
    expect(sessionDeadline(newAgentSession())).toBeNull();
  });

  it("R-H6: connect takes a fresh connection number, resets the heartbeat and asks the runner to connect", () => {
    const { s, acts } = connecting(T0 + 5);
    expect(s.phase).toBe("connecting");
    expect(s.conn).toBe(1);
    expect(s.lastConn).toBe(1);
    expect(s.hb).toEqual({ lastInbound: T0 + 5, pinged: false });
    expect(acts).toEqual([{ type: "connect", conn: 1 }]);
    agentSessionInvariants(s);
  });

  it("R-H6: connect is only legal from idle or backoff; from any live phase it is a programming error", () => {
    expect(() => sessionConnect(connecting().s, T0, [])).toThrow(/connect from connecting/);
    expect(() => sessionConnect(registering().s, T0, [])).toThrow(/connect from registering/);
    expect(() => sessionConnect(established().s, T0, [])).toThrow(/connect from established/);
    expect(() => sessionConnect(established().s, T0, [])).toThrow(InvariantViolation);
  });
});

describe("agent session: phase guards and stale connection numbers", () => {
  it("R-H6: transport_open moves only the current connection from connecting to registering and asks for the hello", () => {
    const { s } = connecting(T0);
    const acts: SessionAction[] = [];
    sessionTransportOpen(s, s.conn, T0 + 7, acts);
    expect(s.phase).toBe("registering");
    expect(s.hb).toEqual({ lastInbound: T0 + 7, pinged: false });
    expect(acts).toEqual([{ type: "send_hello", conn: 1 }]);
  });

  it("R-H6: transport_open is ignored when idle, in backoff and when established (no hello, no phase change)", () => {
    const idle = newAgentSession();
    const acts: SessionAction[] = [];
    sessionTransportOpen(idle, 0, T0, acts);
    expect(idle).toEqual(newAgentSession());

    const { s } = established(T0);
    const rng = rngFromSeed(11);
    sessionTransportClosed(s, s.conn, "x", T0 + 1, rng, []);
    expect(s.phase).toBe("backoff");
    const before = snapshot(s);
    sessionTransportOpen(s, 0, T0 + 2, acts); // conn 0 is "current" in backoff
    expect(s).toEqual(before);

    const e = established(T0).s;
    const eBefore = snapshot(e);
    sessionTransportOpen(e, e.conn, T0 + 3, acts);
    expect(e).toEqual(eBefore);
    expect(acts).toEqual([]);
  });

  it("R-H1: activity counts only on the current connection while registering or established", () => {
    // connecting: no heartbeat runs, activity changes nothing
    const c = connecting(T0).s;
    sessionActivity(c, c.conn, T0 + 5_000);
    expect(c.hb.lastInbound).toBe(T0);
    // established: the current connection's activity moves the heartbeat and clears the ping
    const e = established(T0).s;
    e.hb.pinged = true;
    sessionActivity(e, e.conn, T0 + 4_000);
    expect(e.hb).toEqual({ lastInbound: T0 + 4_000, pinged: false });
    // a stale connection number does not
    e.hb.pinged = true;
    sessionActivity(e, e.conn + 1, T0 + 9_000);
    expect(e.hb).toEqual({ lastInbound: T0 + 4_000, pinged: true });
    // backoff (conn 0) and idle: nothing
    const rng = rngFromSeed(3);
    sessionTransportClosed(e, e.conn, "x", T0 + 9_500, rng, []);
    const hb = { ...e.hb };
    sessionActivity(e, 0, T0 + 9_900);
    expect(e.hb).toEqual(hb);
    const idle = newAgentSession();
    sessionActivity(idle, 0, T0);
    expect(idle.hb).toEqual({ lastInbound: 0, pinged: false });
  });

  it("R-F2: a welcome outside registering, or for another connection, is a programming error", () => {
    expect(() => sessionWelcome(connecting().s, 1, { sessionId: "x", generation: 1 }, V, T0, [])).toThrow(/welcome outside registering/);
    const r = registering().s;
    expect(() => sessionWelcome(r, r.conn + 1, { sessionId: "x", generation: 1 }, V, T0, [])).toThrow(/welcome outside registering/);
    const e = established().s;
    expect(() => sessionWelcome(e, e.conn, { sessionId: "x", generation: 9 }, V, T0, [])).toThrow(InvariantViolation);
  });

  it("R-F2: the welcome installs fence and version, records the time, clears the stable reset and reports established", () => {
    const { s } = registering(T0);
    s.stableReset = true;
    const acts: SessionAction[] = [];
    sessionWelcome(s, s.conn, { sessionId: "abc", generation: 5 }, { major: 1, minor: 2 }, T0 + 40, acts);
    expect(s.phase).toBe("established");
    expect(s.fence).toEqual({ sessionId: "abc", generation: 5 });
    expect(s.selected).toEqual({ major: 1, minor: 2 });
    expect(s.establishedAt).toBe(T0 + 40);
    expect(s.stableReset).toBe(false);
    expect(s.maxGeneration).toBe(5);
    expect(acts).toEqual([{ type: "established", conn: 1 }]);
  });

  it("R-F2: the highest welcomed generation never goes down", () => {
    const { s } = established(T0, 9);
    const rng = rngFromSeed(4);
    sessionTransportClosed(s, s.conn, "x", T0 + 1, rng, []);
    sessionTick(s, s.retryAt, rng, []);
    sessionTransportOpen(s, s.conn, s.retryAt, []);
    sessionWelcome(s, s.conn, { sessionId: "older", generation: 9 }, V, s.retryAt, []);
    expect(s.maxGeneration).toBe(9);
    sessionTransportClosed(s, s.conn, "x", s.retryAt + 1, rng, []);
    sessionTick(s, s.retryAt, rng, []);
    sessionTransportOpen(s, s.conn, s.retryAt, []);
    // The session reducer itself does not judge the fence (the node does); it keeps the max.
    sessionWelcome(s, s.conn, { sessionId: "low", generation: 2 }, V, s.retryAt, []);
    expect(s.maxGeneration).toBe(9);
    expect(s.fence!.generation).toBe(2);
  });

  it("R-H6: transport_closed is ignored when idle, in backoff, and for a stale connection number", () => {
    const rng = rngFromSeed(5);
    const idle = newAgentSession();
    const acts: SessionAction[] = [];
    sessionTransportClosed(idle, 0, "x", T0, rng, acts);
    expect(idle).toEqual(newAgentSession());

    const { s } = established(T0);
    sessionTransportClosed(s, s.conn, "first", T0 + 1, rng, acts);
    const before = snapshot(s);
    const rngBefore = { ...rng };
    sessionTransportClosed(s, 0, "second", T0 + 2, rng, acts);
    expect(s).toEqual(before);
    expect(rng).toEqual(rngBefore); // no second backoff draw
    expect(acts.filter((a) => a.type === "lost")).toHaveLength(1);

    const e = established(T0).s;
    const eBefore = snapshot(e);
    sessionTransportClosed(e, e.conn + 1, "stale", T0 + 3, rng, acts);
    expect(e).toEqual(eBefore);
  });

  it("R-H4: transport_closed while still connecting backs off (the attempt failed)", () => {
    const { s } = connecting(T0);
    const rng = rngFromSeed(6);
    const delay = nextDelay(rng, 0);
    const acts: SessionAction[] = [];
    sessionTransportClosed(s, s.conn, "ECONNREFUSED", T0 + 10, rng, acts);
    expect(s.phase).toBe("backoff");
    expect(s.retryAt).toBe(T0 + 10 + delay);
    expect(s.attempt).toBe(1);
    expect(acts).toEqual([{ type: "lost", conn: 1, reason: "ECONNREFUSED" }]);
  });

  it("R-H2: sessionFail closes the current connection and then reports it lost; in idle and backoff it does nothing", () => {
    const { s } = registering(T0);
    const rng = rngFromSeed(7);
    const acts: SessionAction[] = [];
    sessionFail(s, "bad", T0 + 1, rng, acts);
    expect(acts).toEqual([
      { type: "close", conn: 1, reason: "bad" },
      { type: "lost", conn: 1, reason: "bad" },
    ]);
    expect(s.phase).toBe("backoff");
    expect(s.conn).toBe(0);
    expect(s.fence).toBeNull();
    const before = snapshot(s);
    const rngBefore = { ...rng };
    sessionFail(s, "again", T0 + 2, rng, acts);
    expect(s).toEqual(before);
    expect(rng).toEqual(rngBefore);
    expect(acts).toHaveLength(2);
    const idle = newAgentSession();
    sessionFail(idle, "x", T0, rng, acts);
    expect(idle).toEqual(newAgentSession());
    expect(acts).toHaveLength(2);
  });
});

describe("agent session: backoff arithmetic and the stable reset", () => {
  it("R-H4: the retry time is now plus exactly the jittered delay of the current attempt; attempts count up and stop at 64", () => {
    const rng = rngFromSeed(12);
    const { s } = connecting(T0);
    let now = T0;
    for (let i = 0; i < 3; i++) {
      const d = nextDelay(rng, i);
      sessionTransportClosed(s, s.conn, "refused", now, rng, []);
      expect(s.retryAt).toBe(now + d);
      expect(s.attempt).toBe(i + 1);
      now = s.retryAt;
      sessionTick(s, now, rng, []);
    }
    s.attempt = 64;
    const d = nextDelay(rng, 64);
    sessionTransportClosed(s, s.conn, "refused", now + 5, rng, []);
    expect(s.attempt).toBe(64);
    expect(s.retryAt).toBe(now + 5 + d);
    s.attempt = 63;
    sessionTick(s, s.retryAt, rng, []);
    sessionTransportClosed(s, s.conn, "refused", s.retryAt, rng, []);
    expect(s.attempt).toBe(64);
  });

  it("R-H4: the backoff expires exactly at retryAt: 1 ms before nothing happens, at retryAt a new connection starts", () => {
    const rng = rngFromSeed(13);
    const { s } = established(T0);
    sessionTransportClosed(s, s.conn, "x", T0 + 1_000, rng, []);
    s.retryAt = T0 + 2_500; // pin the deadline for the boundary check
    expect(sessionDeadline(s)).toBe(T0 + 2_500);
    const acts: SessionAction[] = [];
    sessionTick(s, T0 + 2_499, rng, acts);
    expect(s.phase).toBe("backoff");
    expect(acts).toEqual([]);
    sessionTick(s, T0 + 2_500, rng, acts);
    expect(s.phase).toBe("connecting");
    expect(s.conn).toBe(2);
    expect(acts).toEqual([{ type: "connect", conn: 2 }]);
  });

  it("R-H4: a session closed exactly 60 s after its welcome resets the attempts; 1 ms earlier it does not", () => {
    for (const [up, expectAttempt] of [
      [59_999, 6],
      [60_000, 1],
      [60_001, 1],
    ] as const) {
      const rng = rngFromSeed(14);
      const { s } = established(T0);
      s.attempt = 5;
      const d = nextDelay(rng, expectAttempt === 1 ? 0 : 5);
      sessionTransportClosed(s, s.conn, "drop", T0 + up, rng, []);
      expect(s.attempt, `closed after ${up} ms`).toBe(expectAttempt);
      expect(s.retryAt).toBe(T0 + up + d);
    }
  });

  it("R-H4: the stable-reset rule looks at the current session only: a failed registration long after an old welcome still counts up", () => {
    const rng = rngFromSeed(15);
    const { s } = established(T0);
    sessionTransportClosed(s, s.conn, "early drop", T0 + 1_000, rng, []); // up 1 s: no reset
    expect(s.attempt).toBe(1);
    expect(s.stableReset).toBe(false);
    const later = T0 + 500_000;
    sessionTick(s, later, rng, []);
    sessionTransportOpen(s, s.conn, later, []);
    expect(s.phase).toBe("registering");
    // A tick while registering, long after the old welcome, does not reset the attempts ...
    sessionTick(s, later + 5_000, rng, []);
    expect(s.attempt).toBe(1);
    expect(s.stableReset).toBe(false);
    // ... and neither does failing the registration.
    const d = nextDelay(rng, 1);
    sessionTransportClosed(s, s.conn, "refused", later + 6_000, rng, []);
    expect(s.attempt).toBe(2);
    expect(s.retryAt).toBe(later + 6_000 + d);
  });

  it("R-H4: the tick resets the attempts exactly at 60 s of uptime, once, and the deadline then drops the reset time", () => {
    const rng = rngFromSeed(16);
    const { s } = established(T0);
    s.attempt = 7;
    s.hb.lastInbound = T0 + 59_000;
    expect(sessionDeadline(s)).toBe(T0 + 60_000);
    sessionTick(s, T0 + 59_999, rng, []);
    expect(s.attempt).toBe(7);
    expect(s.stableReset).toBe(false);
    sessionTick(s, T0 + 60_000, rng, []);
    expect(s.attempt).toBe(0);
    expect(s.stableReset).toBe(true);
    expect(sessionDeadline(s)).toBe(T0 + 69_000);
  });
});

describe("agent session: heartbeat and deadlines per phase", () => {
  it("R-H1 R-H2: while registering the deadline is the ping time, then the dead time; a dead registration closes", () => {
    const rng = rngFromSeed(17);
    const { s } = registering(T0);
    expect(sessionDeadline(s)).toBe(T0 + 10_000);
    const acts: SessionAction[] = [];
    sessionTick(s, T0 + 9_999, rng, acts);
    expect(acts).toEqual([]);
    sessionTick(s, T0 + 10_000, rng, acts);
    expect(acts).toEqual([{ type: "ping", conn: 1 }]);
    expect(sessionDeadline(s)).toBe(T0 + 30_000);
    sessionTick(s, T0 + 29_999, rng, acts);
    expect(acts).toHaveLength(1);
    sessionTick(s, T0 + 30_000, rng, acts);
    expect(acts.slice(1)).toEqual([
      { type: "close", conn: 1, reason: "heartbeat: no inbound activity for 30 s" },
      { type: "lost", conn: 1, reason: "heartbeat: no inbound activity for 30 s" },
    ]);
    expect(s.phase).toBe("backoff");
  });

  it("R-H1: an established session pings once at 10 s of silence and dies at 30 s", () => {
    const rng = rngFromSeed(18);
    const { s } = established(T0);
    s.stableReset = true; // only the heartbeat remains
    const acts: SessionAction[] = [];
    sessionTick(s, T0 + 10_000, rng, acts);
    sessionTick(s, T0 + 20_000, rng, acts);
    expect(acts).toEqual([{ type: "ping", conn: 1 }]);
    expect(sessionDeadline(s)).toBe(T0 + 30_000);
    sessionTick(s, T0 + 30_000, rng, acts);
    expect(s.phase).toBe("backoff");
    expect(acts.map((a) => a.type)).toEqual(["ping", "close", "lost"]);
  });

  it("R-H6: the connect attempt itself is timed by the transport: connecting has no core deadline and ticks leave it connecting", () => {
    const rng = rngFromSeed(19);
    const { s } = connecting(T0);
    expect(sessionDeadline(s)).toBeNull();
    const acts: SessionAction[] = [];
    sessionTick(s, T0 + 10 * 60_000, rng, acts);
    expect(s.phase).toBe("connecting");
    expect(acts).toEqual([]);
    const idle = newAgentSession();
    sessionTick(idle, T0, rng, acts);
    expect(idle).toEqual(newAgentSession());
    expect(acts).toEqual([]);
  });

  it("R-H4: while established and before the reset the deadline is the earlier of heartbeat and reset time", () => {
    const { s } = established(T0);
    expect(sessionDeadline(s)).toBe(T0 + 10_000);
    s.hb.lastInbound = T0 + 50_000;
    expect(sessionDeadline(s)).toBe(T0 + 60_000);
    s.hb.pinged = true;
    s.hb.lastInbound = T0 + 20_000;
    expect(sessionDeadline(s)).toBe(T0 + 50_000);
    s.stableReset = true;
    s.hb.lastInbound = T0 + 70_000;
    expect(sessionDeadline(s)).toBe(T0 + 100_000);
  });

  it("R-H1: activity never moves the heartbeat back in time but always clears the ping", () => {
    const hb = newHeartbeat(T0);
    expect(hb).toEqual({ lastInbound: T0, pinged: false });
    expect(heartbeatDeadline(hb)).toBe(T0 + 10_000);
    expect(heartbeatDue(hb, T0 + 10_000)).toBe("ping");
    expect(hb.pinged).toBe(true);
    expect(heartbeatDeadline(hb)).toBe(T0 + 30_000);
    expect(heartbeatDue(hb, T0 + 29_999)).toBe("ok");
    onActivity(hb, T0 - 5);
    expect(hb).toEqual({ lastInbound: T0, pinged: false });
    onActivity(hb, T0 + 1);
    expect(hb.lastInbound).toBe(T0 + 1);
    expect(heartbeatDue(hb, T0 + 1 + 30_000)).toBe("dead");
  });
});

describe("agent session: fence check", () => {
  it("R-F7: an envelope matches only with exactly the current session id and generation", () => {
    expect(fenceMatches(connecting().s, "", 0n)).toBe(false);
    const { s } = established(T0, 4);
    expect(fenceMatches(s, "sid", 4n)).toBe(true);
    expect(fenceMatches(s, "sid", 5n)).toBe(false);
    expect(fenceMatches(s, "sid", 3n)).toBe(false);
    expect(fenceMatches(s, "other", 4n)).toBe(false);
    expect(fenceMatches(s, "", 4n)).toBe(false);
  });
});

describe("agent session: invariants catch every corruption they check", () => {
  it("accepts every reachable phase", () => {
    agentSessionInvariants(newAgentSession());
    agentSessionInvariants(connecting().s);
    agentSessionInvariants(registering().s);
    agentSessionInvariants(established().s);
  });

  it("a connection number in idle or backoff, or none in a live phase, is refused", () => {
    const idle = newAgentSession();
    idle.conn = 1;
    idle.lastConn = 1;
    expect(() => agentSessionInvariants(idle)).toThrow(/conn 1 in phase idle/);
    const b = established().s;
    sessionTransportClosed(b, b.conn, "x", T0, rngFromSeed(1), []);
    b.conn = 1;
    expect(() => agentSessionInvariants(b)).toThrow(/conn 1 in phase backoff/);
    const c = connecting().s;
    c.conn = 0;
    expect(() => agentSessionInvariants(c)).toThrow(/conn 0 in phase connecting/);
  });

  it("a fence outside established, or none while established, is refused", () => {
    const r = registering().s;
    r.fence = { sessionId: "x", generation: 0 };
    expect(() => agentSessionInvariants(r)).toThrow(/fence only while established/);
    const e = established().s;
    e.fence = null;
    expect(() => agentSessionInvariants(e)).toThrow(/fence only while established/);
  });

  it("a connection number beyond the last one handed out is refused", () => {
    const e = established().s;
    e.conn = e.lastConn + 1;
    expect(() => agentSessionInvariants(e)).toThrow(/conn beyond lastConn/);
    e.conn = e.lastConn; // equal is fine
    agentSessionInvariants(e);
  });

  it("a fence generation above the highest welcomed one is refused", () => {
    const e = established(T0, 4).s;
    e.fence = { sessionId: "sid", generation: 5 };
    expect(() => agentSessionInvariants(e)).toThrow(/fence generation beyond max/);
    e.fence = { sessionId: "sid", generation: 4 };
    agentSessionInvariants(e);
  });
});
