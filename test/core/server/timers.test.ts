// The server's named timers (core/server/timers.ts): the wake the server asks
// for is its earliest timer, and the state says which timer that is.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { DEFAULT_QUEUE_EXPIRY_MS, HEARTBEAT_PING_AFTER_MS } from "../../../core/limits.js";
import { of, ServerRig, T0 } from "../../support/server-rig.js";

const lastWake = (r: ServerRig) => of(r.log, "wake").at(-1);

describe("server timers", () => {
  it("R-H1: with one session and nothing else, the wake is that connection's heartbeat", () => {
    const r = new ServerRig();
    const c = r.connect();
    expect(r.st.wake?.timer).toEqual({ kind: "heartbeat", conn: c });
    expect(r.st.wake?.at).toBe(lastWake(r)?.at);
    expect(r.st.wake!.at).toBeLessThanOrEqual(r.now + HEARTBEAT_PING_AFTER_MS);
  });

  it("R-D1: a queued command with no session wakes the server at its queue expiry", () => {
    const r = new ServerRig();
    r.connect();
    r.step({ type: "conn_closed", conn: 1, reason: "gone" });
    r.submit("a", "q1");
    expect(r.st.wake).toEqual({ at: T0 + DEFAULT_QUEUE_EXPIRY_MS, timer: { kind: "queue_expiry", uuid: "q1" } });
    expect(lastWake(r)?.at).toBe(T0 + DEFAULT_QUEUE_EXPIRY_MS);
  });

  it("R-D3: a command requeued by a capacity rejection names its retry", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "q1");
    r.accept(c, "q1", false, Code.CAPACITY, "full");
    r.step({ type: "conn_closed", conn: c, reason: "gone" }); // no heartbeat left: the retry is the first timer
    const retryAt = r.cmd("q1").dispatch.nextAttemptAt;
    expect(retryAt).toBeGreaterThan(r.now);
    expect(r.st.wake).toEqual({ at: retryAt, timer: { kind: "capacity_retry", uuid: "q1" } });
    expect(lastWake(r)?.at).toBe(retryAt);
  });

  it("R-F5: an unused authorization names its expiry when it is the earliest timer", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    r.connect();
    r.hello(r.open(), "a", "intruder"); // refused: recorded as the pending claim
    r.control({ op: "authorize", requestId: "r1", clientId: "a", instanceId: "intruder" });
    expect(r.st.wake).toEqual({ at: T0 + 1_000, timer: { kind: "authorization_expiry", clientId: "a" } });
  });

  it("no timer, no wake: a server with nothing to do asks for none", () => {
    const r = new ServerRig();
    r.step({ type: "tick" });
    expect(r.st.wake).toBeNull();
    expect(of(r.log, "wake")).toEqual([]);
  });
});
