// Registration at the server: connections, frames before and around the hello, fencing, identity claims and authorizations (core/server/registration.ts, clients.ts).
// (Moved from test/core/server-node-edges.test.ts, which drove the server
// reducer directly with hand-made agent frames.)
import { nextConnOrder, track } from "../../../core/server/heartbeats.js";
import { rowOf } from "../../../core/server/store.js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ClientHelloSchema, type ReconcileRequest } from "../../../protos/gen/rvbox/v1/agent_pb.js";
import { CommandLifecycle as L, ControlErrorSchema, ProtocolRangeSchema, ProtocolVersionSchema } from "../../../protos/gen/rvbox/v1/common_pb.js";
import { serverStep } from "../../../core/index.js";
import { Code } from "../../../core/errors.js";
import { encodeEnvelope, type Fence, type Payload } from "../../../core/codec/frame-codec.js";
import { rangeToWire, SUPPORTED_PROTOCOL } from "../../../core/codec/version.js";
import { MAX_INCIDENTS_KEPT, MAX_SERVER_CONNECTIONS } from "../../../core/limits.js";
import { testPorts } from "../../support/ports.js";

import { T0, argv, of, lifecycle, ServerRig, expectClosed } from "../../support/server-rig.js";
import { plainAuthorization, plainClaim, plainIncident } from "../../support/pair.js";

void MAX_INCIDENTS_KEPT;

describe("connections", () => {
  it("R-W1: a connection number opened twice is a programming error", () => {
    const r = new ServerRig();
    r.open();
    expect(() => serverStep(r.st, { type: "conn_open", conn: 1 }, T0, { ports: testPorts })).toThrow(/connection 1 opened twice/);
  });

  it("R-W1: the server holds at most MAX_SERVER_CONNECTIONS; one more is refused before it is tracked", () => {
    const r = new ServerRig();
    const fill = (n: number) => {
      for (let i = 0; i < n; i++) {
        // setup: connections poked in (opening MAX_SERVER_CONNECTIONS by input is slow), with their heartbeats tracked
        r.st.conns.set(1_000_000 + i, {
          conn: 1_000_000 + i,
          phase: "hello",
          clientId: "",
          instanceId: "",
          sessionId: "",
          generation: 0,
          version: null,
          hb: { lastInbound: T0, pinged: false },
          ingressPending: 0,
          inflight: 0,
          openedAt: T0,
          snapshotReceived: false,
          hbOrder: nextConnOrder(r.st),
        });
        track(r.st, r.st.conns.get(1_000_000 + i)!);
      }
    };
    fill(MAX_SERVER_CONNECTIONS - 1);
    r.step({ type: "conn_open", conn: 1 });
    expect(r.session(1)).toBeDefined();
    const out = r.step({ type: "conn_open", conn: 2 });
    expect(of(out, "close")).toEqual([{ type: "close", conn: 2, reason: `CODE_CAPACITY: ${MAX_SERVER_CONNECTIONS} connections open` }]);
    expect(r.session(2)).toBeUndefined();
    expect(r.sessions().length).toBe(MAX_SERVER_CONNECTIONS);
  });

  it("R-W5: a full ingress queue closes the connection without an error frame; unknown connections are ignored", () => {
    const r = new ServerRig();
    const c = r.connect();
    expect(of(r.step({ type: "ingress_full", conn: 99 }), "close")).toEqual([]);
    const out = r.step({ type: "ingress_full", conn: c });
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "CAPACITY: ingress queue full" }]);
    expect(r.sent(out)).toEqual([]);
    expect(r.client("a")!.connected).toBe(false);
  });

  it("R-H1: activity moves only that connection's heartbeat; frames for unknown connections change nothing", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now += 4_000;
    r.step({ type: "activity", conn: 77 });
    r.step({ type: "activity", conn: c });
    expect(timestampMs(r.session(c)!.lastInboundTime!)).toBe(T0 + 4_000);
    const out = r.step({ type: "frame", conn: 77, data: new Uint8Array([1, 2, 3]) });
    expect(out.filter((e) => e.type !== "wake")).toEqual([]);
  });

  it("R-H1 R-H2: the server pings at exactly 10 s of silence, once, and closes at exactly 30 s without an error frame", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.now = T0 + 9_999;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 10_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([{ type: "ping", conn: c }]);
    r.now = T0 + 20_000;
    expect(of(r.step({ type: "tick" }), "ping")).toEqual([]);
    r.now = T0 + 29_999;
    expect(r.session(c)).toBeDefined();
    r.now = T0 + 30_000;
    const out = r.step({ type: "tick" });
    expect(of(out, "close")).toEqual([{ type: "close", conn: c, reason: "UNSPECIFIED: heartbeat: no inbound activity for 30 s" }]);
    expect(r.sent(out)).toEqual([]);
    expect(r.session(c)).toBeUndefined();
  });

  it("R-H1: the wake is the earliest of heartbeats, authorization expiries and command deadlines; nothing to wait for, no wake", () => {
    const r = new ServerRig();
    expect(of(r.step({ type: "tick" }), "wake")).toEqual([]);
    const c = r.connect();
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 10_000);
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "x" });
    r.st.clients.get("a")!.authorization!.expiresAt = T0 + 3_000; // setup: an earlier expiry
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 3_000);
    r.submit("offline", "q", argv(), { queueExpiry: T0 + 1_000 });
    expect(of(r.step({ type: "tick" }), "wake").at(-1)!.at).toBe(T0 + 1_000);
    void c;
  });
});

