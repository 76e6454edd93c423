// The server's named timers (core/server/timers.ts): the wake the server asks
// for is its earliest timer, and the state says which timer that is.
import { describe, expect, it } from "vitest";
import { Code } from "../../../core/errors.js";
import { DEFAULT_QUEUE_EXPIRY_MS, HEARTBEAT_PING_AFTER_MS } from "../../../core/limits.js";
import { CommandLifecycle as L } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { lifecycle, of, ServerRig, T0 } from "../../support/server-rig.js";

const lastWake = (r: ServerRig) => of(r.log, "wake").at(-1);

// The timer's name (`r.st.wake.timer`) is internal by design: the wake effect
// carries only its instant (a name would enter the simulator's hashed trace).
// Each test checks the instant on the wake effect and, where it does something
// a peer or an operator sees, what happens at that instant; the name stays an
// internal read, marked "internal: the timer's name".

describe("server timers", () => {
  it("R-H1: with one session and nothing else, the wake is that connection's heartbeat", () => {
    const r = new ServerRig();
    const c = r.connect();
    expect(r.st.wake?.timer).toEqual({ kind: "heartbeat", conn: c }); // internal: the timer's name
    expect(r.st.wake?.at).toBe(lastWake(r)?.at); // internal: the state's instant is the effect's
    expect(lastWake(r)!.at).toBeLessThanOrEqual(r.now + HEARTBEAT_PING_AFTER_MS);
  });

  it("R-D1: a queued command with no session wakes the server at its queue expiry", () => {
    const r = new ServerRig();
    r.connect();
    r.step({ type: "conn_closed", conn: 1, reason: "gone" });
    r.submit("a", "q1");
    expect(r.st.wake).toEqual({ at: T0 + DEFAULT_QUEUE_EXPIRY_MS, timer: { kind: "queue_expiry", uuid: "q1" } }); // internal: the timer's name
    expect(lastWake(r)?.at).toBe(T0 + DEFAULT_QUEUE_EXPIRY_MS);
    // At that instant the command expires.
    r.now = T0 + DEFAULT_QUEUE_EXPIRY_MS - 1;
    r.step({ type: "tick" });
    expect(r.command("q1").state).toBe("queued");
    r.now = T0 + DEFAULT_QUEUE_EXPIRY_MS;
    r.step({ type: "tick" });
    expect(r.command("q1").state).toBe("expired");
  });

  it("R-D3: a command requeued by a capacity rejection names its retry", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.submit("a", "q1");
    r.accept(c, "q1", false, Code.CAPACITY, "full");
    r.step({ type: "conn_closed", conn: c, reason: "gone" }); // no heartbeat left: the retry is the first timer
    const retryAt = r.cmd("q1").dispatch.nextAttemptAt; // internal: when the retry is due (no view shows it)
    expect(retryAt).toBeGreaterThan(r.now);
    expect(r.st.wake).toEqual({ at: retryAt, timer: { kind: "capacity_retry", uuid: "q1" } }); // internal: the timer's name
    expect(lastWake(r)?.at).toBe(retryAt);
  });

  it("R-F5: an unused authorization names its expiry when it is the earliest timer", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    r.connect();
    r.hello(r.open(), "a", "intruder"); // refused: recorded as the pending claim
    r.control({ op: "authorize", requestId: "r1", clientId: "a", instanceId: "intruder" });
    expect(r.st.wake).toEqual({ at: T0 + 1_000, timer: { kind: "authorization_expiry", clientId: "a" } }); // internal: the timer's name
    expect(lastWake(r)?.at).toBe(T0 + 1_000);
    expect(r.client("a")!.authorizedInstanceId).toBe("intruder");
    // At that instant the unused authorization is gone from ListClients.
    r.now = T0 + 1_000;
    r.step({ type: "tick" });
    expect(r.client("a")!.authorizedInstanceId).toBe("");
  });

  it("no timer, no wake: a server with nothing to do asks for none", () => {
    const r = new ServerRig();
    r.step({ type: "tick" });
    expect(r.st.wake).toBeNull(); // internal: no timer named
    expect(of(r.log, "wake")).toEqual([]);
  });

  it("R-D2: a dispatch with no answer names its redelivery; at that instant it is sent again and the wake moves on", () => {
    const r = new ServerRig({ redeliveryMs: 1_000 });
    const c = r.connect();
    r.submit("a", "d1");
    const at = T0 + 1_000; // dispatched at once, at T0
    expect(r.st.wake).toEqual({ at, timer: { kind: "redelivery", uuid: "d1" } }); // internal: the timer's name
    expect(lastWake(r)?.at).toBe(at);
    const sent = () => r.sent(r.log, c, "commandDispatch").length;
    const before = sent();
    r.now = at;
    r.step({ type: "tick" });
    expect(sent()).toBe(before + 1); // the redelivery
    expect(lastWake(r)!.at).toBeGreaterThan(at); // not the same instant again
    expect(r.st.wake!.timer).toEqual({ kind: "redelivery", uuid: "d1" }); // internal: the timer's name
    // Its session gone, the deadline passing is nothing to wake for: no wake at the same instant over and over.
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    r.now = r.cmd("d1").dispatch.dispatchedAt + 1_000; // setup: the redelivery's next deadline
    const fx = r.step({ type: "tick" });
    expect(
      of(fx, "wake").every((w) => w.at > r.now),
      JSON.stringify(of(fx, "wake")),
    ).toBe(true);
    expect(r.st.wake === null || r.st.wake.at > r.now, JSON.stringify(r.st.wake)).toBe(true); // internal: nor a timer named for now
  });

  it("history: the oldest finished command names its age limit as the wake", () => {
    const r = new ServerRig({ historyMs: 5_000 });
    const c = r.connect();
    r.running(c, "h1");
    r.event(c, "h1", 2, lifecycle(L.SUCCEEDED, { exitCode: 0 }));
    r.step({ type: "conn_closed", conn: c, reason: "gone" }); // no heartbeat left
    expect(r.command("h1").state).toBe("succeeded");
    expect(r.st.wake).toEqual({ at: r.now + 5_000, timer: { kind: "history_age", uuid: "h1" } }); // internal: the timer's name
    expect(lastWake(r)?.at).toBe(r.now + 5_000);
    // At that instant it is pruned.
    r.now += 5_000;
    r.step({ type: "tick" });
    expect(r.notFound("h1")).toBe("command h1 ended succeeded and was pruned from history");
  });
});
