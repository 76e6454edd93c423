// Heartbeat deadlines and authorizations kept apart from the walk over every
// connection and client (core/server/heartbeats.ts, clients.ts
// `authorizedClients`): pings, deaths and expiries come when they did, in the
// order they did, while a step no longer visits every connection or client.
import { describe, expect, it } from "vitest";
import { serverStep } from "../../../core/index.js";
import { HEARTBEAT_DEAD_AFTER_MS, HEARTBEAT_HEAP_SLACK, HEARTBEAT_PING_AFTER_MS } from "../../../core/limits.js";
import { heartbeatInvariants } from "../../../core/server/heartbeats.js";
import type { ServerInput } from "../../../core/server/server-types.js";
import { testPorts } from "../../support/ports.js";
import { of, ServerRig, T0 } from "../../support/server-rig.js";
import { walked } from "../../support/walked.js";

const raw = (r: ServerRig, input: ServerInput) => serverStep(r.st, input, r.now, { ports: testPorts }, r.now);

describe("heartbeat deadlines", () => {
  it("R-H1: an agent's activity step visits no other connection or client, however many are connected", () => {
    const visits: number[] = [];
    for (const n of [5, 200]) {
      const r = new ServerRig();
      r.store = false;
      const conns = Array.from({ length: n }, (_, i) => r.connect(`h${i}`));
      r.now += 1;
      let v = 0;
      for (let i = 0; i < 20; i++) {
        r.now += 1;
        v += walked(r.st.conns, () => walked(r.st.clients, () => void raw(r, { type: "activity", conn: conns[i % n]! })));
      }
      visits.push(v);
    }
    // Before: every step walked every connection twice and every client once (over 12,000 here).
    expect(visits).toEqual([0, 0]);
  });

  it("R-H1 R-H2: connections idle since the same instant are pinged at 10 s and closed at 30 s in the order they opened; a talking one is not", () => {
    const r = new ServerRig();
    const [a, b, c] = [r.connect("a"), r.connect("b"), r.connect("c")];
    const t = r.now;
    r.now = t + HEARTBEAT_PING_AFTER_MS - 1;
    r.step({ type: "activity", conn: b });
    expect(r.st.wake?.at).toBe(t + HEARTBEAT_PING_AFTER_MS);
    r.now = t + HEARTBEAT_PING_AFTER_MS;
    expect(of(r.step({ type: "tick" }), "ping").map((p) => p.conn)).toEqual([a, c]);
    expect(r.st.wake?.at).toBe(t + HEARTBEAT_PING_AFTER_MS - 1 + HEARTBEAT_PING_AFTER_MS); // b's ping comes next
    r.now = t + HEARTBEAT_DEAD_AFTER_MS;
    const out = r.step({ type: "tick" });
    expect(of(out, "close").map((x) => x.conn)).toEqual([a, c]);
    expect([...r.st.conns.keys()]).toEqual([b]);
  });

  it("the deadline heap stays within its bound while one connection talks all the time, and a deadline changed past track() is named", () => {
    const r = new ServerRig();
    const [a] = [r.connect("a"), r.connect("b")];
    for (let i = 0; i < 1_000; i++) {
      r.now += 1;
      r.step({ type: "activity", conn: a });
    }
    expect(r.st.heartbeats.heap.length).toBeLessThanOrEqual(HEARTBEAT_HEAP_SLACK + 2 * 2 + 1);
    heartbeatInvariants(r.st);
    r.st.conns.get(a)!.hb.lastInbound += 5; // a write past track()
    expect(() => heartbeatInvariants(r.st)).toThrow(/its heartbeat deadline \d+ is not in the heartbeat heap/);
  });
});

describe("authorizations", () => {
  it("R-F5: two authorizations that expire at the same instant are dropped in the order of the client records", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    for (const id of ["b", "a", "c"]) r.connect(id);
    r.control({ op: "authorize", requestId: "r1", clientId: "a", instanceId: "ia", instanceNotYetSeen: true });
    r.control({ op: "authorize", requestId: "r2", clientId: "b", instanceId: "ib", instanceNotYetSeen: true });
    expect([...r.st.authorized]).toEqual(["a", "b"]);
    expect(r.st.wake).toMatchObject({ at: T0 + 1_000, timer: { kind: "authorization_expiry", clientId: "b" } }); // internal: the timer's name
    r.now = T0 + 1_000;
    const persisted = of(r.step({ type: "tick" }), "persist").flatMap((p) => p.records.map((x) => `${x.table}/${x.key}`));
    expect(persisted.filter((k) => k.startsWith("client/"))).toEqual(["client/b", "client/a"]);
    expect(r.st.clients.get("a")!.authorization).toBeNull();
    expect(r.st.authorized.size).toBe(0);
  });

  it("R-F5: with one authorization among many clients a step walks no client record; a revoked one leaves the kept set", () => {
    const r = new ServerRig({ authorizationTtlMs: 5_000 });
    for (let i = 0; i < 50; i++) r.connect(`h${i}`);
    r.connect("a");
    r.control({ op: "authorize", requestId: "r1", clientId: "a", instanceId: "ia", instanceNotYetSeen: true });
    expect(r.st.wake?.timer).toEqual({ kind: "authorization_expiry", clientId: "a" }); // internal: the timer's name
    r.now += 4_999;
    expect(walked(r.st.clients, () => void raw(r, { type: "tick" }))).toBe(0);
    expect(r.st.clients.get("a")!.authorization).not.toBeNull();
    r.control({ op: "revoke_authorization", requestId: "r2", clientId: "a" });
    expect(r.st.authorized.has("a")).toBe(false);
    expect(r.st.wake?.timer.kind).toBe("heartbeat"); // internal: the timer's name
  });
});