describe("frames before and around registration", () => {
  it("R-T1 R-T2 R-W10: a text frame, garbage or an oversize frame gets its code and a close, before or after registration", () => {
    const r = new ServerRig();
    const c1 = r.open();
    expectClosed(
      r,
      r.step({ type: "frame", conn: c1, data: new Uint8Array([8, 1]), binary: false }),
      c1,
      Code.PROTOCOL_ERROR,
      "text frames are not part of the protocol",
    );
    const c2 = r.open();
    expectClosed(r, r.step({ type: "frame", conn: c2, data: new Uint8Array(1024 * 1024 + 1) }), c2, Code.PAYLOAD_TOO_LARGE);
    const c3 = r.connect();
    expectClosed(r, r.step({ type: "frame", conn: c3, data: new Uint8Array([0xff, 0xff]) }), c3, Code.PROTOCOL_ERROR);
  });

  it("R-F2: anything but a ClientHello first is PROTOCOL_ERROR; anything before the welcome left too", () => {
    const r = new ServerRig();
    const c = r.open();
    expectClosed(
      r,
      r.frame(c, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }, null),
      c,
      Code.PROTOCOL_ERROR,
      "eventAck before ClientHello",
    );
    r.autoDurable = false;
    const w = r.open();
    r.hello(w);
    expect(r.session(w)?.phase).toBe("welcoming");
    expect(r.sent(r.log, w, "serverWelcome")).toEqual([]);
    expectClosed(r, r.hello(w), w, Code.PROTOCOL_ERROR, "clientHello before ServerWelcome");
  });

  it("R-F2: client and instance ids must be 1-128 printable ASCII characters", () => {
    const bad: Array<[string, string, string]> = [
      ["", "i", "client_id must be 1-128 printable ASCII characters"],
      ["c".repeat(129), "i", "client_id must be 1-128 printable ASCII characters"],
      ["a b", "i", "client_id must be 1-128 printable ASCII characters"],
      ["é", "i", "client_id must be 1-128 printable ASCII characters"],
      ["a", "", "client_instance_id must be 1-128 printable ASCII characters"],
      ["a", "i".repeat(129), "client_instance_id must be 1-128 printable ASCII characters"],
      ["a", "i\n", "client_instance_id must be 1-128 printable ASCII characters"],
    ];
    for (const [client, inst, msg] of bad) {
      const r = new ServerRig();
      const c = r.open();
      expectClosed(r, r.hello(c, client, inst), c, Code.VALIDATION, msg);
      expect(r.clientList().length).toBe(0);
    }
    const r = new ServerRig();
    const c = r.open();
    r.hello(c, "c".repeat(128), "i".repeat(128));
    expect(r.session(c)?.phase).toBe("reconciling");
  });

  it("R-T4: a missing or inverted protocol range, or one without overlap, is INCOMPATIBLE_VERSION", () => {
    const v = (major: number, minor: number) => create(ProtocolVersionSchema, { major, minor });
    const cases: Array<[MessageInitShape<typeof ClientHelloSchema>["supportedProtocol"] | undefined, string]> = [
      [undefined, "protocol range missing"],
      [create(ProtocolRangeSchema, { min: v(1, 0) }), "protocol range missing"],
      [create(ProtocolRangeSchema, { min: v(1, 2), max: v(1, 0) }), "protocol range min > max"],
      [create(ProtocolRangeSchema, { min: v(2, 0), max: v(2, 5) }), "no shared protocol version: ours 1.0-1.1, theirs 2.0-2.5"],
    ];
    for (const [range, msg] of cases) {
      const r = new ServerRig();
      const c = r.open();
      const hello = create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i", ...(range ? { supportedProtocol: range } : {}) });
      expectClosed(r, r.frame(c, { case: "clientHello", value: hello }, null), c, Code.INCOMPATIBLE_VERSION, msg);
    }
  });

  it("R-F2 R-D6: the welcome selects the version and a fresh session; the request names exactly this client's non-terminal commands, in-flight first, then queued", () => {
    const r = new ServerRig();
    const a = r.connect("a");
    r.connect("b");
    r.running(a, "run");
    r.submit("a", "disp");
    r.submit("a", "acc");
    r.accept(a, "acc");
    r.submit("a", "done");
    r.accept(a, "done");
    r.event(a, "done", 1, lifecycle(L.REJECTED));
    r.submit("b", "other");
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    r.submit("a", "queued");
    r.event(a, "run", 2, lifecycle(L.RUNNING)); // ignored: connection gone
    const c = r.open();
    const out = r.hello(c, "a", "inst-a", { maxRunningCommands: 3, maxQueuedCommands: 4 });
    const welcome = r.sent(out, c, "serverWelcome");
    expect(welcome).toHaveLength(1);
    expect(welcome[0]!.lane).toBe("priority");
    expect(welcome[0]!.env.sessionGeneration).toBe(2n);
    expect(welcome[0]!.env.sessionId).toMatch(/^[0-9a-f]{32}$/);
    expect(welcome[0]!.env.sessionId).not.toBe(r.sent(r.log, a, "serverWelcome")[0]!.env.sessionId);
    expect(welcome[0]!.env.payload.value).toMatchObject({ selectedProtocol: { major: 1, minor: 1 }, serverTime: expect.anything() });
    const req = r.sent(out, c, "reconcileRequest")[0]!;
    expect(req.lane).toBe("data");
    const targets = (req.env.payload.value as ReconcileRequest).targets;
    expect(
      targets.map((t) => [t.issueUuid, Number(t.lastServerEventSeq), Number(t.commandRevision), Buffer.from(t.immutableRequestSha256).toString("hex")]),
      // the request hash is internal: a reader never sees it (and "queued" was never dispatched)
    ).toEqual(["run", "disp", "acc", "queued"].map((u) => [u, r.command(u).storedThrough, r.command(u).revision, r.cmd(u).hash]));
    expect(r.command("run").storedThrough).toBe(1);
    expect(r.client("a")).toMatchObject({ runningCommands: 0, queuedCommands: 0, maxRunningCommands: 3, maxQueuedCommands: 4 });
    expect(timestampMs(r.client("a")!.lastActivityTime!)).toBe(T0);
  });

  it("R-D8: a welcome or reconcile result whose connection went away before the persist was durable is not sent", () => {
    const r = new ServerRig();
    r.autoDurable = false;
    const c = r.open();
    r.hello(c);
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    expect(r.sent(r.flush())).toEqual([]);
    const d = r.open();
    r.hello(d);
    r.flush();
    expect(r.session(d)?.phase).toBe("reconciling");
    r.snapshot(d);
    r.step({ type: "conn_closed", conn: d, reason: "gone" });
    expect(r.sent(r.flush(), d, "reconcileResult")).toEqual([]);
  });

  it("R-F7: after the welcome every envelope must carry exactly the session id and generation", () => {
    for (const f of [
      (x: Fence) => ({ ...x, generation: x.generation + 1 }),
      (x: Fence) => ({ ...x, generation: x.generation - 1 }),
      (x: Fence) => ({ ...x, sessionId: "forged" }),
      () => null,
    ]) {
      const r = new ServerRig();
      const c = r.connect();
      const fence = f(r.fenceOf(c)!);
      expectClosed(
        r,
        r.frame(
          c,
          {
            case: "clientCapacity",
            value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 1, queuedCommands: 0, maxRunningCommands: 1, maxQueuedCommands: 1 },
          },
          fence,
        ),
        c,
        Code.STALE_GENERATION,
        `envelope fenced to generation ${fence?.generation ?? 0}, current 1`,
      );
    }
  });

  it("R-D7: a second snapshot on one session, a second hello or a server-only payload is PROTOCOL_ERROR", () => {
    const r = new ServerRig();
    const c = r.connect();
    expectClosed(r, r.snapshot(c), c, Code.PROTOCOL_ERROR, "second ReconcileSnapshot on one session");
    const h = new ServerRig();
    const d = h.connect();
    expectClosed(
      h,
      h.frame(d, { case: "clientHello", value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "inst-a" }) }),
      d,
      Code.PROTOCOL_ERROR,
      "unexpected clientHello from agent",
    );
    const w = new ServerRig();
    const e = w.connect();
    expectClosed(
      w,
      w.frame(e, { case: "eventAck", value: { $typeName: "rvbox.v1.EventAck", issueUuid: "x", throughEventSeq: 1n } }),
      e,
      Code.PROTOCOL_ERROR,
      "unexpected eventAck from agent",
    );
  });

  it("R-W2: the agent's capacity report replaces the server's view, with limits capped at 65536", () => {
    const r = new ServerRig();
    const c = r.connect();
    r.frame(c, {
      case: "clientCapacity",
      value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 2, queuedCommands: 5, maxRunningCommands: 70_000, maxQueuedCommands: 65_536 },
    });
    expect(r.client("a")).toMatchObject({ runningCommands: 2, queuedCommands: 5, maxRunningCommands: 65_536, maxQueuedCommands: 65_536 });
    r.frame(c, {
      case: "clientCapacity",
      value: { $typeName: "rvbox.v1.ClientCapacity", runningCommands: 0, queuedCommands: 0, maxRunningCommands: 65_535, maxQueuedCommands: 3 },
    });
    expect(r.client("a")).toMatchObject({ runningCommands: 0, queuedCommands: 0, maxRunningCommands: 65_535, maxQueuedCommands: 3 });
  });

  it("R-D13 R-W10: an agent error opens a store incident or is traced; closeSession ends the session without an answer", () => {
    const r = new ServerRig();
    const c = r.connect();
    const err = (code: Code, message: string, closeSession: boolean): Payload => ({
      case: "error",
      value: { $typeName: "rvbox.v1.AgentError", error: create(ControlErrorSchema, { code, message }), closeSession },
    });
    const store = r.frame(c, err(Code.STORE_INCIDENT, "journal crc", false));
    expect(r.incidents().map(plainIncident)).toEqual([
      { id: "inc-1", clientId: "a", uuid: "", kind: "agent_store_incident", detail: "journal crc", at: T0, acknowledged: false },
    ]);
    expect(r.disk.durable.get("incident")?.get("inc-1")).toMatchObject({ kind: "agent_store_incident" });
    expect(r.sent(store)).toEqual([]);
    const other = r.frame(c, err(Code.NOT_FOUND, "what", false));
    expect(
      of(other, "trace")
        .filter((t) => t.event === "agent_error")
        .map((t) => t.detail),
    ).toEqual([{ conn: c, code: "NOT_FOUND", message: "what" }]);
    expect(r.incidents().length).toBe(1);
    expect(r.session(c)).toBeDefined();
    const bye = r.frame(c, err(Code.PROTOCOL_ERROR, "bye", true));
    expect(of(bye, "close")).toEqual([{ type: "close", conn: c, reason: "UNSPECIFIED: agent closed the session" }]);
    expect(r.sent(bye)).toEqual([]);
    expect(r.session(c)).toBeUndefined();
  });
});

