// Exact-behaviour tests of session/heartbeat.ts: the heartbeat state machine: every branch, at its edges
// (targets taken from the mutation report, docs/MUTATION.md).
import { describe, expect, it } from "vitest";
import { heartbeatDeadline, heartbeatDue, newHeartbeat, onActivity } from "../../../core/session/heartbeat.js";
import { HEARTBEAT_DEAD_AFTER_MS, HEARTBEAT_PING_AFTER_MS } from "../../../core/limits.js";

describe("heartbeat state machine", () => {
  const P = HEARTBEAT_PING_AFTER_MS;
  const D = HEARTBEAT_DEAD_AFTER_MS;

  it("R-H1: a new heartbeat has not pinged and is first due 10 s after its start", () => {
    expect(newHeartbeat(500)).toEqual({ lastInbound: 500, pinged: false });
    expect(heartbeatDeadline(newHeartbeat(500))).toBe(500 + P);
    expect([P, D]).toEqual([10_000, 30_000]);
  });

  it("R-H1: one ping exactly at 10 s idle (not 1 ms before), then ok until 30 s idle; the deadline moves to 30 s", () => {
    const hb = newHeartbeat(1000);
    expect(heartbeatDue(hb, 1000 + P - 1)).toBe("ok");
    expect(hb.pinged).toBe(false);
    expect(heartbeatDue(hb, 1000 + P)).toBe("ping");
    expect(hb.pinged).toBe(true);
    expect(heartbeatDeadline(hb)).toBe(1000 + D);
    expect(heartbeatDue(hb, 1000 + P)).toBe("ok");
    expect(heartbeatDue(hb, 1000 + D - 1)).toBe("ok");
  });

  it("R-H2: exactly 30 s idle is dead, pinged or not", () => {
    const hb = newHeartbeat(0);
    expect(heartbeatDue(hb, D - 1)).toBe("ping");
    expect(heartbeatDue(hb, D)).toBe("dead");
    expect(heartbeatDue(newHeartbeat(0), D)).toBe("dead");
  });

  it("R-H1: activity clears the ping and moves the deadline forward, never backward", () => {
    const hb = newHeartbeat(1000);
    heartbeatDue(hb, 1000 + P);
    onActivity(hb, 5000);
    expect(hb).toEqual({ lastInbound: 5000, pinged: false });
    expect(heartbeatDeadline(hb)).toBe(5000 + P);
    heartbeatDue(hb, 5000 + P);
    expect(hb.pinged).toBe(true);
    // A late-arriving older timestamp clears the ping but keeps the newer time.
    onActivity(hb, 4000);
    expect(hb).toEqual({ lastInbound: 5000, pinged: false });
    onActivity(hb, 5000);
    expect(hb).toEqual({ lastInbound: 5000, pinged: false });
    onActivity(hb, 5001);
    expect(hb.lastInbound).toBe(5001);
  });
});
