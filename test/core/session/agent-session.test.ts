// Direct tests of the agent session reducer's guards and timers (targets from
// the mutation report): stale connection numbers are ignored, each phase has
// the deadline it should, and the stable reset happens once, at 60 s.
import { describe, expect, it } from "vitest";
import {
  agentSessionInvariants,
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
import { rngFromSeed } from "../../../core/rng.js";

function established(now = 1_000): { s: AgentSession; acts: SessionAction[] } {
  const s = newAgentSession();
  const acts: SessionAction[] = [];
  sessionConnect(s, now, acts);
  sessionTransportOpen(s, s.conn, now, acts);
  sessionWelcome(s, s.conn, { sessionId: "x", generation: 4 }, { major: 1, minor: 0 }, now, acts);
  return { s, acts };
}

describe("agent session reducer", () => {
  it("R-H6 R-F7: events of another connection number are ignored in every phase", () => {
    const rng = rngFromSeed(1);
    const s = newAgentSession();
    const acts: SessionAction[] = [];
    sessionConnect(s, 0, acts);
    sessionTransportOpen(s, s.conn + 1, 0, acts); // not ours
    expect(s.phase).toBe("connecting");
    sessionTransportOpen(s, s.conn, 0, acts);
    expect(s.phase).toBe("registering");
    sessionTransportOpen(s, s.conn, 0, acts); // a second open does nothing
    expect(acts.filter((a) => a.type === "send_hello")).toHaveLength(1);
    sessionTransportClosed(s, s.conn + 7, "stale", 10, rng, acts);
    expect(s.phase).toBe("registering");
    s.hb.lastInbound = 0;
    sessionActivity(s, s.conn + 7, 5_000);
    expect(s.hb.lastInbound).toBe(0);
    sessionActivity(s, s.conn, 5_000);
    expect(s.hb.lastInbound).toBe(5_000);
    agentSessionInvariants(s);
  });

  it("R-H1 R-H4: each phase has its deadline: backoff retry, heartbeat, stable reset, none when idle", () => {
    const rng = rngFromSeed(2);
    const idle = newAgentSession();
    expect(sessionDeadline(idle)).toBeNull();
    const { s } = established(1_000);
    expect(sessionDeadline(s)).toBe(1_000 + 10_000); // ping before the 60 s reset
    s.hb.lastInbound = 55_000;
    expect(sessionDeadline(s)).toBe(61_000); // the stable reset comes first
    const acts: SessionAction[] = [];
    sessionTick(s, 61_000, rng, acts);
    expect(s.stableReset).toBe(true);
    expect(sessionDeadline(s)).toBe(65_000);
    sessionTransportClosed(s, s.conn, "gone", 70_000, rng, acts);
    expect(s.phase).toBe("backoff");
    expect(sessionDeadline(s)).toBe(s.retryAt);
    expect(s.retryAt).toBeGreaterThanOrEqual(70_000);
    expect(s.retryAt).toBeLessThan(71_000); // attempt 0 after the reset: [0, 1 s)
  });

  it("R-H4: the stable reset happens exactly at 60 s and only once; failing from idle or backoff does nothing", () => {
    const rng = rngFromSeed(3);
    const { s } = established(0);
    s.attempt = 5;
    const acts: SessionAction[] = [];
    s.hb.lastInbound = 59_999;
    sessionTick(s, 59_999, rng, acts);
    expect(s.attempt).toBe(5);
    sessionTick(s, 60_000, rng, acts);
    expect(s.attempt).toBe(0);
    s.attempt = 3; // failures after the reset count again
    sessionTick(s, 60_500, rng, acts);
    expect(s.attempt).toBe(3);
    sessionFail(s, "bye", 61_000, rng, acts);
    const closes = acts.filter((a) => a.type === "close").length;
    sessionFail(s, "again", 61_001, rng, acts);
    expect(acts.filter((a) => a.type === "close").length).toBe(closes);
    const idle = newAgentSession();
    sessionFail(idle, "x", 0, rng, acts);
    expect(idle.phase).toBe("idle");
  });

  it("R-H2: in registering the heartbeat also applies; a dead registration backs off", () => {
    const rng = rngFromSeed(4);
    const s = newAgentSession();
    const acts: SessionAction[] = [];
    sessionConnect(s, 0, acts);
    sessionTransportOpen(s, s.conn, 0, acts);
    sessionTick(s, 9_999, rng, acts);
    expect(acts.some((a) => a.type === "ping")).toBe(false);
    sessionTick(s, 10_000, rng, acts);
    expect(acts.filter((a) => a.type === "ping")).toHaveLength(1);
    sessionTick(s, 30_000, rng, acts);
    expect(s.phase).toBe("backoff");
    expect(acts.some((a) => a.type === "lost")).toBe(true);
    expect(s.maxGeneration).toBe(0);
  });

  it("R-F2: the highest welcomed generation is remembered", () => {
    const { s } = established(0);
    expect(s.maxGeneration).toBe(4);
    const rng = rngFromSeed(5);
    const acts: SessionAction[] = [];
    sessionTransportClosed(s, s.conn, "x", 1, rng, acts);
    sessionTick(s, s.retryAt, rng, acts);
    sessionTransportOpen(s, s.conn, s.retryAt, acts);
    sessionWelcome(s, s.conn, { sessionId: "y", generation: 9 }, { major: 1, minor: 0 }, s.retryAt, acts);
    expect(s.maxGeneration).toBe(9);
    agentSessionInvariants(s);
  });
});