describe("identity: fencing, claims and authorizations", () => {
  it("R-F3: the same instance registering again fences the old session with STALE_GENERATION and takes the next generation", () => {
    const r = new ServerRig();
    const old = r.connect("a", "i1");
    const c = r.open();
    const out = r.hello(c, "a", "i1");
    expectClosed(r, out, old, Code.STALE_GENERATION, "fenced by a newer registration of this client");
    expect(r.client("a")).toMatchObject({ generation: 2n, connected: true, instanceId: "i1" });
    expect(r.session(c)).toMatchObject({ clientId: "a", generation: 2n });
    expect(rowOf(r.disk.durable, "client", "a")!.generation).toBe(2);
    expect(rowOf(r.disk.durable, "client", "a")!.conn).toBe(0);
  });

  it("R-F4: another instance while a session is live is IDENTITY_CONFLICT and becomes the pending claim; repeated attempts are counted", () => {
    const r = new ServerRig();
    const a = r.connect("a", "i1");
    const c1 = r.open();
    expectClosed(r, r.hello(c1, "a", "i2"), c1, Code.IDENTITY_CONFLICT, "client id a is live under another instance; recorded as a pending claim");
    expect(plainClaim(r.claimOf("a"))).toEqual({ instanceId: "i2", at: T0, attempts: 1 });
    r.now += 5;
    const c2 = r.open();
    r.hello(c2, "a", "i2");
    expect(plainClaim(r.claimOf("a"))).toEqual({ instanceId: "i2", at: T0 + 5, attempts: 2 });
    const c3 = r.open();
    r.hello(c3, "a", "i3");
    expect(plainClaim(r.claimOf("a"))).toEqual({ instanceId: "i3", at: T0 + 5, attempts: 1 });
    expect(rowOf(r.disk.durable, "client", "a")!.pendingClaim).toEqual({ instanceId: "i3", at: T0 + 5, attempts: 1 });
    expect(r.client("a")).toMatchObject({ connected: true, generation: 1n, instanceId: "i1" });
    expect(r.session(a)).toMatchObject({ clientId: "a", generation: 1n });
  });

  it("R-F6: with no live session another instance is accepted; a pending claim of that instance is cleared, another's is kept", () => {
    const r = new ServerRig();
    const a = r.connect("a", "i1");
    r.hello(r.open(), "a", "i2"); // claim by i2
    r.step({ type: "conn_closed", conn: a, reason: "gone" });
    expect(r.client("a")!.connected).toBe(false);
    const c = r.connect("a", "i3");
    expect(r.client("a")).toMatchObject({ connected: true, instanceId: "i3", generation: 2n });
    expect(r.session(c)).toMatchObject({ clientId: "a", instanceId: "i3", generation: 2n });
    expect(plainClaim(r.claimOf("a"))).toMatchObject({ instanceId: "i2" });
    r.step({ type: "conn_closed", conn: c, reason: "gone" });
    r.connect("a", "i2");
    expect(r.claimOf("a")).toBeUndefined();
  });

  it("R-F5: an authorization admits exactly that instance until 1 ms before its expiry, once", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    const a = r.connect("a", "i1");
    expect(r.control({ op: "authorize", requestId: "x", clientId: "nobody", instanceId: "i2" })).toMatchObject({
      ok: false,
      error: { code: Code.NOT_FOUND, message: "no client nobody has registered with this server" },
    });
    expect(r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" })).toEqual({ ok: true, instanceId: "i2", expiresAt: T0 + 1_000 });
    expect(plainAuthorization(r.client("a"))).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
    expect(rowOf(r.disk.durable, "client", "a")!.authorization).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
    // A different instance does not use it.
    const x = r.open();
    expectClosed(r, r.hello(x, "a", "i9"), x, Code.IDENTITY_CONFLICT);
    expect(r.client("a")!.authorizedInstanceId).not.toBe("");
    r.now = T0 + 999;
    const b = r.open();
    const out = r.hello(b, "a", "i2");
    expect(of(out, "trace").some((t) => t.event === "authorization_consumed")).toBe(true);
    expect(r.session(a)).toBeUndefined(); // fenced
    expect(r.client("a")).toMatchObject({ connected: true, instanceId: "i2", authorizedInstanceId: "" });
    expect(r.session(b)).toMatchObject({ clientId: "a", instanceId: "i2" });
    // one-shot: i1 is now refused (as the instance this takeover replaced)
    const back = r.open();
    expectClosed(r, r.hello(back, "a", "i1"), back, Code.REPLACED);
  });

  it("R-F5: at exactly its expiry an authorization no longer admits, and the tick clears it durably", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    r.connect("a", "i1");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    r.now = T0 + 1_000;
    const b = r.open();
    expectClosed(r, r.hello(b, "a", "i2"), b, Code.IDENTITY_CONFLICT);
    const t = new ServerRig({ authorizationTtlMs: 1_000 });
    t.connect("a", "i1");
    t.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    t.now = T0 + 999;
    t.step({ type: "tick" });
    expect(t.client("a")!.authorizedInstanceId).not.toBe("");
    t.now = T0 + 1_000;
    const out = t.step({ type: "tick" });
    expect(t.client("a")!.authorizedInstanceId).toBe("");
    expect(
      of(out, "persist")
        .flatMap((p) => p.records)
        .filter((x) => x.table === "client"),
    ).toEqual([expect.objectContaining({ key: "a", value: expect.objectContaining({ authorization: null }) })]);
  });

  it("R-F5 R-F6: the authorized instance's first accepted registration consumes the authorization even when no session was live", () => {
    const r = new ServerRig();
    const i = r.open();
    r.hello(i, "a", "I");
    r.snapshot(i);
    const j = r.open();
    expectClosed(r, r.hello(j, "a", "J"), j, Code.IDENTITY_CONFLICT);
    expect(r.claimOf("a")?.instanceId).toBe("J");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J" });
    // I goes away; J registers normally (R-F6: no live session) and is welcomed.
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    const j2 = r.open();
    const out = r.hello(j2, "a", "J");
    expect(r.sent(out, j2, "serverWelcome")).toHaveLength(1);
    expect(r.client("a")!.authorizedInstanceId).toBe("");
    expect(r.disk.durable.get("client")?.get("a")).toMatchObject({ authorization: null });
    r.snapshot(j2);
    r.step({ type: "conn_closed", conn: j2, reason: "gone" });
    // I comes back: J took over by an operator's authorization, so I is told it was replaced
    // (no pending claim); authorized again, I is accepted.
    const i1 = r.open();
    expectClosed(r, r.hello(i1, "a", "I"), i1, Code.REPLACED);
    expect(r.claimOf("a")).toBeUndefined();
    expect(r.control({ op: "authorize", requestId: "auth-i", clientId: "a", instanceId: "I", instanceNotYetSeen: false })).toMatchObject({ ok: true });
    const i2 = r.open();
    r.hello(i2, "a", "I");
    r.snapshot(i2);
    // J comes back: without a new authorization it is refused, and I keeps its session.
    const j3 = r.open();
    expectClosed(r, r.hello(j3, "a", "J"), j3, Code.REPLACED);
    expect(r.session(i2)?.phase).toBe("ready");
    expect(r.client("a")!.instanceId).toBe("I");
  });

  it("R-F5: an authorization for another instance survives a normal registration of this one", () => {
    const r = new ServerRig();
    const i = r.connect("a", "I");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "J" });
    r.step({ type: "conn_closed", conn: i, reason: "gone" });
    r.connect("a", "I");
    expect(r.client("a")!.authorizedInstanceId).toBe("J");
  });

  it("R-F5: a registration drops an expired authorization it did not use", () => {
    const r = new ServerRig({ authorizationTtlMs: 1_000 });
    const a = r.connect("a", "i1");
    r.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    r.step({ type: "conn_closed", conn: a, reason: "x" });
    r.now = T0 + 1_000; // expired, and no tick ran yet
    r.st.clients.get("a")!.authorization!.expiresAt = T0 + 1_000; // setup: expiring now
    const c = r.open();
    serverStep(
      r.st,
      {
        type: "frame",
        conn: c,
        data: encodeEnvelope(null, {
          case: "clientHello",
          value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i1", supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL) }),
        }),
      },
      r.now,
      { ports: testPorts },
    );
    expect(r.client("a")!.authorizedInstanceId).toBe("");
    const s = new ServerRig({ authorizationTtlMs: 1_000 });
    const b = s.connect("a", "i1");
    s.control({ op: "authorize", requestId: "auth", clientId: "a", instanceId: "i2" });
    s.step({ type: "conn_closed", conn: b, reason: "x" });
    s.now = T0 + 999;
    const d = s.open();
    serverStep(
      s.st,
      {
        type: "frame",
        conn: d,
        data: encodeEnvelope(null, {
          case: "clientHello",
          value: create(ClientHelloSchema, { clientId: "a", clientInstanceId: "i1", supportedProtocol: rangeToWire(SUPPORTED_PROTOCOL) }),
        }),
      },
      s.now,
      { ports: testPorts },
    );
    expect(plainAuthorization(s.client("a"))).toEqual({ instanceId: "i2", expiresAt: T0 + 1_000 });
  });
});
